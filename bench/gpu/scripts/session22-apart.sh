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
#   PART=recab (one call) the recording first (REC=prec, at most RECS=420
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
#   PART=prec (~300 s on an H100, twenty-seventh session) the same
#             recording with its parts at once on the one GPU (conformance,
#             racecheck as three slices whose logs are joined, memcheck,
#             synccheck, initcheck, the CLI: separate processes, each
#             under its own time limit; LIMIT, default 420 s, counts from
#             the start; JOBS picks parts), rec.tgz remade every 15 s so
#             that a run cut short still brings back what finished.
#             Timed: racecheck's slices 129, 211 and 299 s, conformance
#             180, the CLI 216; memcheck, synccheck and initcheck outran
#             their 145 s among eight processes and took 41 s as three.
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
	local L=${LIMIT:-420} R=/tmp/s15 pids=""
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
	want() { case " ${JOBS:-conformance racecheck memcheck synccheck initcheck cli} " in *" $1 "*) return 0 ;; esac; return 1; }
	want conformance && job conformance env OUT=$R/rec PARTS="env conformance" TOOLS="" CONFLIM=$((L - 10)) bash testdata/cuda/device.sh
	# racecheck in three slices at once (alone it outran 245 s of a 250 s
	# limit in the twenty-seventh session, still in its 15th test of 17),
	# their logs joined into racecheck.log when all three have ended.
	local s1='^Test(AttentionTileGPU|MatMulConformance|RMSNormConformance|SwiGLUConformance|MatMulManyVectors|AllocFree|NoSuchDevice|GemmEachKernel|GemmBaselineKernel|NormFuseGPU|SelectMappedGPU|SelectOneGPU)$'
	local s2='^Test(DeviceConformanceGPU|LayerGroupedExpertsGPU)$'
	local s3='^Test(LayerTinyModelsGPU|MappedUploadsGPU|PrefetchNextGPU)$'
	local i=0 s
	for s in "$s1" "$s2" "$s3"; do
		i=$((i + 1))
		want racecheck && job racecheck-$i env OUT=$R/rec PARTS="" TOOLS=racecheck SANRUN="$s" SANTAG=-$i RACELIM=$((L - 10)) bash testdata/cuda/device.sh
	done
	for tool in memcheck synccheck initcheck; do
		want $tool && job $tool env OUT=$R/rec PARTS="" TOOLS=$tool SANLIM=$((L - 10)) bash testdata/cuda/device.sh
	done
	want cli && job cli env OUT=$R/rec/cli bash .devcarry-backendcli/device.sh
	running() { # whether any job still runs (kill -0 of them all fails once one has ended)
		local p
		for p in $pids; do kill -0 $p 2>/dev/null && return 0; done
		return 1
	}
	while running; do
		sleep 15
		tar -C $R -czf $O/rec.tgz rec times.txt 2>/dev/null
	done
	wait
	# A part cut from outside can leave its own timeout's process group
	# running (GNU timeout makes one of its own): end what is left, so that
	# nothing shares the GPU with the timings after it.
	if pkill -KILL -f 'compute-sanitizer|[.]devcarry-cuda/cuda|[.]devcarry-backendcli/' 2>/dev/null; then
		echo "leftover processes killed at $(el) s" >>$R/times.txt
	fi
	want racecheck && cat $R/rec/racecheck-1.log $R/rec/racecheck-2.log $R/rec/racecheck-3.log >$R/rec/racecheck.log
	tar -C $R -czf $O/rec.tgz rec times.txt
	cat $R/times.txt
	tail -n 2 $R/rec/*.log $R/rec/cli/*.log 2>/dev/null
}
case ${PART:-ab} in
ab) ab ;;
rec) rec ;;
prec) prec ;;
recab) LIMIT=${RECS:-420} ${REC:-prec}; KBUILDS=cuda ROUNDS=${ROUNDS:-2} ABEND=${ABEND:-585} ab ;;
quick) gputests; KBUILDS=cuda ROUNDS=${ROUNDS:-2} ABEND=${ABEND:-220} ab ;;
esac
