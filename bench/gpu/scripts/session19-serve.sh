#!/bin/bash
# Nineteenth session: what the server adds to a decode step on the GPU,
# with the streamed text written on the decode loop (serve-base: HEAD with
# server/chat.go as of 86b7fd9, before textQueue) and off it (serve-new:
# HEAD), each bench/serve's same-run ratio of the server's decode rate to
# runner.Session.Generate's, on the CUDA backend (-backend cuda, 4 layers
# at the 35B's dims: every expert in bench/serve's 2 GiB cache; 512
# tokens, greedy), 3 rounds a run (the first warms the caches: read the
# later two), two runs of each, interleaved.
#   BUILD=1 bash bench/gpu/scripts/session19-serve.sh    (here: .devcarry-serve/)
#   bash bench/gpu/scripts/session19-serve.sh            (device; carry .devcarry-serve)
set -u
cd "$(git rev-parse --show-toplevel)"
S=.devcarry-serve
if [ "${BUILD:-0}" = 1 ]; then
	set -e
	export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
	rm -rf $S && mkdir -p $S
	go build -trimpath -ldflags=-s -o $S/serve-new ./bench/serve
	WT=$(mktemp -d /tmp/qpack-serve-base.XXXXXX)
	trap 'git worktree remove --force "$WT" 2>/dev/null; rm -rf "$WT"' EXIT
	git worktree add -q --detach "$WT" HEAD
	git show 86b7fd9:server/chat.go >"$WT/server/chat.go"
	(cd "$WT" && go build -trimpath -ldflags=-s -o "$OLDPWD/$S/serve-base" ./bench/serve)
	gzip -9 $S/serve-new $S/serve-base
	du -sh $S
	exit 0
fi
O=$OUT
W=/tmp/s19serve
mkdir -p $W
for f in serve-new serve-base; do [ -f $S/$f ] || gunzip -k $S/$f.gz; done
for r in 1 2; do
	for v in new base; do
		timeout 150 $S/serve-$v -backend cuda -layers 4 -tokens 512 -rounds 3 -reuse-rounds 0 -load-rounds 0 -json >$W/$v-$r.json 2>$W/$v-$r.err
		echo "$v round $r rc $?" >>$W/times.txt
		tar -C $W -czf $O/serve.tgz .
	done
done
cat $W/times.txt
python3 -c '
import json, sys
for f in sorted(sys.argv[1:]):
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f, "unreadable:", e); continue
    print(f, "generate", d["generate_decode_tok_per_sec"], "server", d["server_decode_tok_per_sec"], "ratio", d["decode_ratios"])
' $W/*.json
