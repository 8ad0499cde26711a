#!/bin/bash
# The sampler's scans on the device host (ninth session's last device time):
# BenchmarkScanVocab, then the resident decode A/B of the patched tree with
# and without the scans in chunks (par / new) and the tree without the
# patches (main), at vocabularies 248,320 and 32,768.
# Carry .devcarry-dngpu .devcarry-benchgpu.
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
mkdir -p /tmp/ab
cp .devcarry-dngpu/gpu.gz .devcarry-benchgpu/gpu-dn.gz
cp .devcarry-dngpu/gpu-par.gz .devcarry-benchgpu/gpu-dnpar.gz
gunzip -kf .devcarry-dngpu/sample.test.gz
timeout 60 ./.devcarry-dngpu/sample.test -test.run '^$' -test.v -test.bench ScanVocab -test.benchtime 2000x -test.count 2 >/tmp/ab/scanvocab.log 2>&1
echo "scan done at $(el) s" >>/tmp/ab/times.txt
OUT=/tmp/ab VARIANTS="new:gpu-dn par:gpu-dnpar main:gpu" DIMS=35b VOCABS=248320 ROUNDS=2 TOKENS=512 \
	timeout $((300 - $(el))) sh bench/gpu/ab.sh >/tmp/ab/ab2.txt 2>&1
echo "ab 248320 done at $(el) s" >>/tmp/ab/times.txt
OUT=/tmp/ab VARIANTS="new:gpu-dn par:gpu-dnpar" DIMS=35b VOCABS=32768 ROUNDS=2 TOKENS=512 \
	timeout $((400 - $(el))) sh bench/gpu/ab.sh >/tmp/ab/ab.txt 2>&1
echo "ab 32768 done at $(el) s" >>/tmp/ab/times.txt
tar -C /tmp -czf "$O/ab.tgz" ab
cat /tmp/ab/times.txt
nproc; grep -m1 'model name' /proc/cpuinfo
grep -h ScanVocab /tmp/ab/scanvocab.log | sed 's/  */ /g' | cut -c1-250
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' /tmp/ab/ab/children.txt 2>/dev/null
