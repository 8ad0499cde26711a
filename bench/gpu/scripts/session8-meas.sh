#!/bin/bash
# Measurements after rec.sh (TREE=dn: the deltanet-cols binaries).
# gpu-dn: the patched tree; gpu-dnpar: the same with the sampler's scans in
# chunks on several cores; gpu: the tree without the patch.
set -u
O=$OUT
T0=$(date +%s)
mkdir -p /tmp/ab/prof
cp .devcarry-dngpu/gpu.gz .devcarry-benchgpu/gpu-dn.gz
cp .devcarry-dngpu/gpu-par.gz .devcarry-benchgpu/gpu-dnpar.gz
gunzip -kf .devcarry-dngpu/sample.test.gz
./.devcarry-dngpu/sample.test -test.run '^$' -test.v -test.bench ScanVocab -test.benchtime 2000x -test.count 2 >/tmp/ab/scanvocab.log 2>&1
echo "scanvocab done at $(($(date +%s) - T0)) s" >>/tmp/ab/times.txt
CT=.devcarry-dn/cuda.test
gunzip -kf $CT.gz
(cd cuda && timeout 70 ../$CT -test.run '^$' -test.v -test.bench DecodeKernels -test.benchtime 1x >/tmp/ab/decode-kernels.log 2>&1)
echo "decode-kernels done at $(($(date +%s) - T0)) s" >>/tmp/ab/times.txt
OUT=/tmp/ab VARIANTS="new:gpu-dn par:gpu-dnpar cols0:gpu-dn:QPACK_CUDA_DN_COLS=0 main:gpu tl:gpu-dn:QPACK_CUDA_PROFILE=graphs" \
	DIMS=35b VOCABS=32768 ROUNDS=${ROUNDS:-2} TOKENS=${TOKENS:-512} timeout $((240 - ($(date +%s) - T0))) sh bench/gpu/ab.sh >/tmp/ab/ab.txt 2>&1
echo "ab 32768 done at $(($(date +%s) - T0)) s" >>/tmp/ab/times.txt
OUT=/tmp/ab VARIANTS="new:gpu-dn par:gpu-dnpar main:gpu" \
	DIMS=35b VOCABS=248320 ROUNDS=${ROUNDS:-2} TOKENS=${TOKENS:-512} timeout $((330 - ($(date +%s) - T0))) sh bench/gpu/ab.sh >/tmp/ab/ab2.txt 2>&1
echo "ab 248320 done at $(($(date +%s) - T0)) s" >>/tmp/ab/times.txt
# A CPU profile of 2,048 resident steps at the larger vocabulary (the host's share of a step).
G=.devcarry-benchgpu/gpu-dnpar
voc=248320
timeout 60 $G -child write -model /tmp/p-$voc -dims 35b -layers 8 -vocab $voc >/dev/null 2>&1 &&
	mkdir -p /tmp/ab/prof/$voc && QPACK_BENCH_CPUPROFILE=/tmp/ab/prof/$voc timeout $((380 - ($(date +%s) - T0))) $G -child resident -backend cuda \
		-model /tmp/p-$voc -dims 35b -tokens 2048 -resident-context 16 >/tmp/ab/prof/$voc.json 2>/tmp/ab/prof/$voc.err
rm -rf /tmp/p-$voc
echo "profile $voc done at $(($(date +%s) - T0)) s" >>/tmp/ab/times.txt
tar -C /tmp -czf "$O/ab.tgz" ab
cat /tmp/ab/times.txt
grep -h 'ScanVocab' /tmp/ab/scanvocab.log | cut -c1-220
grep -h 'us a kernel' /tmp/ab/decode-kernels.log | cut -c1-140
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' /tmp/ab/ab/children.txt 2>/dev/null
grep -h 'host after\|between them' /tmp/ab/ab/tl-*.err 2>/dev/null | cut -c1-250
grep -o '"tok_per_sec":[0-9.]*' /tmp/ab/prof/*.json
