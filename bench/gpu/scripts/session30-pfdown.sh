#!/bin/bash
# Thirtieth session (device), one call: gate/up prefetching its slots'
# down rows into the L2 (QP_MOE_PF_DOWN, kernels/22_moe.cu; off in the
# source, switched on by QPACK_CUDA_DEFINES in one binary).
#   (1) resident decode A/B at the 35B's dims (8 layers, 32,768 logits,
#       1,024 tokens, three interleaved rounds): HEAD's build, the working
#       tree's with the switch off, on, and on with the next layer's first
#       product prefetched from moe_down instead of gate/up
#       (QPACK_CUDA_PF_NEXT=down); each run's tokens hash says whether it
#       drew what the others drew (the same bits);
#   (2) BenchmarkDecodeKernels' MoE cases with the switch off and on (the
#       gate/up's own cost of its prefetches; down alone gains nothing
#       there, its rows not prefetched by a gate/up before it);
#   (3) while the call has time left, the GPU conformance tests with the
#       switch on.
# Built by session15-build.sh; carry .devcarry-cuda .devcarry-benchgpu.
set -u
O=$OUT
G=.devcarry-benchgpu
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
for b in gpu-base gpu-new; do [ -f $G/$b ] || gunzip -k $G/$b.gz; done
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
PF=QPACK_CUDA_DEFINES=QP_MOE_PF_DOWN=1
OUT=$O VARIANTS="base:gpu-base new:gpu-new pf:gpu-new:$PF pfnd:gpu-new:$PF,QPACK_CUDA_PF_NEXT=down" \
	DIMS=35b VOCABS=32768 ROUNDS=${ROUNDS:-3} TOKENS=1024 timeout 380 sh bench/gpu/ab.sh >$O/ab.txt 2>&1
echo "ab done at $(el) s"
tail -14 $O/ab.txt
for v in 0 1; do
	(cd cuda && QPACK_CUDA_DEFINES=QP_MOE_PF_DOWN=$v QPACK_BENCH_CASES='^moe_' timeout 60 ../.devcarry-cuda/cuda.test \
		-test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$O/kernels-pf$v.txt 2>&1)
	grep -h "copy:\|moe_" $O/kernels-pf$v.txt | cut -c1-230
done
echo "kernels done at $(el) s"
left=$((570 - $(el)))
if [ $left -gt 60 ]; then
	QPACK_CUDA_DEFINES=QP_MOE_PF_DOWN=1 OUT=$O TOOLS="" PARTS=conformance CONFLIM=$left bash testdata/cuda/device.sh
	tail -3 $O/conformance.log
	echo "conformance with the switch on: $(grep -c -- '--- PASS' $O/conformance.log) passed, $(grep -c -- '--- FAIL' $O/conformance.log) failed"
fi
echo "elapsed $(el) s"
