#!/bin/bash
# Nsight Compute on BenchmarkDecodeKernels' decode attention (seventeenth
# session, H100): the per-(token, head) kernel's launch statistics
# (KERNEL=attention, SKIPS="400 1100"), or attention_gqa's stall reasons
# (KERNEL=attention_gqa, SKIPS="1000 1600": the 100-position unsplit case
# and the 1,024-position one at its 64 runs; a case's launches are 768, 96
# a graph, 4 graphs, dependent launches on and off).
#   carry .devcarry-cuda (bench/gpu/scripts/session15-build.sh)
set -u
O=$OUT
K=${KERNEL:-attention}
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
cd cuda
for skip in ${SKIPS:-400 1100}; do
	if [ "$K" = attention ]; then
		what="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis --section InstructionStats --section SourceCounters"
	else
		what="--section SpeedOfLight --section SchedulerStats --section InstructionStats --metrics regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$,smsp__cycles_active.avg,sm__cycles_active.max,smsp__inst_executed.sum"
	fi
	timeout 200 $NCU --kernel-name regex:"^$K\$" --launch-skip $skip --launch-count 1 $what ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$O/ncu-$K-$skip.txt 2>&1
	echo "skip $skip rc $?"
done
grep -h "$K (\|Duration\|Issued Instructions \|stalled\|cycles_active\|inst_executed" $O/ncu-$K-*.txt | grep -v decode_bench | awk '$NF+0 > 0.05 || /\(|Duration|Issued|cycles|inst/' | head -80
