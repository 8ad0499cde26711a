#!/bin/bash
# Nsight Compute on BenchmarkDecodeKernels' kernels of a decode step's
# sparse block and input projections (twenty-ninth session): the MoE
# gate/up and down with the shared expert as slot k (9 slots), the gate/up
# of the 8 routed experts alone, route_topk and the DeltaNet's input
# projections. QPACK_BENCH_CASES keeps one case a run; launch 200 of the
# kernel is in the case's timed graphs with dependent launches on (96
# launches a graph, the first launched once to warm up). Full sections and
# the source counters section (as text, its branch summary only).
#   carry .devcarry-cuda (bench/gpu/scripts/session15-build.sh)
set -u
O=$OUT
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
cd cuda
run() { # name kernel case-regex (ONLY: the names to run, else all)
	case " ${ONLY:-$1} " in *" $1 "*) ;; *) return ;; esac
	QPACK_BENCH_CASES="$3" timeout ${NCULIM:-120} $NCU --kernel-name regex:"^$2\$" --launch-skip 200 --launch-count 1 \
		--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
		--section Occupancy --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters \
		../.devcarry-cuda/cuda.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$O/ncu-$1.txt 2>&1
	echo "$1 rc $?"
	grep -h "Duration\|Memory Throughput\|DRAM Throughput\|Achieved Occupancy\|Registers Per\|Issued Instructions \|Warp Cycles Per Issued\|Stall\|stall" $O/ncu-$1.txt | head -30 | cut -c1-220
}
run gateup9 moe_gateup_q4 '^moe_gateup_q4 .*as slot k$'
run down9 moe_down_q4 '^moe_down_q4 .*as slot k$'
run gateup8 moe_gateup_q4 '^moe_gateup_q4 .*8 routed experts$'
run topk route_topk '^route_topk'
run inproj gemv_q4 '^gemv_q4 \[12352'
