#!/bin/bash
# The recording of the select kernels (bitwise k-th search), the CLI, then a
# short A/B of the selection with what is left.
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
mkdir -p .devcarry-cuda /tmp/rec/cli .devcarry-backendcli /tmp/ab
gunzip -c .devcarry-dn/cuda-sel.test.gz >.devcarry-cuda/cuda.test && chmod +x .devcarry-cuda/cuda.test
OUT=/tmp/rec PARTS="env conformance" timeout 285 bash .devcarry-dn/device-cuda.sh >/tmp/rec/dev.txt 2>&1
echo "recording done at $(el) s" >>/tmp/rec/times.txt
tar -C /tmp -czf "$O/rec.tgz" rec
cp .devcarry-dn/qpack.gz .devcarry-dn/cmd.test.gz testdata/cuda/cli/device.sh .devcarry-backendcli/
OUT=/tmp/rec/cli timeout 60 bash .devcarry-backendcli/device.sh >/tmp/rec/cli.txt 2>&1
echo "cli done at $(el) s" >>/tmp/rec/times.txt
tar -C /tmp -czf "$O/rec.tgz" rec
for v in 248320 32768; do
	OUT=/tmp/ab B=.devcarry-dngpu VARIANTS="bitwise:gpu-sel:QPACK_CUDA_SELECT_MIN=0 bitonic:gpu:QPACK_CUDA_SELECT_MIN=0 off:gpu:QPACK_CUDA_SELECT_MIN=1000000000" DIMS=35b VOCABS=$v ROUNDS=1 TOKENS=256 timeout 90 sh bench/gpu/ab.sh >>/tmp/ab/ab.txt 2>&1
	echo "ab $v done at $(el) s" >>/tmp/rec/times.txt
	cp /tmp/rec/times.txt /tmp/ab/
	tar -C /tmp -czf "$O/ab.tgz" ab
done
cat /tmp/rec/times.txt
tail -n 2 /tmp/rec/*.log /tmp/rec/cli/*.log
grep -h -A5 '^--- FAIL' /tmp/rec/*.log /tmp/rec/cli/*.log | head -30
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' /tmp/ab/ab/children.txt 2>/dev/null
