#!/bin/bash
# Builds what bench/gpu/scripts/session15-route.sh carries, on the
# development machine: cuda-base.test and gpu-base from HEAD, or from the
# commit BASE names (a temporary git worktree), the rest from the working
# tree with its uncommitted
# kernel change (or, with PATCH=file on a clean tree, with that patch
# applied and left applied, for the landing commit). Each binary for
# linux/amd64 without cgo, gzipped.
#   bash bench/gpu/scripts/session15-build.sh
#   PATCH=cuda/pending/x.patch bash bench/gpu/scripts/session15-build.sh
#   BASE=ce8105f bash bench/gpu/scripts/session15-build.sh   (host changes since ce8105f)
set -eu
cd "$(git rev-parse --show-toplevel)"
if [ -n "${PATCH:-}" ] && ! git diff --quiet; then
	echo "session15-build.sh: the tree has changes; PATCH needs a clean checkout" >&2
	exit 2
fi
export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
C=$PWD/.devcarry-cuda B=$PWD/.devcarry-backendcli G=$PWD/.devcarry-benchgpu
rm -rf $C $B $G
mkdir -p $C $B $G
WT=$(mktemp -d /tmp/qpack-base.XXXXXX)
trap 'git worktree remove --force "$WT" 2>/dev/null; rm -rf "$WT"' EXIT
git worktree add -q --detach "$WT" "${BASE:-HEAD}"
(cd "$WT" && go test -c -trimpath -ldflags='-s -w' -o $C/cuda-base.test ./cuda/ &&
	go build -trimpath -ldflags=-s -o $G/gpu-base ./bench/gpu)
if [ -n "${PATCH:-}" ]; then
	git apply "$PATCH"
fi
go test -c -trimpath -ldflags='-s -w' -o $C/cuda.test ./cuda/
go build -trimpath -ldflags=-s -o $B/qpack ./cmd/qpack
go test -c -trimpath -ldflags=-s -o $B/cmd.test ./cmd/qpack
cp testdata/cuda/cli/device.sh $B/
go build -trimpath -ldflags=-s -o $G/gpu-new ./bench/gpu
gzip -9 $C/*.test $B/qpack $B/cmd.test $G/gpu-base $G/gpu-new
du -sh $C $B $G
