#!/bin/bash
# Nineteenth session (device): resident decode's step boundary point by
# point, the mapped uploads and the early start one op at a time, on the
# working tree's build (session15-build.sh: gpu-new), one model written
# once (35b dims, 8 layers, 32,768 logits):
#   1. the submission timeline (QPACK_CUDA_PROFILE=graphs, with its report
#      of the host's path from the step's first wait to layer 0's first
#      submission), 512 tokens: the default, QPACK_CUDA_MAPPED_UPLOADS=1,
#      QPACK_CUDA_EARLY=op;
#   2. the kernel profile (QPACK_CUDA_PROFILE=1: every op timed alone,
#      graphs off, the copies and memsets included), 256 tokens;
#   3. resident decode, 1,024 tokens, ROUNDS (2) interleaved rounds of
#      the three variants, while LIMIT (300 s) allows.
# Each part archived to $OUT as it ends; every run under timeout.
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
set -u
O=$OUT
W=/tmp/s19
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
mkdir -p $W/runs
G=.devcarry-benchgpu
[ -f $G/gpu-new ] || gunzip -k $G/gpu-new.gz
m=$W/model
timeout 120 $G/gpu-new -child write -model $m -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
echo "model written at $(el) s" >>$W/times.txt
run() { # tag tokens VAR=VALUE...
	tag=$1 n=$2
	shift 2
	line=$(env "$@" timeout 90 $G/gpu-new -child resident -backend cuda -model $m -dims 35b -tokens $n -resident-context 16 2>$W/runs/$tag.err)
	echo "$tag $line" >>$W/runs/children.txt
}
run tl 512 QPACK_CUDA_PROFILE=graphs
run tlm 512 QPACK_CUDA_PROFILE=graphs QPACK_CUDA_MAPPED_UPLOADS=1
run tlo 512 QPACK_CUDA_PROFILE=graphs QPACK_CUDA_EARLY=op
echo "timelines done at $(el) s" >>$W/times.txt
run prof 256 QPACK_CUDA_PROFILE=1
echo "profile done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s19.tgz runs times.txt write.txt
grep -h "host's path\|host after a wait\|gap before each: memset\|inside them" $W/runs/tl*.err | cut -c1-1200
for r in $(seq 1 ${ROUNDS:-2}); do
	# a round takes ~60 s: none that would pass LIMIT (default 300 s)
	[ $(el) -lt $((${LIMIT:-300} - 70)) ] || break
	run new-$r 1024 X=1
	run mapped-$r 1024 QPACK_CUDA_MAPPED_UPLOADS=1
	run op-$r 1024 QPACK_CUDA_EARLY=op
	echo "round $r done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/s19.tgz runs times.txt write.txt
done
cat $W/times.txt
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/runs/children.txt
