#!/bin/bash
# The recordings: the deltanet-cols tree (.devcarry-dn) when its DeltaNet and
# layer tests pass on this GPU, else this checkout's binaries.
set -u
O=$OUT
T0=$(date +%s)
mkdir -p /tmp/rec/cli
# The sampler's scans on 1, 2, 4 and 8 cores (a few seconds).
gunzip -kf .devcarry-dn/sample.test.gz && timeout 40 ./.devcarry-dn/sample.test -test.run '^$' -test.v -test.bench ScanVocab \
	-test.benchtime 1000x >/tmp/rec/scanvocab.txt 2>&1
gunzip -kf .devcarry-dn/cuda.test.gz
(cd cuda && QPACK_CUDA_REQUIRE=1 timeout 100 ../.devcarry-dn/cuda.test -test.v -test.count=1 \
	-test.run '^Test(DeltaNetColsGPU|LayerTinyModelsGPU|DeviceConformanceGPU)$' -test.timeout 95s >/tmp/rec/dn-precheck.log 2>&1)
rc=$?
DEVSH=testdata/cuda/device.sh
if [ $rc -eq 0 ]; then
	echo "TREE=dn" >/tmp/rec/tree.txt
	mv .devcarry-cuda .devcarry-cuda-main && mkdir .devcarry-cuda && cp .devcarry-dn/cuda.test.gz .devcarry-cuda/
	mv .devcarry-backendcli .devcarry-backendcli-main && mkdir .devcarry-backendcli &&
		cp .devcarry-dn/qpack.gz .devcarry-dn/cmd.test.gz .devcarry-backendcli-main/device.sh .devcarry-backendcli/
	DEVSH=.devcarry-dn/device-cuda.sh
else
	echo "TREE=main (dn precheck exit $rc)" >/tmp/rec/tree.txt
fi
echo "precheck done at $(($(date +%s) - T0)) s" >>/tmp/rec/times.txt
OUT=/tmp/rec PARTS="env conformance" timeout 480 bash $DEVSH >/tmp/rec/dev.txt 2>&1
echo "recording done at $(($(date +%s) - T0)) s" >>/tmp/rec/times.txt
OUT=/tmp/rec/cli timeout $((590 - ($(date +%s) - T0))) bash .devcarry-backendcli/device.sh >/tmp/rec/cli.txt 2>&1
echo "cli done at $(($(date +%s) - T0)) s" >>/tmp/rec/times.txt
tar -C /tmp -czf "$O/rec.tgz" rec
cat /tmp/rec/tree.txt /tmp/rec/times.txt
grep -h ScanVocab /tmp/rec/scanvocab.txt | sed 's/  */ /g' | cut -c1-230; nproc
grep -h 'bit-identical\|^--- \(PASS\|FAIL\)' /tmp/rec/dn-precheck.log | head
tail -n 2 /tmp/rec/*.log /tmp/rec/cli/*.log
grep -h -A5 '^--- FAIL' /tmp/rec/*.log /tmp/rec/cli/*.log | head -30
