#!/bin/bash
# Fourteenth session (decode-fusions.patch applied), in two device calls on
# a warm machine, each archiving every part to $OUT as it ends (the run tool
# returns a few files of $OUT only):
#   PART=rec: the persistent-kernel probe (BenchmarkPersistentPhasesGPU:
#     a grid barrier's cost, phases in one launch against one kernel each),
#     then the recording of this tree's kernels: conformance (on a failure:
#     each failing test alone under memcheck and with the fusions off, then
#     stop), the four sanitizers, the CLI.
#   PART=ab: resident decode A/B at 32,768 logits, then 248,320: the
#     default fusions (new: QPACK_CUDA_FUSE unset), none, all, the default
#     with the residual norm and the router's choice (norm), with the
#     DeltaNet's gated norm (gnorm), layers grouped into one submission
#     (flush2: two layers a graph; step: a step a graph), and the tree
#     before the eleventh session's per-layer graphs (base, 201427d); then
#     the new binary's step timeline and kernel profile.
# Built on the development machine (CGO_ENABLED=0 GOOS=linux GOARCH=amd64,
# -trimpath, gzip -9 each):
#   .devcarry-cuda/cuda.test.gz        go test -c -ldflags='-s -w' ./cuda/
#   .devcarry-backendcli/{qpack,cmd.test}.gz and device.sh   as testdata/cuda/cli/device.sh says
#   .devcarry-benchgpu/gpu-new.gz      go build -ldflags=-s ./bench/gpu
#   .devcarry-benchgpu/gpu-base.gz     the same from 201427d (a git worktree)
# run: PART=rec LIMIT=560 bash bench/gpu/scripts/session14.sh, then PART=ab
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
set -u
O=$OUT
T0=$(date +%s)
L=${LIMIT:-560} # seconds this call may take
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s14
mkdir -p $W/rec/cli $W/ab
T=$PWD/.devcarry-cuda/cuda.test
[ -f "$T" ] || gunzip -k "$T.gz"
case ${PART:-rec} in
rec)
	(cd cuda && timeout 60 "$T" -test.run '^$' -test.bench PersistentPhasesGPU -test.benchtime 1x -test.v >$W/probe.txt 2>&1)
	echo "probe done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/probe.tgz probe.txt times.txt
	# bandwidth and gemmrate are not this patch's (their kernels are unchanged): not rerun.
	OUT=$W/rec PARTS="env conformance" TOOLS="" timeout 250 bash testdata/cuda/device.sh >$W/rec/dev.txt 2>&1
	echo "conformance done at $(el) s" >>$W/times.txt
	if grep -q '^--- FAIL' $W/rec/conformance.log; then
		for t in $(grep '^--- FAIL' $W/rec/conformance.log | awk '{print $3}' | head -4); do
			(cd cuda && QPACK_CUDA_REQUIRE=1 QPACK_CUDA_TINY_ONE=1 timeout 60 compute-sanitizer --tool memcheck --print-limit 8 "$T" -test.v -test.count=1 -test.run "^$t\$" >$W/rec/diag-$t.log 2>&1
				QPACK_CUDA_REQUIRE=1 QPACK_CUDA_FUSE=none timeout 60 "$T" -test.v -test.count=1 -test.run "^$t\$" >$W/rec/diag-$t-off.log 2>&1)
			[ $((L - 80 - $(el))) -gt 0 ] || break
		done
		tar -C $W -czf $O/rec.tgz rec times.txt
		cat $W/times.txt
		grep -h -A8 '^--- FAIL' $W/rec/*.log | head -60
		exit 1
	fi
	tar -C $W -czf $O/rec.tgz rec times.txt
	OUT=$W/rec PARTS="" timeout $((L - 70 - $(el))) bash testdata/cuda/device.sh >>$W/rec/dev.txt 2>&1
	echo "sanitizers done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/rec.tgz rec times.txt
	OUT=$W/rec/cli timeout $((L - 5 - $(el))) bash .devcarry-backendcli/device.sh >$W/rec/cli.txt 2>&1
	echo "cli done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/rec.tgz rec times.txt
	cat $W/times.txt
	grep -v "^    " $W/probe.txt | tail -n 14
	tail -n 2 $W/rec/*.log $W/rec/cli/*.log
	grep -h -A5 '^--- FAIL' $W/rec/*.log $W/rec/cli/*.log | head -30
	;;
ab)
	ab() {
		OUT=$W VARIANTS="new:gpu-new none:gpu-new:QPACK_CUDA_FUSE=none all:gpu-new:QPACK_CUDA_FUSE=all norm:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv+norm+route gnorm:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv+gnorm flush2:gpu-new:QPACK_CUDA_FLUSH_LAYERS=2 step:gpu-new:QPACK_CUDA_FLUSH_LAYERS=step base:gpu-base" DIMS=35b VOCABS=$1 ROUNDS=1 TOKENS=256 timeout $2 sh bench/gpu/ab.sh >>$W/ab.txt 2>&1
		echo "ab $1 done at $(el) s" >>$W/times.txt
		tar -C $W -czf $O/ab.tgz ab ab.txt times.txt
	}
	ab 32768 $((L / 2))
	[ $((L - $(el))) -gt 150 ] && ab 248320 $((L - 90 - $(el)))
	if [ $((L - $(el))) -gt 45 ]; then
		B=.devcarry-benchgpu/gpu-new
		timeout 60 $B -child write -model $W/m -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
		QPACK_CUDA_PROFILE=graphs timeout 20 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/tl.json 2>$W/tl.txt
		QPACK_CUDA_FLUSH_LAYERS=step QPACK_CUDA_PROFILE=graphs timeout 20 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/tl-step.json 2>$W/tl-step.txt
		QPACK_CUDA_PROFILE=1 timeout 20 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/prof.json 2>$W/prof.txt
		rm -rf $W/m
		echo "profiles done at $(el) s" >>$W/times.txt
		tar -C $W -czf $O/ab.tgz ab ab.txt times.txt tl.txt tl.json tl-step.txt tl-step.json prof.txt prof.json
	fi
	cat $W/times.txt
	sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
	grep -h "gaps\|host after\|inside a queue\|between them" $W/tl.txt $W/tl-step.txt | head -12
	head -24 $W/prof.txt
	;;
esac
