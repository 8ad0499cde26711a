#!/usr/bin/env python3
"""Renders conversations.json with transformers' apply_chat_template (device
machine, no network) using two real Qwen3 templates: chat_template.Qwen3-0.6B.jinja
and the chat_template of tokenizer_config.Qwen3-4B.json. Writes
reference.json = {case: {template: text}} to $OUT (or here) and logs to stdout.

Needs a tokenizer.json for transformers to build a tokenizer object; the Go
test TestQwenBuildJSON -update writes one to testdata/tokcheck/.
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def main():
    import transformers
    print("transformers", transformers.__version__)
    templates = {
        "qwen3-0.6b": open(os.path.join(HERE, "chat_template.Qwen3-0.6B.jinja"), encoding="utf-8").read(),
        "qwen3-4b-config": json.load(open(os.path.join(HERE, "tokenizer_config.Qwen3-4B.json"), encoding="utf-8"))["chat_template"],
    }
    cases = json.load(open(os.path.join(HERE, "conversations.json"), encoding="utf-8"))
    tj = os.path.join(ROOT, "testdata", "tokcheck", "qwen3-tokenizer.json")
    from transformers import PreTrainedTokenizerFast
    tok = PreTrainedTokenizerFast(tokenizer_file=tj, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    out = {}
    for c in cases:
        out[c["name"]] = {}
        for tname, tmpl in templates.items():
            kw = {}
            if "enable_thinking" in c:
                kw["enable_thinking"] = c["enable_thinking"]
            try:
                text = tok.apply_chat_template(c["messages"], tools=c.get("tools"), chat_template=tmpl, tokenize=False,
                                               add_generation_prompt=c["add_generation_prompt"], **kw)
            except Exception as e:  # recorded, not fatal
                text = "ERROR: %r" % (e,)
            out[c["name"]][tname] = text
            print("==", c["name"], tname, json.dumps(text, ensure_ascii=False))
    dest = os.environ.get("OUT") or HERE
    with open(os.path.join(dest, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
