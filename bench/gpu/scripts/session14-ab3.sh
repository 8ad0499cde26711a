#!/bin/bash
# Fourteenth session, second device call (decode-fusions.patch applied, the
# binaries of session14.sh): the persistent-kernel probe beside the decode
# kernels at their real shapes (the same run, so each kernel's time can be
# set against a plain read of its bytes), then resident decode A/B, 35b
# dims, 32,768 logits, 2 interleaved rounds: the landed defaults (new: no
# fusion, no early start), the early start (QPACK_CUDA_EARLY=1), rope+kv,
# and qknorm+rope+kv (the patch's earlier default); then the step timeline
# with the early start and without.
#   carry .devcarry-cuda .devcarry-benchgpu
set -u
T=$PWD/.devcarry-cuda/cuda.test
[ -f "$T" ] || gunzip -k "$T.gz"
(cd cuda && timeout 60 "$T" -test.run '^$' -test.bench 'PersistentPhasesGPU|DecodeKernels' -test.benchtime 1x -test.v >$OUT/kernels.txt 2>&1)
grep -v "^    " $OUT/kernels.txt | tail -4
W=/tmp/s14b
mkdir -p $W
OUT=$W VARIANTS="new:gpu-new early:gpu-new:QPACK_CUDA_EARLY=1 rk:gpu-new:QPACK_CUDA_FUSE=rope+kv qrk:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv" DIMS=35b VOCABS=32768 ROUNDS=2 TOKENS=256 timeout 200 sh bench/gpu/ab.sh >$W/ab.txt 2>&1
tar -C $W -czf $OUT/ab3.tgz ab ab.txt
B=.devcarry-benchgpu/gpu-new
timeout 60 $B -child write -model $W/m -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
QPACK_CUDA_EARLY=1 QPACK_CUDA_PROFILE=graphs timeout 20 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/tl.json 2>$W/tl.txt
QPACK_CUDA_PROFILE=graphs timeout 20 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/tl-off.json 2>$W/tl-off.txt
rm -rf $W/m
tar -C $W -czf $OUT/ab3.tgz ab ab.txt tl.txt tl-off.txt
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
grep -h "host after\|between them\|gaps of 20" $W/tl.txt $W/tl-off.txt
