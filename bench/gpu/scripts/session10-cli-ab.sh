#!/bin/bash
# Call 2: the CLI recording, the sampler's scans, then the resident decode A/B.
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
R=/tmp/rec2
mkdir -p $R/cli /tmp/ab .devcarry-backendcli
cp .devcarry-dn/qpack.gz .devcarry-dn/cmd.test.gz testdata/cuda/cli/device.sh .devcarry-backendcli/
cp .devcarry-dngpu/gpu.gz .devcarry-benchgpu/gpu-dn.gz
cp .devcarry-dngpu/gpu-par.gz .devcarry-benchgpu/gpu-dnpar.gz
cp .devcarry-dngpu/gpu-sel.gz .devcarry-benchgpu/gpu-sel.gz
gunzip -kf .devcarry-dngpu/sample.test.gz
OUT=$R/cli timeout 200 bash .devcarry-backendcli/device.sh >$R/cli.txt 2>&1
echo "cli done at $(el) s" >>$R/times.txt
tar -C /tmp -czf "$O/rec2.tgz" rec2
timeout 40 ./.devcarry-dngpu/sample.test -test.run '^$' -test.v -test.bench ScanVocab -test.benchtime 1000x >/tmp/ab/scanvocab.log 2>&1
echo "scan done at $(el) s" >>$R/times.txt
left=$((560 - $(el)))
OUT=/tmp/ab VARIANTS="sel:gpu-sel new:gpu-dn par:gpu-dnpar main:gpu" DIMS=35b VOCABS=248320 ROUNDS=2 TOKENS=512 \
	timeout $((left / 2)) sh bench/gpu/ab.sh >/tmp/ab/ab2.txt 2>&1
echo "ab 248320 done at $(el) s" >>$R/times.txt
mkdir -p /tmp/ab/v248; cp -r /tmp/ab/ab /tmp/ab/v248/ 2>/dev/null
left=$((560 - $(el)))
OUT=/tmp/ab VARIANTS="sel:gpu-sel new:gpu-dn par:gpu-dnpar main:gpu" DIMS=35b VOCABS=32768 ROUNDS=2 TOKENS=512 \
	timeout $left sh bench/gpu/ab.sh >/tmp/ab/ab.txt 2>&1
echo "ab 32768 done at $(el) s" >>$R/times.txt
cp $R/times.txt /tmp/ab/
tar -C /tmp -czf "$O/ab.tgz" ab
cat $R/times.txt
grep -h ScanVocab /tmp/ab/scanvocab.log | sed 's/  */ /g' | cut -c1-230
tail -n 2 $R/cli/*.log
grep -h -A5 '^--- FAIL' $R/cli/*.log | head -30
for f in /tmp/ab/v248/ab/children.txt /tmp/ab/ab/children.txt; do echo "== $f"; sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' $f 2>/dev/null; done
