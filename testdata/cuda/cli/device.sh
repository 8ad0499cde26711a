#!/bin/bash
# The recorded device run of --backend cuda from the CLI (cuda/README.md,
# "what has run where"). Binaries are built on the development machine:
#   D=.devcarry-backendcli
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags=-s -o $D/qpack ./cmd/qpack
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -trimpath -ldflags=-s -o $D/cmd.test ./cmd/qpack
#   gzip -9 $D/qpack $D/cmd.test; cp testdata/cuda/cli/device.sh $D/
# and this runs on the GPU machine from the repository root, writing its logs
# to $OUT (copied to testdata/cuda/cli/ afterwards, where
# cmd/qpack/cuda_recording_test.go checks them). Every step has a time limit.
set -u
D=$PWD/.devcarry-backendcli
for f in qpack cmd.test; do [ -f "$D/$f" ] || gunzip -k "$D/$f.gz"; done # they travel compressed
TINY=$PWD/testdata/tiny # tracked, so the checkout has it
OUT=${OUT:-/tmp/cuda-cli-out}
mkdir -p "$OUT"
W=$(mktemp -d)
cd "$W" || exit 1 # nothing here needs the source tree
M=$TINY/qwen3_next-q4g64
TOKENS=1,5,9,14,2,7,3,11
{
	date -u
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
	compute-sanitizer --version 2>/dev/null | head -2
	ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null
	ls "$TINY"
} >"$OUT/env.log" 2>&1

# 1. Every tiny model: logits on cuda against cpu, generation from a .qpack
#    with a small expert cache against every expert resident (on cuda), two
#    chat turns and a serve completion on cuda against cpu.
QPACK_CUDA_CLI=cuda QPACK_TINY=$TINY timeout 300 "$D/cmd.test" -test.v -test.count=1 \
	-test.run '^TestCUDADevice$' -test.timeout 290s >"$OUT/cli.log" 2>&1
echo "exit status $?" >>"$OUT/cli.log"

# 2. --backend auto picks cuda here, and says so.
timeout 60 "$D/qpack" logits "$M" --tokens $TOKENS --backend auto >"$OUT/auto.log" 2>&1
echo "exit status $?" >>"$OUT/auto.log"

# 3. compute-sanitizer over one whole-model logits run on cuda.
for tool in memcheck racecheck; do
	timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 \
		"$D/qpack" logits "$M" --tokens $TOKENS --backend cuda --json >"$OUT/$tool.log" 2>&1
	echo "exit status $?" >>"$OUT/$tool.log"
done
tail -n 4 "$OUT"/*.log
