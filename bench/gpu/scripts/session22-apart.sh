#!/bin/bash
# A pending kernel change on the device (cuda/pending/): its recording and
# a resident decode A/B of its switches in one call. Written for the
# twenty-second session's shared gate/up beside the router's top-k
# (dropped in the twenty-third, whose cuda/pending/pfnext.patch it now
# measures: VARIANTS names the switches). Built by
#   bash bench/gpu/scripts/session15-build.sh
# on the working tree (cuda.test, gpu-new; cuda-base.test and gpu-base from
# HEAD); carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu.
#   PART=ab   (~330 s) BenchmarkDecodeKernels of both builds (the copy,
#             route, moe and gemv_q4 lines), then resident decode A/B,
#             35b dims, 8 layers, 32,768 logits, 1,024 tokens, 3 rounds:
#             VARIANTS (ab.sh's; default new and base, HEAD's build).
#   PART=recab (one call) the recording first (REC=prec, at most RECS=250
#             s, or REC=rec, RECS=345: the parts one after another, as
#             timed in earlier sessions), then ab with this build's kernels
#             only until ABEND (585 s from the start).
#   PART=quick (~220 s, for a session left too little device time for the
#             recording): the pending change's GPU tests once (GPUTESTS; no
#             sanitizers, so not a recording), then ab with this build's
#             kernels only until ABEND (220 s from the start).
#   PART=rec  (~300 s) the recording of this tree's kernels:
#             session15-route.sh's PART=rec without its kernel timings
#             (conformance, the four sanitizers, the CLI, into $OUT/rec.tgz).
#   PART=prec (~120-250 s, twenty-sixth session, not yet timed on a GPU) the
#             same recording with its six parts at once on the one GPU
#             (conformance, each sanitizer, the CLI: separate processes,
#             each under its own time limit; LIMIT, default 250 s, counts
#             from the start), rec.tgz remade every 15 s so that a run cut
#             short still brings back what finished.
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=$OUT/s22a # under $OUT: what a run cut short leaves comes back
mkdir -p $W
for f in cuda cuda-base; do [ -f .devcarry-cuda/$f.test ] || gunzip -k .devcarry-cuda/$f.test.gz; done
ab() {
	for f in ${KBUILDS:-cuda-base cuda}; do
		(cd cuda && timeout 70 ../.devcarry-cuda/$f.test -test.run '^$' -test.bench DecodeKernels -test.benchtime 1x -test.v >$W/kernels-$f.txt 2>&1)
	done
	echo "kernels done at $(el) s" >>$W/times.txt
	grep -h "copy:\|route_topk\|moe_\|gemv_q4 \|select" $W/kernels-*.txt | cut -c1-260
	OUT=$W VARIANTS=${VARIANTS:-"new:gpu-new base:gpu-base"} \
		DIMS=35b VOCABS=32768 ROUNDS=${ROUNDS:-3} TOKENS=1024 timeout $((${ABEND:-590} - $(el))) sh bench/gpu/ab.sh >$W/ab.txt 2>&1
	echo "ab done at $(el) s" >>$W/times.txt
	cat $W/times.txt
	grep -h " tps=" $W/ab.txt
}
gputests() {
	(cd cuda && timeout 60 ../.devcarry-cuda/cuda.test -test.v -test.count=1 \
		-test.run "${GPUTESTS:-^Test(SelectOneGPU|PrefetchNextGPU|SelectMappedGPU)\$}" >$W/tests.txt 2>&1
	echo "exit status $?" >>$W/tests.txt)
	echo "tests done at $(el) s" >>$W/times.txt
	grep -h "^--- \|^ok\|FAIL\|exit status" $W/tests.txt
}
rec() {
	# session15-route.sh's recording, without its kernel timings; its
	# LIMIT counts from its own start.
	PART=rec SKIPK=1 LIMIT=${LIMIT:-570} bash bench/gpu/scripts/session15-route.sh
}
prec() {
	local L=${LIMIT:-250} R=/tmp/s15 pids=""
	mkdir -p $R/rec/cli
	gunzip -k .devcarry-backendcli/qpack.gz .devcarry-backendcli/cmd.test.gz 2>/dev/null
	job() { # name, then the command: under the time left, its end in times.txt
		local n=$1
		shift
		(timeout $((L - 5 - $(el))) "$@" >$R/rec/dev-$n.txt 2>&1
			rc=$? # before $(el), which would replace it
			echo "$n done at $(el) s (exit $rc)" >>$R/times.txt) &
		pids="$pids $!"
	}
	job conformance env OUT=$R/rec PARTS="env conformance" TOOLS="" bash testdata/cuda/device.sh
	for tool in racecheck memcheck synccheck initcheck; do
		job $tool env OUT=$R/rec PARTS="" TOOLS=$tool bash testdata/cuda/device.sh
	done
	job cli env OUT=$R/rec/cli bash .devcarry-backendcli/device.sh
	while kill -0 $pids 2>/dev/null; do # while any runs
		sleep 15
		tar -C $R -czf $O/rec.tgz rec times.txt 2>/dev/null
	done
	wait
	tar -C $R -czf $O/rec.tgz rec times.txt
	cat $R/times.txt
	tail -n 2 $R/rec/*.log $R/rec/cli/*.log
}
case ${PART:-ab} in
ab) ab ;;
rec) rec ;;
prec) prec ;;
recab) LIMIT=${RECS:-250} ${REC:-prec}; KBUILDS=cuda ROUNDS=${ROUNDS:-2} ABEND=${ABEND:-585} ab ;;
quick) gputests; KBUILDS=cuda ROUNDS=${ROUNDS:-2} ABEND=${ABEND:-220} ab ;;
esac
