#!/bin/bash
# The eleventh session's third call: the host-side changes (a04aeed: the
# routed tables' LRU touches in turn, the word-wise shape hash) against the
# tree before them (gpu-base), resident decode at both vocabularies, then
# the step timeline and a CPU profile of the new binary. Everything is
# archived into one tarball (the run tool returns a few files only).
#   build gpu-base and gpu-new into .devcarry-benchgpu (go build ./bench/gpu), gzip -9 both
#   run: bash bench/gpu/scripts/session11-host.sh     carry .devcarry-benchgpu
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=/tmp/h11
mkdir -p $W/ab
OUT=$W VARIANTS="new:gpu-new base:gpu-base" DIMS=35b VOCABS="248320 32768" ROUNDS=3 TOKENS=512 timeout 300 sh bench/gpu/ab.sh >$W/ab.txt 2>&1
echo "ab done at $(el) s" >>$W/times.txt
tar -C /tmp -czf $O/h11.tgz h11
B=.devcarry-benchgpu/gpu-new
timeout 90 $B -child write -model $W/m -dims 35b -layers 8 -vocab 248320 >$W/write.txt 2>&1
QPACK_CUDA_PROFILE=graphs timeout 40 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 512 -resident-context 16 >$W/tl.json 2>$W/tl.txt
mkdir -p $W/prof
QPACK_BENCH_CPUPROFILE=$W/prof timeout 40 $B -child resident -backend cuda -model $W/m -dims 35b -tokens 2048 -resident-context 16 >$W/prof.json 2>$W/prof.txt
rm -rf $W/m
echo "profiles done at $(el) s" >>$W/times.txt
tar -C /tmp -czf $O/h11.tgz h11
cat $W/times.txt
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
grep -h "gaps\|host after" $W/tl.txt | head -8
