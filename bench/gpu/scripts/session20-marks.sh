#!/bin/bash
# Twentieth session (device), one short call: the submission timeline
# (QPACK_CUDA_PROFILE=graphs, 512 resident tokens, 35b dims, 8 layers,
# 32,768 logits) with the runner's and the runtime's marks
# (runtime.Marker): where the host's ~21 µs from EndPass's return to the
# next step's first Temp go. Built by session15-build.sh (gpu-new).
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
set -u
O=$OUT
W=/tmp/s20m
mkdir -p $W
G=.devcarry-benchgpu
[ -f $G/gpu-new ] || gunzip -k $G/gpu-new.gz
timeout 90 $G/gpu-new -child write -model $W/model -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
QPACK_CUDA_PROFILE=graphs timeout 90 $G/gpu-new -child resident -backend cuda -model $W/model -dims 35b \
	-tokens 512 -resident-context 16 >$W/tl.txt 2>$W/tl.err
rm -rf $W/model
tar -C $W -czf $O/marks.tgz write.txt tl.txt tl.err
grep -h "host's path\|gap before each: memset" $W/tl.err | cut -c1-900 | head -4
