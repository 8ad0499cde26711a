#!/bin/bash
# The twenty-first session's second device call (~280 s): built by
#   BASE=HEAD~1 bash bench/gpu/scripts/session15-build.sh
# (gpu-base: before the sampler's top-p change; gpu-new: with it), plus
# sample-base.test and sample-new.test (go test -c ./runtime/sample at the
# two commits) in .devcarry-benchgpu; carry .devcarry-cuda
# .devcarry-backendcli .devcarry-benchgpu.
#   1. BenchmarkSampleTop on the device's host, base and new, 3 runs each
#      (the draw took 16 µs of the step boundary there against ~3.9 µs
#      in the same benchmark on the development machine);
#   2. the marked timeline (QPACK_CUDA_PROFILE=graphs, 512 tokens), base
#      and new: the draw at the step boundary;
#   3. resident decode A/B (35b dims, 8 layers, 32,768 logits, 1,024
#      tokens, 3 rounds): base, new, fuse (new with
#      QPACK_CUDA_FUSE=qknorm+rope+kv; +0.8% in this session's first call),
#      flush2 (QPACK_CUDA_FLUSH_LAYERS=2: two layers a graph; the timeline
#      has the GPU idle 3.9 µs before each DeltaNet layer's graph, 7.6
#      before each attention layer's).
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
W=/tmp/s21b
mkdir -p $W
G=.devcarry-benchgpu
for v in base new; do
	chmod +x $G/sample-$v.test
	(cd runtime/sample && ../../$G/sample-$v.test -test.run '^$' -test.bench 'SampleTop$' -test.count 3 -test.benchtime 1s >$W/bench-sample-$v.txt 2>&1)
done
lscpu >$W/lscpu.txt 2>&1
echo "sample benches done at $(el) s" >>$W/times.txt
for v in base new; do [ -f $G/gpu-$v ] || gunzip -k $G/gpu-$v.gz; done
timeout 90 $G/gpu-new -child write -model $W/model -dims 35b -layers 8 -vocab 32768 >$W/write.txt 2>&1
for v in base new; do
	QPACK_CUDA_PROFILE=graphs timeout 90 $G/gpu-$v -child resident -backend cuda -model $W/model -dims 35b \
		-tokens 512 -resident-context 16 >$W/tl-$v.txt 2>$W/tl-$v.err
done
rm -rf $W/model
echo "timelines done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s21b.tgz .
OUT=$W VARIANTS="base:gpu-base new:gpu-new fuse:gpu-new:QPACK_CUDA_FUSE=qknorm+rope+kv flush2:gpu-new:QPACK_CUDA_FLUSH_LAYERS=2" DIMS=35b VOCABS=32768 \
	ROUNDS=${ROUNDS:-3} TOKENS=1024 timeout 400 sh bench/gpu/ab.sh >$W/ab.txt 2>&1
echo "ab done at $(el) s" >>$W/times.txt
tar -C $W -czf $O/s21b.tgz .
cat $W/times.txt
grep -h "ns/op" $W/bench-sample-*.txt
grep -h "host's path from the first wait to the submission of \"memset gather_rows" $W/tl-*.err | sort -u | cut -c1-900
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $W/ab/children.txt
