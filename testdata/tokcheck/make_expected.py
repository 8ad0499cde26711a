#!/usr/bin/env python3
"""Reference ids for the Go tokenizer check (runs on the device machine).

Inputs (this directory):
  qwen.tiktoken.gz                gzip of refdata/tokenizer/qwen3/qwen.tiktoken
  tokenizer_config.Qwen3-4B.json  the 26 added tokens (ids 151643..151668)
  corpus.jsonl                    one JSON string per line
  qwen3-tokenizer.json            built by the Go test:
                                  go test ./runtime/tokenizer -run TestQwenBuildJSON -update

Outputs:
  expected.jsonl     tiktoken's ids for each corpus line, one JSON array per line
  stdout             the log (committed as make_expected.out)

tiktoken does no Unicode normalization while the Hugging Face tokenizer (and
ours) applies NFC first, so every line is NFC-normalized before tiktoken sees
it. The Hugging Face `tokenizers` library is also run on the Go-built
tokenizer.json, on the raw (un-normalized) line, and must agree with tiktoken.
"""
import base64
import gzip
import hashlib
import json
import os
import sys
import unicodedata

import tiktoken
import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
PAT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def main():
    print("tiktoken", tiktoken.__version__, "tokenizers", tokenizers.__version__, "python", sys.version.split()[0])
    raw = gzip.open(os.path.join(HERE, "qwen.tiktoken.gz"), "rb").read()
    print("qwen.tiktoken sha256:", hashlib.sha256(raw).hexdigest())
    ranks = {}
    for line in raw.splitlines():
        if not line:
            continue
        b64, r = line.split()
        ranks[base64.b64decode(b64)] = int(r)
    assert sorted(ranks.values()) == list(range(len(ranks))), "ranks not dense"
    print("ranks:", len(ranks))

    cfg = json.load(open(os.path.join(HERE, "tokenizer_config.Qwen3-4B.json"), encoding="utf-8"))
    special = {v["content"]: int(k) for k, v in cfg["added_tokens_decoder"].items()}
    print("added tokens:", len(special))

    enc = tiktoken.Encoding(name="qwen3", pat_str=PAT, mergeable_ranks=ranks, special_tokens=special)

    with open(os.path.join(HERE, "corpus.jsonl"), encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    corpus = [json.loads(l) for l in lines]
    print("corpus lines:", len(corpus))

    tj_path = os.path.join(HERE, "qwen3-tokenizer.json")
    tj = open(tj_path, "rb").read()
    print("tokenizer_json_sha256:", hashlib.sha256(tj).hexdigest())
    hf = tokenizers.Tokenizer.from_str(tj.decode("utf-8"))
    print("hf vocab size (with added):", hf.get_vocab_size(with_added_tokens=True))

    expected = []
    n_nfc_changed = 0
    hf_diff = 0
    hf_dec_diff = 0
    for i, s in enumerate(corpus):
        s_nfc = unicodedata.normalize("NFC", s)
        if s_nfc != s:
            n_nfc_changed += 1
        ids = enc.encode(s_nfc, allowed_special="all")
        expected.append(ids)
        hids = hf.encode(s, add_special_tokens=False).ids
        if hids != ids:
            hf_diff += 1
            print(f"HF DIFFERS line {i+1} {s!r}\n  tiktoken {ids}\n  hf       {hids}")
        if enc.decode(ids) != s_nfc:
            print(f"tiktoken decode differs line {i+1}")
        if hf.decode(ids, skip_special_tokens=False) != s_nfc:
            hf_dec_diff += 1
            print(f"HF decode differs line {i+1}: {hf.decode(ids, skip_special_tokens=False)!r}")

    with open(os.path.join(HERE if not os.environ.get("OUT") else os.environ["OUT"], "expected.jsonl"), "w", encoding="utf-8") as f:
        for ids in expected:
            f.write(json.dumps(ids) + "\n")
    total = sum(len(x) for x in expected)
    print(f"lines changed by NFC: {n_nfc_changed}")
    print(f"total tiktoken ids: {total}")
    print(f"hf_vs_tiktoken: {len(corpus) - hf_diff}/{len(corpus)} equal")
    print(f"hf_decode_vs_nfc: {len(corpus) - hf_dec_diff}/{len(corpus)} equal")

    # A few extra probes of regex corner cases, logged for the record.
    for s in ["'ſ", "It'ſ", "'K", "x\u0085y", "a\u2028b", "1\u00a02", "\u00a0\u00a0x"]:
        print("probe", repr(s), "tiktoken", enc.encode(s, allowed_special="all"), "hf", hf.encode(s, add_special_tokens=False).ids)


if __name__ == "__main__":
    main()
