#!/bin/bash
# Thirtieth session (device), one call: the decode step's execution model
# at its ceiling (BenchmarkLayerChainGPU, cuda/chain_probe_linux_test.go:
# 8 layers of a Qwen3.6-35B DeltaNet layer's ops as plain reads of their
# bytes, one kernel each in a graph with dependent launches, with and
# without each kernel prefetching its bytes before its wait; and the ops of
# 512 KiB or more alone, the small ones fused away), then the flag-release
# probe (its kernel now takes one parameter struct, as launch passes it: the
# first run of this script found its word never written).
#   carry .devcarry-cuda (CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c
#   -o .devcarry-cuda/cuda.test ./cuda/, gzipped)
set -u
O=$OUT
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
cd cuda
QPACK_CUDA_REQUIRE=1 timeout 240 ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench 'LayerChainGPU' -test.benchtime 3x \
	-test.v >$O/chain.txt 2>&1
echo "chain rc $?"
grep -h "device\|prefetch\|an op" $O/chain.txt | head -40 | cut -c1-200
QPACK_CUDA_REQUIRE=1 timeout 60 ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench 'FlagRelease' -test.v >$O/flag-release.txt 2>&1
echo "flag release rc $?"
grep -v "^\s*$" $O/flag-release.txt | tail -12 | cut -c1-200
