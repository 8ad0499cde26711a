#!/bin/bash
# The recorded CUDA device run (cuda/README.md). Runs on the accelerator
# machine from the repository root with the test binary built on the
# development machine:
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -o .devcarry-cuda/cuda.test ./cuda/
# and writes its logs to $OUT (copied to testdata/cuda/ afterwards, where
# cuda/recording_test.go checks them). Every step has a time limit.
set -u
T=$PWD/.devcarry-cuda/cuda.test
OUT=${OUT:-/tmp/cuda-out}
mkdir -p "$OUT"
cd "$(mktemp -d)" || exit 1 # the binary needs no source tree
export QPACK_CUDA_REQUIRE=1
{
	date -u
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
	nvcc --version 2>/dev/null | tail -2
	compute-sanitizer --version 2>/dev/null | head -2
	ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null
	file "$T" 2>/dev/null
} >"$OUT/env.log" 2>&1
GPU='^Test(MatMulConformance|RMSNormConformance|SwiGLUConformance|MatMulManyVectors|AllocFree|NoSuchDevice|ParamStructSizes|ParamsLayout)$'
timeout 60 "$T" -test.v -test.count=1 -test.run "$GPU" >"$OUT/conformance.log" 2>&1
echo "exit status $?" >>"$OUT/conformance.log"
for tool in memcheck racecheck synccheck initcheck; do
	timeout 60 compute-sanitizer --tool $tool --error-exitcode 3 "$T" -test.v -test.count=1 -test.run "$GPU" >"$OUT/$tool.log" 2>&1
	echo "exit status $?" >>"$OUT/$tool.log"
done
timeout 60 "$T" -test.v -test.run '^$' -test.bench MatVecBandwidth -test.benchtime 1x >"$OUT/bandwidth.log" 2>&1
echo "exit status $?" >>"$OUT/bandwidth.log"
tail -n 3 "$OUT"/*.log
