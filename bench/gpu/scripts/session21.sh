#!/bin/bash
# For the twenty-first session (device), one call (~400 s): built by
#   bash bench/gpu/scripts/session15-build.sh
# on main, carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu.
#   1. TestSelectMappedGPU and TestMappedUploadsGPU (the selection's results
#      written into mapped staging memory; the mapped uploads both ways);
#   2. the marked timeline (QPACK_CUDA_PROFILE=graphs, 512 tokens): the
#      runner's draw after the twentieth session's sampler changes (14.4 µs
#      of the device host's time before them);
#   3. resident decode A/B (35b dims, 8 layers, 32,768 logits, 1,024
#      tokens, ROUNDS 3 interleaved): new (main), selmap
#      (QPACK_CUDA_SELECT_MAPPED=1: no download on the step's critical path),
#      fuse (QPACK_CUDA_FUSE=qknorm+rope+kv, last measured in the fourteenth
#      session on the H200: even);
#   4. the 80b's dims, new and selmap, 2 rounds.
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s21
mkdir -p $W
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
(cd cuda && QPACK_CUDA_REQUIRE=1 timeout 120 ../.devcarry-cuda/cuda.test -test.v -test.count=1 \
	-test.run '^Test(SelectMappedGPU|MappedUploadsGPU)$' -test.timeout 115s >$W/tests.log 2>&1; echo "exit status $?" >>$W/tests.log)
echo "tests done at $(el) s" >>$W/times.txt
G=.devcarry-benchgpu
[ -f $G/gpu-new ] || gunzip -k $G/gpu-new.gz
timeout 90 $G/gpu-new -child write -model $W/model -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
for v in 0 1; do
	QPACK_CUDA_PROFILE=graphs QPACK_CUDA_SELECT_MAPPED=$v timeout 90 $G/gpu-new -child resident -backend cuda -model $W/model -dims 35b \
		-tokens 512 -resident-context 16 >$W/tl-selmap$v.txt 2>$W/tl-selmap$v.err
done
rm -rf $W/model
echo "timelines done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s21.tgz .
OUT=$W VARIANTS="new:gpu-new selmap:gpu-new:QPACK_CUDA_SELECT_MAPPED=1 fuse:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv" DIMS=35b VOCABS=32768 \
	ROUNDS=${ROUNDS:-3} TOKENS=1024 timeout 260 sh bench/gpu/ab.sh >$W/ab.txt 2>&1
echo "ab done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s21.tgz .
# 4. the 80b's dims (last measured in the eleventh session: 0.14x), the
#    same two variants, 2 rounds.
mkdir -p $W/ab80
OUT=$W/ab80 VARIANTS="new:gpu-new selmap:gpu-new:QPACK_CUDA_SELECT_MAPPED=1" DIMS=80b VOCABS=32768 \
	ROUNDS=2 TOKENS=1024 timeout 240 sh bench/gpu/ab.sh >$W/ab80.txt 2>&1
echo "ab80 done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s21.tgz .
cat $W/times.txt
grep -h "^--- FAIL\|^PASS\|exit status" $W/tests.log
grep -h "host's path from the first wait to the submission of \"memset\|gap before each: memset" $W/tl-selmap*.err | cut -c1-900
for f in $W/ab/children.txt $W/ab80/ab/children.txt; do
	sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $f
done
