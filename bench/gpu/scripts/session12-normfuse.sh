#!/bin/bash
# The decode fusions (cuda/pending/decode-fusions.patch applied), in one
# device call: the recording of this tree's kernels (conformance with the
# fusion's GPU tests, the four sanitizers, the CLI), then resident decode
# A/B at both vocabularies: the default fusions (new: QPACK_CUDA_FUSE
# unset), none, all, the default with the residual norm and the router's
# choice (norm), the default with the DeltaNet's gated norm (gnorm), and
# the tree before the eleventh session's per-layer graphs (base, 201427d);
# then the new binary's kernel profile and step timeline. (The thirteenth
# session's H200 run of all fusions against none: 1,186 against 1,379
# tok/s, bench/gpu/results/session13-normfuse-h200.) Each part is
# archived as it ends (the run tool returns a few files of $OUT only).
# Built on the development machine (CGO_ENABLED=0 GOOS=linux GOARCH=amd64,
# -trimpath, gzip -9 each):
#   .devcarry-cuda/cuda.test.gz        go test -c -ldflags='-s -w' ./cuda/
#   .devcarry-backendcli/{qpack,cmd.test}.gz and device.sh   as testdata/cuda/cli/device.sh says
#   .devcarry-benchgpu/gpu-new.gz      go build -ldflags=-s ./bench/gpu
#   .devcarry-benchgpu/gpu-base.gz     the same from 201427d (a git worktree)
# run: bash bench/gpu/scripts/session12-normfuse.sh
#   carry .devcarry-cuda .devcarry-backendcli .devcarry-benchgpu
set -u
O=$OUT
T0=$(date +%s)
L=${LIMIT:-560} # seconds this call may take (device time left)
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s12
mkdir -p $W/rec/cli $W/ab
# bandwidth and gemmrate are not this patch's (their kernels are unchanged): not rerun.
OUT=$W/rec PARTS="env conformance" TOOLS="" timeout 250 bash testdata/cuda/device.sh >$W/rec/dev.txt 2>&1
echo "conformance done at $(el) s" >>$W/times.txt
if grep -q '^--- FAIL' $W/rec/conformance.log; then
	# A failure (a device error poisons the context for the tests after
	# it): each failing test alone under memcheck, then with the fusions
	# off, to diagnose; nothing else (device time is scarce).
	T=$PWD/.devcarry-cuda/cuda.test
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
# The A/B at the small vocabulary first (the figure this patch is for),
# then the rest of the recording, then the large vocabulary; every part
# archived as it ends (a call cut at its limit returns what $OUT holds).
ab() {
	OUT=$W VARIANTS="new:gpu-new none:gpu-new:QPACK_CUDA_FUSE=none all:gpu-new:QPACK_CUDA_FUSE=all norm:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv+norm+route gnorm:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv+gnorm base:gpu-base" DIMS=35b VOCABS=$1 ROUNDS=1 TOKENS=256 timeout 150 sh bench/gpu/ab.sh >>$W/ab.txt 2>&1
	echo "ab $1 done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/ab.tgz ab ab.txt times.txt
}
ab 32768
if [ $((L - $(el))) -lt 260 ]; then # no time for the sanitizers: what ran, and stop
	cat $W/times.txt
	tail -n 2 $W/rec/*.log
	sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
	exit 0
fi
OUT=$W/rec PARTS="" timeout 300 bash testdata/cuda/device.sh >>$W/rec/dev.txt 2>&1
echo "recording done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/rec.tgz rec times.txt
OUT=$W/rec/cli timeout 60 bash .devcarry-backendcli/device.sh >$W/rec/cli.txt 2>&1
echo "cli done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/rec.tgz rec times.txt
[ $((L - 10 - $(el))) -gt 90 ] && ab 248320
if [ $((L - $(el))) -gt 45 ]; then
	B=.devcarry-benchgpu/gpu-new
	timeout 60 $B -child write -model $W/m -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
	QPACK_CUDA_PROFILE=graphs timeout 20 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/tl.json 2>$W/tl.txt
	QPACK_CUDA_PROFILE=1 timeout 20 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 256 -resident-context 16 >$W/prof.json 2>$W/prof.txt
	rm -rf $W/m
	echo "profiles done at $(el) s" >>$W/times.txt
	tar -C $W -czf $O/ab.tgz ab ab.txt times.txt tl.txt tl.json prof.txt prof.json
fi
cat $W/times.txt
tail -n 2 $W/rec/*.log $W/rec/cli/*.log
grep -h -A5 '^--- FAIL' $W/rec/*.log $W/rec/cli/*.log | head -30
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
grep -h "gaps\|host after\|inside a queue" $W/tl.txt | head -8
head -24 $W/prof.txt
