#!/bin/bash
# The twenty-fourth session's last device minutes (too few for a recording):
# the pending patch's GPU tests once (not the recording: no sanitizers), the
# select kernels' timings, and a short resident decode A/B of its switches.
# Built by `bash bench/gpu/scripts/session15-build.sh` on the working tree
# holding cuda/pending/pfnext-select.patch; carry .devcarry-cuda
# .devcarry-backendcli .devcarry-benchgpu. Everything under $OUT/s24/.
#   END (s, default 220): when the A/B stops.
set -u
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=$OUT/s24
mkdir -p $W
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >$W/env.txt 2>&1
(cd cuda && timeout 60 ../.devcarry-cuda/cuda.test -test.v -test.count=1 -test.run '^Test(SelectOneGPU|PrefetchNextGPU|SelectMappedGPU)$' >$W/tests.txt 2>&1; echo "exit status $?" >>$W/tests.txt)
echo "tests done at $(el) s" >>$W/times.txt
grep -h "^--- \|^ok\|FAIL" $W/tests.txt
(cd cuda && timeout 70 ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels.txt 2>&1)
echo "kernels done at $(el) s" >>$W/times.txt
grep -h "copy:\|select\|route_topk" $W/kernels.txt | cut -c1-220
OUT=$W VARIANTS=${VARIANTS:-"a0:gpu-new s1:gpu-new:QPACK_CUDA_SELECT=one pfd:gpu-new:QPACK_CUDA_PF_NEXT=down pfg:gpu-new:QPACK_CUDA_PF_NEXT=gateup"} \
	DIMS=35b VOCABS=32768 ROUNDS=${ROUNDS:-2} TOKENS=1024 timeout $((${END:-220} - $(el))) sh bench/gpu/ab.sh >$W/ab.txt 2>&1
echo "ab done at $(el) s" >>$W/times.txt
cat $W/times.txt
grep -h " tps=" $W/ab.txt
