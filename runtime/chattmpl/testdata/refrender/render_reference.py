#!/usr/bin/env python3
"""Renders conversations.json with transformers' apply_chat_template
(tokenize=False) through the Gemma 4 and Qwen3.5 chat templates here, on the
device machine (no network). Writes reference.json = {case: {template: text}}
to $OUT (or here); a render that raises is recorded as "ERROR: ...", and the Go
test then expects Render to fail too. Logs to stdout (render_reference.out).

Usage: render_reference.py TOKENIZER_DIR
TOKENIZER_DIR holds the Gemma 4 tokenizer.json and tokenizer_config.json
(../shared/refdata/tokenizer/gemma4); transformers needs a tokenizer object,
whose special tokens (bos_token "<bos>") reach the templates as variables.
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = ["gemma4.2026-04-10.jinja", "gemma4.2026-04-28.jinja", "qwen3_5.jinja"]


def main():
    import transformers
    print("transformers", transformers.__version__, "python", sys.version.split()[0])
    tokdir = sys.argv[1]
    try:
        tok = transformers.AutoTokenizer.from_pretrained(tokdir)
        print("tokenizer: AutoTokenizer ->", type(tok).__name__)
    except Exception as e:
        print("AutoTokenizer failed (%r), using PreTrainedTokenizerFast" % (e,))
        tok = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(tokdir, "tokenizer.json"),
                                                   bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                                   unk_token="<unk>", mask_token="<mask>")
    print("bos_token", repr(tok.bos_token), "eos_token", repr(tok.eos_token))
    templates = {}
    for name in TEMPLATES:
        src = open(os.path.join(HERE, name), encoding="utf-8").read()
        print(name, "sha256", hashlib.sha256(src.encode("utf-8")).hexdigest())
        templates[name] = src
    cases = json.load(open(os.path.join(HERE, "conversations.json"), encoding="utf-8"))
    out = {}
    errors = 0
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
                errors += 1
            out[c["name"]][tname] = text
            print("==", c["name"], tname, json.dumps(text, ensure_ascii=False))
    print("cases", len(cases), "templates", len(templates), "errors", errors)
    dest = os.environ.get("OUT") or HERE
    with open(os.path.join(dest, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
