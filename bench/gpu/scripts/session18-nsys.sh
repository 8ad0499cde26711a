#!/bin/bash
# Eighteenth session (device): where a resident decode step's time goes in
# place, not in BenchmarkDecodeKernels' isolated loops: Nsight Systems over
# bench/gpu's resident decode (35b dims, 8 layers, 32,768 logits, 256
# tokens after a 16-token prompt) with every CUDA graph node traced, its
# kernel trace reduced by session18-nsys.py (each kernel's time a token,
# the GPU idle between kernels, binned), then BenchmarkDecodeKernels of
# the working tree (cuda.test) under each QPACK_CUDA_DEFINES of KDEFS
# (";"-separated; "-" for none) and of HEAD (cuda-base.test), the
# KGREP-matching lines printed. Each part is archived to $OUT as it ends.
# The accelerator machine had no Nsight Systems in the eighteenth session
# (the script says "nsys: none" and goes on); its kernel variants were
# these runs (NSYSRUN=0 BASE=0 for the second):
#   KDEFS="-;QP_MOE_ROW_PREFETCH=0 QP_MOE_TABLE_PREFETCH=0;QP_MOE_ROW_PREFETCH=2"
#   KDEFS="-;QP_MOE_ONE_TRIP=0;QP_MOE_MIN_GROUPS=3"
# of drafts of cuda/kernels/22_moe.cu with those switches (not kept:
# BENCHMARKS.md, eighteenth session).
#   carry .devcarry-cuda .devcarry-benchgpu (session15-build.sh)
set -u
O=$OUT
W=/tmp/s18
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
mkdir -p $W
G=.devcarry-benchgpu
for f in gpu-new; do [ -f $G/$f ] || gunzip -k $G/$f.gz; done
for f in cuda cuda-base; do [ -f .devcarry-cuda/$f.test ] || gunzip -k .devcarry-cuda/$f.test.gz; done
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: ${NSYS:-none}" | tee $W/times.txt
if [ "${NSYSRUN:-1}" = 1 ] && [ -n "$NSYS" ]; then
	m=$W/model
	timeout 200 $G/gpu-new -child write -model $m -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
	timeout 200 $NSYS profile --trace=cuda --cuda-graph-trace=node --sample=none --cpuctxsw=none -f true -o $W/decode \
		$G/gpu-new -child resident -backend cuda -model $m -dims 35b -tokens ${TOKENS:-256} -resident-context 16 >$W/resident.txt 2>$W/resident.err
	echo "nsys profile rc $? at $(el) s" >>$W/times.txt
	timeout 120 $NSYS stats -r cuda_gpu_trace -f csv -o $W/decode $W/decode.nsys-rep >$W/stats.txt 2>&1
	python3 bench/gpu/scripts/session18-nsys.py $W/decode_cuda_gpu_trace.csv ${TOKENS:-256} >$W/breakdown.txt 2>&1
	rm -rf $m
	echo "nsys done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/nsys.tgz breakdown.txt resident.txt resident.err stats.txt times.txt
	cat $W/breakdown.txt | head -70
fi
cd cuda
IFS=';'
i=0
for d in ${KDEFS:--}; do
	i=$((i + 1))
	dd=$d
	[ "$d" = - ] && dd=
	QPACK_CUDA_DEFINES=$dd timeout 90 ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels-$i.txt 2>&1
	echo "kernels $i ($d) rc $? at $(el) s" >>$W/times.txt
done
unset IFS
if [ "${BASE:-1}" = 1 ]; then
	timeout 90 ../.devcarry-cuda/cuda-base.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels-base.txt 2>&1
	echo "kernels base rc $? at $(el) s" >>$W/times.txt
fi
cd ..
tar -C $W -czf $O/kernels.tgz $(cd $W && ls kernels-*.txt) times.txt
cat $W/times.txt
for f in $W/kernels-*.txt; do
	echo "== $f"
	grep -h "${KGREP:-moe_}" $f | sed 's/.*decode_bench_test.go:[0-9]*: //' | cut -c1-140
done
