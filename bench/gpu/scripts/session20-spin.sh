#!/bin/bash
# Twentieth session (device), one call: waits that poll before they block
# (cuda/wait.go, QPACK_CUDA_SPIN_US) and the mapped uploads
# (QPACK_CUDA_MAPPED_UPLOADS=1), on the working tree's build
# (session15-build.sh: gpu-new, cuda.test):
#   1. the GPU conformance tests (testdata/cuda/device.sh's list) with the
#      polled waits, then again with the mapped uploads on;
#   2. resident decode A/B (bench/gpu/ab.sh: 35b dims, 8 layers, 32,768
#      logits, 1,024 tokens, ROUNDS 2 interleaved): new (polled waits),
#      block (QPACK_CUDA_SPIN_US=0: the blocking waits alone), mapped (new
#      with the mapped uploads);
#   3. the submission timelines of new and mapped (QPACK_CUDA_PROFILE=graphs,
#      512 tokens): the host's path from the step's wait point by point.
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s20s
mkdir -p $W
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
GPU=$(sed -n "s/^GPU='\(.*\)'$/\1/p" testdata/cuda/device.sh)
for v in 0 1; do
	(cd cuda && QPACK_CUDA_MAPPED_UPLOADS=$v QPACK_CUDA_REQUIRE=1 timeout 120 ../.devcarry-cuda/cuda.test -test.v -test.count=1 \
		-test.run "$GPU" -test.timeout 115s >$W/conformance-mapped$v.log 2>&1; echo "exit status $?" >>$W/conformance-mapped$v.log)
	echo "conformance (mapped $v) done at $(el) s" >>$W/times.txt
done
tar -C $W -czf $O/spin.tgz .
OUT=$W VARIANTS="new:gpu-new block:gpu-new:QPACK_CUDA_SPIN_US=0 mapped:gpu-new:QPACK_CUDA_MAPPED_UPLOADS=1" DIMS=35b VOCABS=32768 \
	ROUNDS=${ROUNDS:-2} TOKENS=1024 timeout 200 sh bench/gpu/ab.sh >$W/ab.txt 2>&1
echo "ab done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/spin.tgz .
G=.devcarry-benchgpu
m=$W/model
timeout 60 $G/gpu-new -child write -model $m -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
for v in 0 1; do
	QPACK_CUDA_PROFILE=graphs QPACK_CUDA_MAPPED_UPLOADS=$v timeout 60 $G/gpu-new -child resident -backend cuda -model $m -dims 35b \
		-tokens 512 -resident-context 16 >$W/tl-mapped$v.txt 2>$W/tl-mapped$v.err
done
rm -rf $m
echo "timelines done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/spin.tgz .
cat $W/times.txt
grep -h "^--- FAIL\|^ok\|^PASS\|^FAIL\|exit status" $W/conformance-*.log
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
grep -h "host's path from the first wait to the submission of \"memset\|gap before each: memset" $W/tl-mapped*.err | cut -c1-700
