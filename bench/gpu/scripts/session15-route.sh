#!/bin/bash
# route-registers.patch (cuda/pending) on the device, in one call of at most
# LIMIT seconds, each part archived to $OUT as it ends: route_topk before
# and after in one run (BenchmarkDecodeKernels of the tree without the
# patch, cuda-base.test, and with it, cuda.test: the route_topk [1, 256]
# k 8 line; it took 5.97 us on the H200 in the fourteenth session, against
# 0.74 us for an empty kernel), then the recording of the patched tree's
# kernels (conformance, the four sanitizers, the CLI), then a resident
# decode A/B (new: gpu-new from the patched tree, base: gpu-base from the
# tree without it), 35b dims, 32,768 logits, 3 interleaved rounds.
# Built on the development machine (CGO_ENABLED=0 GOOS=linux GOARCH=amd64,
# -trimpath, gzip -9 each), the patch applied unless said:
#   .devcarry-cuda/cuda.test.gz        go test -c -ldflags='-s -w' ./cuda/
#   .devcarry-cuda/cuda-base.test.gz   the same without the patch
#   .devcarry-backendcli/{qpack,cmd.test}.gz and device.sh   as testdata/cuda/cli/device.sh says
#   .devcarry-benchgpu/gpu-new.gz, gpu-base.gz   go build -ldflags=-s ./bench/gpu, with and without
# run: LIMIT=560 bash bench/gpu/scripts/session15-route.sh
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
set -u
O=$OUT
T0=$(date +%s)
L=${LIMIT:-560}
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s15
mkdir -p $W/rec/cli
for f in cuda cuda-base; do [ -f .devcarry-cuda/$f.test ] || gunzip -k .devcarry-cuda/$f.test.gz; done
for f in cuda-base cuda; do
	(cd cuda && timeout 60 ../.devcarry-cuda/$f.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels-$f.txt 2>&1)
done
echo "kernels done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/kernels.tgz kernels-cuda.txt kernels-cuda-base.txt times.txt
grep -h "route_topk\|moe_gateup_q4 .* slot k" $W/kernels-*.txt
OUT=$W/rec PARTS="env conformance" TOOLS="" timeout 250 bash testdata/cuda/device.sh >$W/rec/dev.txt 2>&1
echo "conformance done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/rec.tgz rec times.txt
if grep -q '^--- FAIL' $W/rec/conformance.log; then
	grep -h -A8 '^--- FAIL' $W/rec/conformance.log | head -40
	exit 1
fi
OUT=$W/rec PARTS="" timeout $((L - 150 - $(el))) bash testdata/cuda/device.sh >>$W/rec/dev.txt 2>&1
echo "sanitizers done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/rec.tgz rec times.txt
OUT=$W/rec/cli timeout $((L - 90 - $(el))) bash .devcarry-backendcli/device.sh >$W/rec/cli.txt 2>&1
echo "cli done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/rec.tgz rec times.txt
if [ $((L - $(el))) -gt 60 ]; then
	OUT=$W VARIANTS="new:gpu-new base:gpu-base" DIMS=35b VOCABS=32768 ROUNDS=3 TOKENS=256 timeout $((L - 5 - $(el))) sh bench/gpu/ab.sh >$W/ab.txt 2>&1
	echo "ab done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/ab.tgz ab ab.txt times.txt
	sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
fi
cat $W/times.txt
tail -n 2 $W/rec/*.log $W/rec/cli/*.log
