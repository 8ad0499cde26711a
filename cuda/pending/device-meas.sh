#!/bin/bash
# Measurements after rec.sh (TREE=dn: the deltanet-cols binaries).
set -u
O=$OUT
T0=$(date +%s)
mkdir -p /tmp/ab
B=gpu
if [ -f .devcarry-dngpu/gpu.gz ] && [ "${TREE:-dn}" = dn ]; then cp .devcarry-dngpu/gpu.gz .devcarry-benchgpu/gpu-dn.gz; B=gpu-dn; fi
CT=.devcarry-dn/cuda.test; [ "${TREE:-dn}" = dn ] || CT=.devcarry-cuda/cuda.test
gunzip -kf $CT.gz
(cd cuda && timeout 70 ../$CT -test.run '^$' -test.v -test.bench DecodeKernels -test.benchtime 1x >/tmp/ab/decode-kernels.log 2>&1)
echo "decode-kernels done at $(($(date +%s) - T0)) s" >>/tmp/ab/times.txt
OUT=/tmp/ab VARIANTS="new:$B cols0:$B:QPACK_CUDA_DN_COLS=0 slot0:$B:QPACK_CUDA_SHARED_SLOT=0 staged:$B:QPACK_CUDA_DIRECT_READ=0 old:gpu-old tl:$B:QPACK_CUDA_PROFILE=graphs" \
	DIMS=35b VOCABS=${VOCABS:-32768} ROUNDS=${ROUNDS:-2} timeout $((560 - ($(date +%s) - T0))) sh bench/gpu/ab.sh >/tmp/ab/ab.txt 2>&1
echo "ab done at $(($(date +%s) - T0)) s" >>/tmp/ab/times.txt
tar -C /tmp -czf "$O/ab.tgz" ab
cat /tmp/ab/times.txt
grep -h 'us a kernel' /tmp/ab/decode-kernels.log | cut -c1-140
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' /tmp/ab/ab/children.txt 2>/dev/null
grep -h 'host after\|between them' /tmp/ab/ab/tl-*.err 2>/dev/null | cut -c1-250
