#!/bin/bash
# route-registers.patch (cuda/pending) on the device, in two calls on a warm
# machine, each part archived to $OUT as it ends (the run tool returns a few
# files of $OUT only):
#   PART=rec: route_topk before and after in one run (BenchmarkDecodeKernels
#     of the tree without the patch, cuda-base.test, and with it, cuda.test:
#     the route_topk [1, 256] k 8 line; 5.97 us on the H200 in the
#     fourteenth session, against 0.74 us for an empty kernel), then the
#     recording of the patched tree's kernels (conformance, the four
#     sanitizers, the CLI).
#   PART=ab: the MoE gate/up with the shared expert as slot k at two groups
#     a multiprocessor and at three (BenchmarkDecodeKernels with
#     QPACK_CUDA_DEFINES=QP_MOE_MIN_GROUPS=3: at two, 8 routed slots are
#     256 groups of 16 rows, one wave on 132 multiprocessors, and the
#     shared expert's ninth slot makes 288, a second wave: 7.05 against
#     10.53 us in the fourteenth session), then resident decode A/B, 35b
#     dims, 32,768 logits, 1,024 tokens a run (256 moved 4.6% between
#     rounds), 3 interleaved rounds: new (the patched tree), base (without
#     it), slot0 (the shared expert in launches of its own,
#     QPACK_CUDA_SHARED_SLOT=0), moe3 (QP_MOE_MIN_GROUPS=3).
# Built on the development machine (CGO_ENABLED=0 GOOS=linux GOARCH=amd64,
# -trimpath, gzip -9 each), the patch applied unless said:
#   .devcarry-cuda/cuda.test.gz        go test -c -ldflags='-s -w' ./cuda/
#   .devcarry-cuda/cuda-base.test.gz   the same without the patch
#   .devcarry-backendcli/{qpack,cmd.test}.gz and device.sh   as testdata/cuda/cli/device.sh says
#   .devcarry-benchgpu/gpu-new.gz, gpu-base.gz   go build -ldflags=-s ./bench/gpu, with and without
# run: PART=rec LIMIT=560 bash bench/gpu/scripts/session15-route.sh, then PART=ab
# (PART=kernels: the working tree's BenchmarkDecodeKernels alone, for host
# changes that need no recording; PART=rec SKIPK=1: the recording without
# the kernel timings before it)
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
# For another kernel change (the fifteenth session's second: the router's
# rounds in integer reductions), PART=ab takes VARIANTS (ab.sh's list;
# default the four above) and KDEFINES (the kernels' second run's
# QPACK_CUDA_DEFINES; empty: that run is skipped); PART=rec prints the
# kernel lines that KGREP matches (default route_topk). PART=ab also takes
# TOKENS and ROUNDS (default 1,024 and 3) and CONTEXT (ab.sh's prompt before
# the resident decode, default 16).
set -u
O=$OUT
T0=$(date +%s)
L=${LIMIT:-560}
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s15
mkdir -p $W/rec/cli
for f in cuda cuda-base; do [ -f .devcarry-cuda/$f.test ] || gunzip -k .devcarry-cuda/$f.test.gz; done
case ${PART:-rec} in
kernels)
	# BenchmarkDecodeKernels of the working tree's build alone (no
	# recording: for host changes, before PART=ab).
	(cd cuda && timeout 90 ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels-cuda.txt 2>&1)
	echo "kernels done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/kernels.tgz kernels-cuda.txt times.txt
	grep -h "${KGREP:-attention}" $W/kernels-cuda.txt
	;;
rec)
	[ -n "${SKIPK:-}" ] || for f in cuda-base cuda; do
		(cd cuda && timeout 60 ../.devcarry-cuda/$f.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels-$f.txt 2>&1)
	done
	echo "kernels done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/kernels.tgz kernels-cuda.txt kernels-cuda-base.txt times.txt
	grep -h "${KGREP:-route_topk}" $W/kernels-*.txt
	OUT=$W/rec PARTS="env conformance" TOOLS="" timeout 250 bash testdata/cuda/device.sh >$W/rec/dev.txt 2>&1
	echo "conformance done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/rec.tgz rec times.txt
	if grep -q '^--- FAIL' $W/rec/conformance.log; then
		grep -h -A8 '^--- FAIL' $W/rec/conformance.log | head -40
		exit 1
	fi
	OUT=$W/rec PARTS="" timeout $((L - 60 - $(el))) bash testdata/cuda/device.sh >>$W/rec/dev.txt 2>&1
	echo "sanitizers done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/rec.tgz rec times.txt
	OUT=$W/rec/cli timeout $((L - 5 - $(el))) bash .devcarry-backendcli/device.sh >$W/rec/cli.txt 2>&1
	echo "cli done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/rec.tgz rec times.txt
	cat $W/times.txt
	tail -n 2 $W/rec/*.log $W/rec/cli/*.log
	;;
ab)
	KD=${KDEFINES-QP_MOE_MIN_GROUPS=3}
	touch $W/kernels-moe3.txt
	if [ -n "$KD" ]; then
		(cd cuda && QPACK_CUDA_DEFINES=$KD timeout 60 ../.devcarry-cuda/cuda.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels-moe3.txt 2>&1)
		echo "kernels ($KD) done at $(el) s" >>$W/times.txt
		tar -C $W -czf $O/ab.tgz kernels-moe3.txt times.txt
		grep -h "${KGREP:-moe_}" $W/kernels-moe3.txt
	fi
	OUT=$W VARIANTS=${VARIANTS:-"new:gpu-new base:gpu-base slot0:gpu-new:QPACK_CUDA_SHARED_SLOT=0 moe3:gpu-new:QPACK_CUDA_DEFINES=QP_MOE_MIN_GROUPS=3"} DIMS=35b VOCABS=32768 ROUNDS=${ROUNDS:-3} TOKENS=${TOKENS:-1024} timeout $((L - 5 - $(el))) sh bench/gpu/ab.sh >$W/ab.txt 2>&1
	echo "ab done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/ab.tgz kernels-moe3.txt ab ab.txt times.txt
	cat $W/times.txt
	sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
	;;
esac
