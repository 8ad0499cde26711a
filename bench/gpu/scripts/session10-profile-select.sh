#!/bin/bash
# Profile the selection: per-kernel GPU time and the step timeline, at two vocabularies.
set -u
B=.devcarry-benchgpu
cp .devcarry-dngpu/gpu-sel.gz $B/
cp .devcarry-dngpu/gpu.gz $B/gpu-dn.gz
for g in gpu-sel gpu-dn; do gunzip -kf $B/$g.gz; done
for v in 32768 248320; do
	timeout 120 $B/gpu-sel -child write -model /tmp/m$v -dims 35b -layers 8 -vocab $v >/dev/null 2>&1
	for g in gpu-sel gpu-dn; do
		QPACK_CUDA_PROFILE=1 timeout 60 $B/$g -child resident -backend cuda -model /tmp/m$v -dims 35b -tokens 256 -resident-context 16 >$OUT/prof-$g-$v.json 2>$OUT/prof-$g-$v.txt
		QPACK_CUDA_PROFILE=graphs timeout 60 $B/$g -child resident -backend cuda -model /tmp/m$v -dims 35b -tokens 256 -resident-context 16 >$OUT/tl-$g-$v.json 2>$OUT/tl-$g-$v.txt
	done
	rm -rf /tmp/m$v
done
grep -h -E "select_|lm|gemv|launches " $OUT/prof-gpu-sel-*.txt | head -30
grep -h "the host after a wait" $OUT/tl-*.txt
