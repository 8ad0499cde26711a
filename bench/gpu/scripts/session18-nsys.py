"""Reduces an Nsight Systems kernel trace (nsys stats -r cuda_gpu_trace -f
csv) of a resident decode run to where a token's GPU time goes: each
kernel's time a token (its count a token tells its place: 8 a token is one
a layer), and the GPU idle between consecutive kernels, binned. Only the
last TOKENS steps' share counts: the kernels after the prompt's are those
after the (TOKENS+1)-th last select_list (a step's last kernel when the
logits' top is selected on the device); else everything, the prompt's
pass included (a 16-token prompt: about one step's worth).

usage: python3 session18-nsys.py trace.csv TOKENS
"""
import csv
import sys
from collections import defaultdict


def main():
    path, tokens = sys.argv[1], int(sys.argv[2])
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            name = r.get("Name", "")
            start = r.get("Start (ns)")
            dur = r.get("Duration (ns)")
            if start is None or dur is None or not dur:
                continue
            # memcpy/memset rows have names like [CUDA memcpy ...]
            rows.append((int(start), int(dur), name))
    rows.sort()
    first = 0
    for mark in ("select_list",):
        ends = [i for i, r in enumerate(rows) if r[2].startswith(mark)]
        if len(ends) > tokens:
            first = ends[-tokens - 1] + 1
            print(f"steps end at {mark}")
            break
    rows = rows[first:]
    n = tokens
    per = defaultdict(lambda: [0, 0])
    for s, d, name in rows:
        key = name.split("(")[0][:40]
        per[key][0] += 1
        per[key][1] += d
    span = rows[-1][0] + rows[-1][1] - rows[0][0]
    busy = sum(d for _, d, _ in rows)
    print(f"{len(rows)} operations over {n} tokens: {span / n / 1e3:.1f} us a token from first to last, "
          f"{busy / n / 1e3:.1f} us of it in operations ({len(rows) / n:.1f} a token)")
    print(f"{'kernel':42s} {'a token':>8s} {'us a token':>11s} {'us each':>8s} {'share':>6s}")
    for key, (c, d) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{key:42s} {c / n:8.2f} {d / n / 1e3:11.2f} {d / c / 1e3:8.2f} {100 * d / busy:5.1f}%")
    bins = [(0, 1), (1, 2), (2, 5), (5, 20), (20, 100), (100, 1e18)]
    gaps = defaultdict(lambda: [0, 0])
    overlap = 0
    end = rows[0][0] + rows[0][1]
    for s, d, _ in rows[1:]:
        g = (s - end) / 1e3
        if g < 0:
            overlap += 1
            g = 0
        for lo, hi in bins:
            if lo <= g < hi:
                gaps[(lo, hi)][0] += 1
                gaps[(lo, hi)][1] += g
                break
        end = max(end, s + d)
    print(f"gaps between an operation's end and the next one's start ({overlap} overlapping):")
    for lo, hi in bins:
        c, t = gaps[(lo, hi)]
        print(f"  {lo:>4}-{hi if hi < 1e17 else 'inf':>4} us: {c / n:7.2f} a token, {t / n:8.2f} us a token")


if __name__ == "__main__":
    main()
