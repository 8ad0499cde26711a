#!/bin/bash
# Builds what bench/gpu/scripts/session15-route.sh carries, on the
# development machine, from a clean checkout with nothing applied:
# cuda-base.test and gpu-base from this tree, then the rest with
# cuda/pending/route-registers.patch applied (left applied, for the landing
# commit). Each binary for linux/amd64 without cgo, gzipped.
#   bash bench/gpu/scripts/session15-build.sh
set -eu
cd "$(git rev-parse --show-toplevel)"
if ! git diff --quiet; then
	echo "session15-build.sh: the tree has changes; start from a clean checkout" >&2
	exit 2
fi
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
C=.devcarry-cuda B=.devcarry-backendcli G=.devcarry-benchgpu
rm -rf $C $B $G
mkdir -p $C $B $G
go test -c -trimpath -ldflags='-s -w' -o $C/cuda-base.test ./cuda/
go build -trimpath -ldflags=-s -o $G/gpu-base ./bench/gpu
git apply cuda/pending/route-registers.patch
go test -c -trimpath -ldflags='-s -w' -o $C/cuda.test ./cuda/
go build -trimpath -ldflags=-s -o $B/qpack ./cmd/qpack
go test -c -trimpath -ldflags=-s -o $B/cmd.test ./cmd/qpack
cp testdata/cuda/cli/device.sh $B/
go build -trimpath -ldflags=-s -o $G/gpu-new ./bench/gpu
gzip -9 $C/*.test $B/qpack $B/cmd.test $G/gpu-base $G/gpu-new
du -sh $C $B $G
