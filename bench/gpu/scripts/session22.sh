#!/bin/bash
# For the twenty-second session (device): built by
#   bash bench/gpu/scripts/session15-build.sh
# on main; carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu.
# PART picks what runs (default "ab"; one call each, both under 600 s):
#   ab    (~300 s) resident decode A/B (35b dims, 8 layers, 32,768 logits,
#         1,024 tokens, 3 rounds) of the twenty-first session's new
#         defaults (two layers a graph, qknorm+rope+kv) against one layer
#         a graph, against no fusion, and against the fusions that add work
#         a group as well (norm+route), under two layers a graph; then the
#         80b's dims with the defaults (2 rounds) and the marked timeline
#         (QPACK_CUDA_PROFILE=graphs, 512 tokens) with them.
#   conf  (~500 s) testdata/cuda/device.sh's GPU tests and memcheck under
#         the new defaults (the recorded logs ran under the old ones), into
#         $OUT/conf/ (compare with testdata/cuda/conformance.log and
#         memcheck.log before replacing them).
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s22
mkdir -p $W
G=.devcarry-benchgpu
case ${PART:-ab} in
ab)
	[ -f $G/gpu-new ] || gunzip -k $G/gpu-new.gz
	OUT=$W VARIANTS="new:gpu-new flush1:gpu-new:QPACK_CUDA_FLUSH_LAYERS=1 nofuse:gpu-new:QPACK_CUDA_FUSE=none more:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv+norm+route" \
		DIMS=35b VOCABS=32768 ROUNDS=${ROUNDS:-3} TOKENS=1024 timeout 330 sh bench/gpu/ab.sh >$W/ab.txt 2>&1
	echo "ab done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/s22.tgz .
	mkdir -p $W/ab80
	OUT=$W/ab80 VARIANTS="new:gpu-new" DIMS=80b VOCABS=32768 ROUNDS=2 TOKENS=1024 timeout 150 sh bench/gpu/ab.sh >$W/ab80.txt 2>&1
	echo "ab80 done at $(el) s" >>$W/times.txt
	timeout 90 $G/gpu-new -child write -model $W/model -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
	QPACK_CUDA_PROFILE=graphs timeout 90 $G/gpu-new -child resident -backend cuda -model $W/model -dims 35b \
		-tokens 512 -resident-context 16 >$W/tl.txt 2>$W/tl.err
	rm -rf $W/model
	echo "timeline done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/s22.tgz .
	cat $W/times.txt
	grep -h "host's path from the first wait to the submission of \"memset" $W/tl.err | sort -u | cut -c1-900
	grep -h "queues,.*gap before each" $W/tl.err | sort -u | head -12 | cut -c1-200
	grep -h " tps=" $W/ab.txt $W/ab80.txt # ab.sh's summary lines
	;;
conf)
	OUT=$O/conf TOOLS=memcheck PARTS="env conformance" timeout 560 bash testdata/cuda/device.sh
	;;
esac
