#!/bin/bash
# Twenty-ninth session (device), one call: (1) the GPU graph tests with
# QPACK_CUDA_GRAPH_UPLOAD=1 (a replay's changed parameters uploaded on a
# stream of their own before the launch: the same bits as kernel by
# kernel?); (2) resident decode A/B at the 35B's dims (8 layers, 32,768
# logits, 1,024 tokens, three interleaved rounds): the working tree's
# build with and without the uploads; (3) the timeline
# of the uploads (the attention layers' graphs' gap); (4) Nsight Compute
# on the MoE kernels and route_topk (session29-ncu-moe.sh) while the
# call has time left. Built by session15-build.sh. The switch measured
# even and was dropped: apply bench/gpu/results/session29-h100/graph-upload.patch
# (against 7697246) to run this again.
#   carry .devcarry-cuda .devcarry-benchgpu
set -u
O=$OUT
G=.devcarry-benchgpu
for b in gpu-base gpu-new; do [ -f $G/$b ] || gunzip -k $G/$b.gz; done
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
(cd cuda && QPACK_CUDA_GRAPH_UPLOAD=1 timeout 150 ../.devcarry-cuda/cuda.test -test.run 'TestGraphsGPU|TestGraphsAfterFreeGPU' \
	-test.v >$O/upload-gpu-tests.txt 2>&1
echo "upload GPU tests rc $?")
grep -h -- "--- \|graph launches" $O/upload-gpu-tests.txt | head -12
OUT=$O VARIANTS="new:gpu-new up:gpu-new:QPACK_CUDA_GRAPH_UPLOAD=1" DIMS=35b VOCABS=32768 ROUNDS=3 TOKENS=1024 \
	sh bench/gpu/ab.sh >$O/ab.txt 2>&1
tail -12 $O/ab.txt
W=/tmp/s29
mkdir -p $W
timeout 90 $G/gpu-new -child write -model $W/model -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
QPACK_CUDA_GRAPH_UPLOAD=1 QPACK_CUDA_PROFILE=graphs timeout 90 $G/gpu-new -child resident -backend cuda -model $W/model -dims 35b \
	-tokens 512 -resident-context 16 >$O/tl-up.json 2>$O/tl-up.txt
grep -h "gap before each\|host's path" $O/tl-up.txt | cut -c1-200 | head -14
rm -rf $W
echo "elapsed ${SECONDS}s"
if [ $SECONDS -lt 220 ]; then
	NCULIM=60 ONLY="gateup9 down9 topk" bash bench/gpu/scripts/session29-ncu-moe.sh
fi
