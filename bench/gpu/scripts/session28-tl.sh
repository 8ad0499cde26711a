#!/bin/bash
# Twenty-eighth session (device), one call (written then; the session's
# device time ran out, and the twenty-ninth ran it:
# bench/gpu/results/session29-h100/): the queued step's probes
# (BenchmarkFlagReleaseGPU, BenchmarkFreeWhileGatedGPU: cuda/flag_probe_linux_test.go,
# ~10 s), then the submission timeline
# (QPACK_CUDA_PROFILE=graphs, 512 resident tokens, 35b dims, 8 layers,
# 32,768 logits) of gpu-base (HEAD's build) and gpu-new (the working
# tree's), with the runner's marks around the draw, then the GPU
# conformance tests of the new cuda.test (testdata/cuda/device.sh's
# conformance part alone, CONFLIM s). Built by session15-build.sh.
#   carry .devcarry-cuda .devcarry-benchgpu
set -u
O=$OUT
W=/tmp/s28
mkdir -p $W
G=.devcarry-benchgpu
for b in gpu-base gpu-new; do [ -f $G/$b ] || gunzip -k $G/$b.gz; done
[ -f .devcarry-cuda/cuda.test ] || gunzip -k .devcarry-cuda/cuda.test.gz
(cd cuda && timeout 60 ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench 'FlagRelease|FreeWhileGated' \
	-test.benchtime 1x -test.v >$O/flag-probe.txt 2>&1)
grep -h "flag\|while the stream" $O/flag-probe.txt | cut -c1-300
timeout 90 $G/gpu-new -child write -model $W/model -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
for b in gpu-base gpu-new; do
	QPACK_CUDA_PROFILE=graphs timeout 90 $G/$b -child resident -backend cuda -model $W/model -dims 35b \
		-tokens 512 -resident-context 16 >$W/tl-$b.json 2>$W/tl-$b.txt
	grep -h "host's path\|gap before each: memset" $W/tl-$b.txt | cut -c1-1200 | head -3
done
rm -rf $W/model
cp $W/tl-* $O/
OUT=$O TOOLS="" PARTS=conformance CONFLIM=${CONFLIM:-240} bash testdata/cuda/device.sh
tail -3 $O/conformance.log
grep -c -- "--- PASS" $O/conformance.log
