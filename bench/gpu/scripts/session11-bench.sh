#!/bin/bash
# The eleventh session's second call: the whole benchmark on this tree (35b
# and 80b, 8 layers, one-chunk prefill, no CPU prefill), then the kernel
# profile of a one-chunk prefill and the decode step's timeline.
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags=-s -o .devcarry-benchgpu/gpu ./bench/gpu
#   run: bash bench/gpu/scripts/session11-bench.sh     carry .devcarry-benchgpu
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
B=.devcarry-benchgpu/gpu
EXTRA="-chunk 4096 -cpu-layers 0" timeout 400 sh bench/gpu/device.sh >$O/device-sh.txt 2>&1
echo "bench done at $(el) s" >>$O/times.txt
if [ $((560 - $(el))) -gt 60 ]; then
	timeout 90 $B -child write -model /tmp/m35 -dims 35b -layers 8 -vocab 32768 >$O/write.txt 2>&1
	QPACK_CUDA_PROFILE=1 timeout 40 $B -child prefill -backend cuda -model /tmp/m35 -dims 35b -prompt 4096 -chunk 4096 >$O/prof-prefill.json 2>$O/prof-prefill.txt
	echo "prefill profile done at $(el) s" >>$O/times.txt
	QPACK_CUDA_PROFILE=graphs timeout 40 $B -child resident -backend cuda -model /tmp/m35 -dims 35b -tokens 256 -resident-context 16 >$O/tl-decode.json 2>$O/tl-decode.txt
	echo "timeline done at $(el) s" >>$O/times.txt
	QPACK_CUDA_PROFILE=1 timeout 40 $B -child resident -backend cuda -model /tmp/m35 -dims 35b -tokens 256 -resident-context 16 >$O/prof-decode.json 2>$O/prof-decode.txt
	echo "decode profile done at $(el) s" >>$O/times.txt
fi
cat $O/times.txt
grep -h -A12 "figure\|goal" $O/bench-gpu/*.txt 2>/dev/null | head -60
head -30 $O/prof-prefill.txt
grep -h "graph\|gap\|host" $O/tl-decode.txt | head -20
