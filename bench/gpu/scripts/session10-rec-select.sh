#!/bin/bash
# Call 1: the recording. Precheck the selection build (B: the kernel patch +
# the select kernels) with the conformance tests; record with B if they pass,
# else with A (the kernel patch alone).
set -u
T0=$(date +%s)
mkdir -p .devcarry-cuda /tmp/rec /tmp/pre
gunzip -c .devcarry-dn/cuda-sel.test.gz > .devcarry-cuda/cuda.test && chmod +x .devcarry-cuda/cuda.test
OUT=/tmp/pre PARTS="env conformance" TOOLS="" timeout 200 bash .devcarry-dn/device-cuda.sh >/tmp/pre/dev.txt 2>&1
if grep -q '^exit status 0$' /tmp/pre/conformance.log; then
	echo "B (select) passed conformance at $(($(date +%s) - T0)) s" >/tmp/rec/times.txt
	cp /tmp/pre/conformance.log /tmp/pre/env.log /tmp/rec/
	OUT=/tmp/rec PARTS="" timeout $((575 - $(date +%s) + T0)) bash .devcarry-dn/device-cuda.sh >/tmp/rec/dev.txt 2>&1
else
	echo "B (select) FAILED conformance at $(($(date +%s) - T0)) s; recording A" >/tmp/rec/times.txt
	grep -B2 -A12 -- '--- FAIL' /tmp/pre/conformance.log | head -60 >/tmp/rec/B-fail.txt
	cp /tmp/pre/conformance.log /tmp/rec/B-conformance.log
	rm -f .devcarry-cuda/cuda.test; cp .devcarry-dn/cuda.test.gz .devcarry-cuda/
	OUT=/tmp/rec PARTS="env conformance" timeout $((575 - $(date +%s) + T0)) bash .devcarry-dn/device-cuda.sh >/tmp/rec/dev.txt 2>&1
fi
echo "recording done at $(($(date +%s) - T0)) s" >>/tmp/rec/times.txt
tar -C /tmp -czf "$OUT/rec.tgz" rec
cat /tmp/rec/times.txt
tail -n 2 /tmp/rec/*.log
cat /tmp/rec/B-fail.txt 2>/dev/null
grep -h -A5 '^--- FAIL' /tmp/rec/*.log | head -30
grep -h -E '^--- PASS' /tmp/rec/racecheck.log | tail -3
grep -h 'SelectTop' /tmp/rec/conformance.log | head -5
