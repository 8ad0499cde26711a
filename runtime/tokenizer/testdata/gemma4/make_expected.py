#!/usr/bin/env python3
"""Reference ids for the Go Gemma 4 tokenizer check (runs on the device
machine, where the Hugging Face `tokenizers` library is installed).

Usage: make_expected.py TOKENIZER_JSON_GZ [RENDERS_JSON]
  TOKENIZER_JSON_GZ  ../shared/refdata/tokenizer/gemma4/tokenizer.json.gz
  RENDERS_JSON       reference.json of runtime/chattmpl/testdata/refrender
                     (its Gemma renders are encoded too), optional
Inputs here: corpus.jsonl (one {"text"} or {"hex"} object per line) and
variants.json (top-level fields replaced in the real tokenizer.json, and
model.ignore_merges, to check the Metaspace / Prepend / Strip paths on the real
vocab). Writes expected.json.gz to $OUT (or here); logs to stdout
(make_expected.out).

For each variant: the ids of every corpus line (encode, add_special_tokens
False: Gemma 4's post_processor adds nothing anyway), the decode of those ids
with and without skip_special_tokens, and decodes of hand-made id sequences
(byte-fallback runs valid and invalid, special tokens between byte tokens,
leading ▁, an id past the vocab).
"""
import gzip
import hashlib
import json
import os
import sys

import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))

DECODE_CASES = [
    ["<0xE4>", "<0xB8>", "<0xAD>"],
    ["<0xE4>", "<0xB8>"],
    ["<0xE4>", "a", "<0xB8>", "<0xAD>"],
    ["<0xFF>"],
    ["<0xE4>", "<0xB8>", "<0xAD>", "<0xFF>"],
    ["<0xE4>", "<0xB8>", "<0xAD>", "<0xE4>"],
    ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"],
    ["<0x41>", "<0x20>", "<0x0A>"],
    ["▁hello", "<0x41>", "▁world"],
    ["<bos>", "▁hi", "<turn|>", "<0xE4>", "<eos>", "<0xB8>", "<0xAD>"],
    ["▁", "▁", "hello"],
    ["▁▁", "hello", "▁there"],
    ["<|turn>", "▁user", "\n", "<turn|>"],
    ["hello", "▁"],
    ["<0xED>", "<0xA0>", "<0x80>"],
    ["<0xC3>", "<0xA9>", "▁", "<0xC3>"],
]


def main():
    src = sys.argv[1]
    raw = gzip.open(src, "rb").read()
    print("tokenizers", tokenizers.__version__, "python", sys.version.split()[0])
    print("tokenizer.json sha256:", hashlib.sha256(raw).hexdigest(), "bytes:", len(raw))
    base = json.loads(raw)
    corpus = []
    for line in open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8"):
        o = json.loads(line)
        corpus.append(o["text"] if "text" in o else bytes.fromhex(o["hex"]).decode("utf-8", "replace"))
    print("corpus lines:", len(corpus))
    renders = []
    if len(sys.argv) > 2:
        ref = json.load(open(sys.argv[2], encoding="utf-8"))
        for case in sorted(ref):
            for tname in sorted(ref[case]):
                t = ref[case][tname]
                if tname.startswith("gemma4") and not t.startswith("ERROR"):
                    renders.append(t)
    print("renders:", len(renders))
    variants = json.load(open(os.path.join(HERE, "variants.json"), encoding="utf-8"))
    out = {"tokenizers": tokenizers.__version__, "sha256": hashlib.sha256(raw).hexdigest(), "variants": {}}
    for vname, v in variants.items():
        d = json.loads(raw)
        for k in ("normalizer", "pre_tokenizer", "decoder"):
            if k in v:
                d[k] = v[k]
        if v.get("ignore_merges"):
            d["model"]["ignore_merges"] = True
        tk = tokenizers.Tokenizer.from_str(json.dumps(d, ensure_ascii=False)) if v else tokenizers.Tokenizer.from_str(raw.decode("utf-8"))
        res = {"encode": [], "decode": [], "decode_skip": [], "cases": [], "renders": []}
        total = 0
        for text in corpus:
            ids = tk.encode(text, add_special_tokens=False).ids
            total += len(ids)
            res["encode"].append(ids)
            res["decode"].append(tk.decode(ids, skip_special_tokens=False))
            res["decode_skip"].append(tk.decode(ids, skip_special_tokens=True))
        same = sum(1 for t, d in zip(corpus, res["decode"]) if t == d)
        for toks in DECODE_CASES:
            ids = [tk.token_to_id(t) for t in toks]
            if None in ids:
                print(vname, "decode case skipped, unknown token in", toks)
                continue
            res["cases"].append({"tokens": toks, "ids": ids, "decoded": tk.decode(ids, skip_special_tokens=False),
                                 "decoded_skip": tk.decode(ids, skip_special_tokens=True)})
        try:
            res["cases"].append({"tokens": ["(id 300000)", "a"], "ids": [300000, tk.token_to_id("a")],
                                 "decoded": tk.decode([300000, tk.token_to_id("a")], skip_special_tokens=False),
                                 "decoded_skip": tk.decode([300000, tk.token_to_id("a")], skip_special_tokens=True)})
        except Exception as e:
            print(vname, "decode of an id past the vocab raised", repr(e))
        if vname == "gemma4":
            for t in renders:
                res["renders"].append({"text": t, "ids": tk.encode(t, add_special_tokens=False).ids})
        out["variants"][vname] = res
        print("%s: %d ids, decode == text on %d/%d lines, %d decode cases, %d renders" %
              (vname, total, same, len(corpus), len(res["cases"]), len(res["renders"])))
    dest = os.environ.get("OUT") or HERE
    with gzip.GzipFile(os.path.join(dest, "expected.json.gz"), "wb", mtime=0) as f:
        f.write(json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


if __name__ == "__main__":
    main()
