#!/bin/bash
# The polled wait (cuda/wait.go, QPACK_CUDA_SYNC_POLL, commit 5875b3a:
# reverted after this measurement, BENCHMARKS.md "Fifteenth session") on
# the device, one call: the conformance suite with it on (its part of testdata/cuda/device.sh),
# then resident decode A/B, 35b dims, 8 layers, 32,768 logits: first each
# one's step timeline (QPACK_CUDA_PROFILE=graphs, 256 tokens: the host's
# time from a wait to its next submission), then 3
# interleaved rounds of 1,024 tokens, poll (the default) against block
# (QPACK_CUDA_SYNC_POLL=0). Each part archived to $OUT as it ends.
# Built here from 5875b3a (CGO_ENABLED=0 GOOS=linux GOARCH=amd64, -trimpath, gzip -9):
#   .devcarry-cuda/cuda.test.gz     go test -c -ldflags='-s -w' ./cuda/
#   .devcarry-benchgpu/gpu-new.gz   go build -ldflags=-s ./bench/gpu
# run: bash bench/gpu/scripts/session15-poll.sh
#   carry .devcarry-cuda .devcarry-benchgpu
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s15p
B=.devcarry-benchgpu
mkdir -p $W/rec
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
[ -f $B/gpu-new ] || gunzip -k $B/gpu-new.gz
OUT=$W/rec PARTS="env conformance" TOOLS="" timeout 120 bash testdata/cuda/device.sh >$W/rec/dev.txt 2>&1
echo "conformance done at $(el) s" >>$W/times.txt
tail -n 3 $W/rec/conformance.log
tar -C $W -czf $O/poll.tgz rec times.txt
timeout 120 $B/gpu-new -child write -model $W/m -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
for v in poll block; do
	e=QPACK_CUDA_SYNC_POLL=
	[ $v = block ] && e=QPACK_CUDA_SYNC_POLL=0
	env $e QPACK_CUDA_PROFILE=graphs timeout 30 $B/gpu-new -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/tl-$v.json 2>$W/tl-$v.txt
done
rm -rf $W/m
echo "timelines done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/poll.tgz rec write.txt tl-poll.txt tl-block.txt tl-poll.json tl-block.json times.txt
OUT=$W VARIANTS="poll:gpu-new block:gpu-new:QPACK_CUDA_SYNC_POLL=0" DIMS=35b VOCABS=32768 ROUNDS=3 TOKENS=1024 timeout 300 sh bench/gpu/ab.sh >$W/ab.txt 2>&1
echo "ab done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/poll.tgz rec write.txt tl-poll.txt tl-block.txt tl-poll.json tl-block.json ab ab.txt times.txt
cat $W/times.txt
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
grep -h "after a wait\|between them" $W/tl-poll.txt $W/tl-block.txt
