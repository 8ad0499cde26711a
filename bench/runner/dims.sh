#!/bin/sh
# Decode at Gemma 4 26B-A4B and Qwen3.5-397B-A17B per-layer dims (issue 14),
# each cache size with speculation off and on, two rounds, no prefill (at
# these dims a token-by-token prefill reads tens of GB). Outputs go to
# bench/runner/results/. Run from the repository root; names as arguments
# (gemma26b-3l-v32768 ...) run only those.
set -eu
out=bench/runner/results
mkdir -p "$out"
only="$*"
go build -o /tmp/qpack-bench-runner-dims ./bench/runner
run() {
	name=$1
	shift
	if [ $# -gt 0 ] && [ -n "$only" ] && ! echo " $only " | grep -q " $name "; then
		return
	fi
	{ echo "\$ go run ./bench/runner $*"; date -u; uptime; } >"$out/$name.txt"
	/tmp/qpack-bench-runner-dims "$@" >>"$out/$name.txt" 2>"$out/$name.stderr.txt"
	{ date -u; uptime; } >>"$out/$name.txt"
}
run gemma26b-3l-v32768 -dims gemma26b -layers 3 -vocab 32768 -fracs 5,15 -rounds 2 -prompt 0
run qwen397b-2l-v32768 -dims 397b -layers 2 -vocab 32768 -fracs 5,15 -rounds 2 -prompt 0
run gemma26b-3l-v262144 -dims gemma26b -layers 3 -vocab 262144 -fracs 5,15 -rounds 2 -prompt 0
