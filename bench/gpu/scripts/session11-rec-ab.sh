#!/bin/bash
# The recording of the select kernels (bitwise k-th search), the CLI, then a
# short A/B of the selection with what is left.
set -u
O=$OUT
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
mkdir -p .devcarry-cuda /tmp/rec/cli .devcarry-backendcli /tmp/ab
gunzip -c .devcarry-dn/cuda-sel.test.gz >.devcarry-cuda/cuda.test && chmod +x .devcarry-cuda/cuda.test
OUT=/tmp/rec PARTS="env conformance" timeout 320 bash .devcarry-dn/device-cuda.sh >/tmp/rec/dev.txt 2>&1
echo "recording done at $(el) s" >>/tmp/rec/times.txt
tar -C /tmp -czf "$O/rec.tgz" rec
cp .devcarry-dn/qpack.gz .devcarry-dn/cmd.test.gz testdata/cuda/cli/device.sh .devcarry-backendcli/
OUT=/tmp/rec/cli timeout 60 bash .devcarry-backendcli/device.sh >/tmp/rec/cli.txt 2>&1
echo "cli done at $(el) s" >>/tmp/rec/times.txt
tar -C /tmp -czf "$O/rec.tgz" rec
for v in 248320 32768; do
	OUT=/tmp/ab B=.devcarry-dngpu VARIANTS="bitwise:gpu-sel:QPACK_CUDA_SELECT_MIN=0 bitonic:gpu:QPACK_CUDA_SELECT_MIN=0 off:gpu:QPACK_CUDA_SELECT_MIN=1000000000" DIMS=35b VOCABS=$v ROUNDS=1 TOKENS=256 timeout 85 sh bench/gpu/ab.sh >>/tmp/ab/ab.txt 2>&1
	echo "ab $v done at $(el) s" >>/tmp/rec/times.txt
	cp /tmp/rec/times.txt /tmp/ab/
	tar -C /tmp -czf "$O/ab.tgz" ab
done
cat /tmp/rec/times.txt
tail -n 2 /tmp/rec/*.log /tmp/rec/cli/*.log
grep -h -A5 '^--- FAIL' /tmp/rec/*.log /tmp/rec/cli/*.log | head -30
sed 's/{.*"tok_per_sec":\([0-9.]*\).*"launches_per_token":\([0-9.]*\).*/ tps=\1 launches=\2/' /tmp/ab/ab/children.txt 2>/dev/null
# Prefill A/B: deltanet_rec_cols on prefill chunks (QPACK_CUDA_DN_COLS=all)
# against deltanet_rec_reg (default), one 4,096-token chunk and chunks of 1,024.
left=$((575 - $(el)))
if [ $left -gt 100 ]; then
	mkdir -p /tmp/ab/pf
	gunzip -kf .devcarry-dngpu/gpu-sel.gz .devcarry-dngpu/gpu.gz
	timeout 90 .devcarry-dngpu/gpu-sel -child write -model /tmp/pf -dims 35b -layers 8 -vocab 32768 >/tmp/ab/pf/write.txt 2>&1
	for r in 1 2; do
		for v in reg:gpu-sel:QPACK_CUDA_DN_COLS= cols:gpu-sel:QPACK_CUDA_DN_COLS=all old:gpu:QPACK_CUDA_DN_COLS=; do
			for ch in 4096 1024; do
				[ $((575 - $(el))) -gt 25 ] || break
				name=$(echo $v | cut -d: -f1); bin=$(echo $v | cut -d: -f2)
				env $(echo $v | cut -d: -f3) timeout 25 .devcarry-dngpu/$bin -child prefill -backend cuda -model /tmp/pf -dims 35b -prompt 4096 -chunk $ch >/tmp/ab/pf/$name-$ch-$r.json 2>/tmp/ab/pf/$name-$ch-$r.err
				echo "$name-$ch-$r $(sed 's/{.*"tok_per_sec":\([0-9.]*\).*/tps=\1/' /tmp/ab/pf/$name-$ch-$r.json)" >>/tmp/ab/pf/children.txt
			done
		done
	done
	echo "prefill ab done at $(el) s" >>/tmp/rec/times.txt
	# Streamed prefill (5% host, 5% device caches, cold): chunks of 1,024 against 4,096.
	for ch in 1024 4096; do
		[ $((575 - $(el))) -gt 40 ] || break
		timeout 40 .devcarry-dngpu/gpu-sel -child prefill-streamed -backend cuda -model /tmp/pf -dims 35b -prompt 4096 -chunk $ch >/tmp/ab/pf/streamed-$ch.json 2>/tmp/ab/pf/streamed-$ch.err
		echo "streamed-$ch $(sed 's/{.*"tok_per_sec":\([0-9.]*\).*"bytes_read_per_token":\([0-9.]*\).*/tps=\1 bytes_per_token=\2/' /tmp/ab/pf/streamed-$ch.json)" >>/tmp/ab/pf/children.txt
	done
	echo "streamed prefill done at $(el) s" >>/tmp/rec/times.txt
	cp /tmp/rec/times.txt /tmp/ab/
	tar -C /tmp -czf "$O/ab.tgz" ab
	cat /tmp/ab/pf/children.txt
fi
