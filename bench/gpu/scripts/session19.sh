#!/bin/bash
# Nineteenth session (device): resident decode's step boundary point by
# point and the mapped uploads, on the working tree's build
# (session15-build.sh; gpu-new):
#   1. the submission timeline (QPACK_CUDA_PROFILE=graphs, its new report
#      of the host's path from the step's first wait to layer 0's first
#      submission), 512 tokens, with and without QPACK_CUDA_MAPPED_UPLOADS=1;
#   2. the kernel profile (QPACK_CUDA_PROFILE=1: every op timed alone,
#      graphs off, the copies and memsets included), 256 tokens;
#   3. A/B of resident decode, 1,024 tokens, 3 interleaved rounds: the
#      default against QPACK_CUDA_MAPPED_UPLOADS=1 and QPACK_CUDA_EARLY=op.
# 35b dims, 8 layers, 32,768 logits; each part archived to $OUT as it ends.
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
set -u
O=$OUT
W=/tmp/s19
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
mkdir -p $W
OUT=$W/tl VARIANTS="tl:gpu-new:QPACK_CUDA_PROFILE=graphs tlm:gpu-new:QPACK_CUDA_PROFILE=graphs,QPACK_CUDA_MAPPED_UPLOADS=1 tlo:gpu-new:QPACK_CUDA_PROFILE=graphs,QPACK_CUDA_EARLY=op" \
	DIMS=35b VOCABS=32768 ROUNDS=1 TOKENS=512 timeout 180 sh bench/gpu/ab.sh >$W/tl.txt 2>&1
echo "timelines done at $(el) s" >>$W/times.txt
OUT=$W/prof VARIANTS="prof:gpu-new:QPACK_CUDA_PROFILE=1" DIMS=35b VOCABS=32768 ROUNDS=1 TOKENS=256 timeout 100 sh bench/gpu/ab.sh >$W/prof.txt 2>&1
echo "profile done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s19.tgz tl prof times.txt
grep -h "host's path\|host after a wait\|gap before each: memset\|inside them" $W/tl/ab/*.err | cut -c1-900
OUT=$W/ab VARIANTS="new:gpu-new mapped:gpu-new:QPACK_CUDA_MAPPED_UPLOADS=1 op:gpu-new:QPACK_CUDA_EARLY=op" DIMS=35b VOCABS=32768 ROUNDS=3 TOKENS=1024 \
	timeout $((${LIMIT:-560} - 10 - $(el))) sh bench/gpu/ab.sh >$W/ab.txt 2>&1
echo "ab done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s19.tgz tl prof ab times.txt
cat $W/times.txt
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/ab/children.txt
