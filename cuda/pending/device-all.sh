#!/bin/bash
# One device call (ninth session): the sampler's scans, the recordings of
# the patched tree (.devcarry-dn), then as much of the resident-decode A/B
# as the call's 600 s leave. Carry .devcarry-dn .devcarry-dngpu .devcarry-benchgpu.
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
R=/tmp/rec
mkdir -p $R/cli /tmp/ab .devcarry-cuda .devcarry-backendcli
cp .devcarry-dn/cuda.test.gz .devcarry-cuda/
cp .devcarry-dn/qpack.gz .devcarry-dn/cmd.test.gz testdata/cuda/cli/device.sh .devcarry-backendcli/
cp .devcarry-dngpu/gpu.gz .devcarry-benchgpu/gpu-dn.gz
cp .devcarry-dngpu/gpu-par.gz .devcarry-benchgpu/gpu-dnpar.gz
gunzip -kf .devcarry-dngpu/sample.test.gz
timeout 40 ./.devcarry-dngpu/sample.test -test.run '^$' -test.v -test.bench ScanVocab -test.benchtime 1000x >/tmp/ab/scanvocab.log 2>&1
echo "scan done at $(el) s" >>$R/times.txt
OUT=$R PARTS="env conformance" timeout 450 bash testdata/cuda/device.sh >$R/dev.txt 2>&1
echo "recording done at $(el) s" >>$R/times.txt
OUT=$R/cli timeout $((470 - $(el))) bash .devcarry-backendcli/device.sh >$R/cli.txt 2>&1
echo "cli done at $(el) s" >>$R/times.txt
tar -C /tmp -czf "$O/rec.tgz" rec
left=$((520 - $(el)))
if [ $left -gt 60 ]; then
	OUT=/tmp/ab VARIANTS="new:gpu-dn par:gpu-dnpar main:gpu" DIMS=35b VOCABS=248320 ROUNDS=1 TOKENS=512 \
		timeout $left sh bench/gpu/ab.sh >/tmp/ab/ab2.txt 2>&1
	echo "ab 248320 done at $(el) s" >>$R/times.txt
fi
left=$((520 - $(el)))
if [ $left -gt 60 ]; then
	OUT=/tmp/ab VARIANTS="new:gpu-dn par:gpu-dnpar main:gpu cols0:gpu-dn:QPACK_CUDA_DN_COLS=0" DIMS=35b VOCABS=32768 ROUNDS=1 TOKENS=512 \
		timeout $left sh bench/gpu/ab.sh >/tmp/ab/ab.txt 2>&1
	echo "ab 32768 done at $(el) s" >>$R/times.txt
fi
cp $R/times.txt /tmp/ab/
tar -C /tmp -czf "$O/ab.tgz" ab
cat $R/times.txt
grep -h ScanVocab /tmp/ab/scanvocab.log | sed 's/  */ /g' | cut -c1-230
nproc
tail -n 2 $R/*.log $R/cli/*.log
grep -h -A5 '^--- FAIL' $R/*.log $R/cli/*.log | head -30
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' /tmp/ab/ab/children.txt 2>/dev/null
