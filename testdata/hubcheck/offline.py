#!/usr/bin/env python3
"""Steps of offline.sh that need Python: the official client, comparisons,
the request log. Standard library and huggingface_hub only."""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check import sha256_file  # noqa: E402  (run.sh's helpers, beside this file)


def fill(repo, cache):
    from huggingface_hub import snapshot_download
    print(snapshot_download(repo_id=repo, cache_dir=cache))


def tree(d):
    out = {}
    for root, _, files in os.walk(d):
        for n in files:
            p = os.path.join(root, n)
            out[os.path.relpath(p, d)] = p
    return out


def same(a, b):
    ta, tb = tree(a), tree(b)
    if set(ta) != set(tb):
        sys.exit(f"files differ: {sorted(set(ta) ^ set(tb))}")
    for rel in sorted(ta):
        if rel == "manifest.json":
            ma, mb = (json.load(open(t[rel])) for t in (ta, tb))
            if ma["files"] != mb["files"] or ma["qpack"]["fileDigests"] != mb["qpack"]["fileDigests"]:
                sys.exit("manifest file lists or digests differ")
            continue
        if sha256_file(ta[rel]) != sha256_file(tb[rel]):
            sys.exit(f"{rel} differs")
    print(f"{len(ta)} files identical", file=sys.stderr)


def drop(cache, repo, *paths):
    snaps = os.path.join(cache, "models--" + repo.replace("/", "--"), "snapshots")
    (commit,) = os.listdir(snaps)
    for p in paths:
        os.remove(os.path.realpath(os.path.join(snaps, commit, p)))


def fetched(log, src, *missing):
    got = {}
    for line in open(log):
        r = json.loads(line)
        if r["Method"] == "GET" and r["File"]:
            got[r["File"]] = got.get(r["File"], 0) + r["BodyBytes"]
    want = {}
    for m in missing:
        p = os.path.join(src, m)
        n = os.path.getsize(p)
        if m.endswith(".safetensors"):  # its header is read once before it streams
            with open(p, "rb") as f:
                n += 8 + struct.unpack("<Q", f.read(8))[0]
        want[m] = n
    print(f"fetched per file: {got}, expected {want}", file=sys.stderr)
    if got != want:
        sys.exit(f"fetched {got}, expected {want}")


if __name__ == "__main__":
    step, args = sys.argv[1], sys.argv[2:]
    {"fill": fill, "same": same, "drop": drop, "fetched": fetched}[step](*args)
