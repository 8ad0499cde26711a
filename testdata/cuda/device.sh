#!/bin/bash
# The recorded CUDA device run (cuda/README.md). Runs on the accelerator
# machine from the repository root with the test binary built on the
# development machine:
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go test -c -trimpath -ldflags='-s -w' -o .devcarry-cuda/cuda.test ./cuda/
#   gzip -9 .devcarry-cuda/cuda.test
# and writes its logs to $OUT (copied to testdata/cuda/ afterwards, where
# cuda/recording_test.go checks them). Every step has a time limit.
set -u
# TOOLS picks the sanitizers and PARTS the other steps (both default to
# all), so the run can be split across calls of at most 10 minutes.
T=$PWD/.devcarry-cuda/cuda.test
[ -f "$T" ] || gunzip -k "$T.gz" # the binary travels compressed
OUT=${OUT:-/tmp/cuda-out}
TOOLS=${TOOLS-memcheck racecheck synccheck initcheck} # TOOLS="" runs none
PARTS=${PARTS-env conformance bandwidth gemmrate}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }
mkdir -p "$OUT"
cd cuda || exit 1 # the layer tests read ../testdata/tiny
export QPACK_CUDA_REQUIRE=1
has env && {
	date -u
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
	nvcc --version 2>/dev/null | tail -2
	compute-sanitizer --version 2>/dev/null | head -2
	ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null
	file "$T" 2>/dev/null
} >"$OUT/env.log" 2>&1
GPU='^Test(MatMulConformance|RMSNormConformance|SwiGLUConformance|MatMulManyVectors|AllocFree|NoSuchDevice|ParamStructSizes|ParamsLayout|DeviceConformanceGPU|ModelsConformanceGPU|LayerTinyModelsGPU|GemmConformance|GemmEachKernel|GemmBaselineKernel|GraphsGPU|LayerGroupedExpertsGPU|AttentionTileGPU|DeltaNetColsGPU|NormFuseGPU|NormFuseModelsGPU|MappedUploadsGPU|SelectMappedGPU|PrefetchNextGPU|SelectOneGPU|GraphsAfterFreeGPU)$'
if has conformance; then
	timeout ${CONFLIM:-240} "$T" -test.v -test.count=1 -test.run "$GPU" -test.timeout $((${CONFLIM:-240} - 5))s >"$OUT/conformance.log" 2>&1
	echo "exit status $?" >>"$OUT/conformance.log"
fi
# The sanitizers over every kernel: the op tests, the layer conformance suite
# (every layer kernel), one tiny model per architecture through the layer
# device, and each gemm kernel once (the large conformance shapes would take
# minutes under the tools).
SAN='^Test(MatMulConformance|RMSNormConformance|SwiGLUConformance|MatMulManyVectors|AllocFree|NoSuchDevice|DeviceConformanceGPU|LayerTinyModelsGPU|GemmEachKernel|GemmBaselineKernel|LayerGroupedExpertsGPU|AttentionTileGPU|NormFuseGPU|MappedUploadsGPU|SelectMappedGPU|PrefetchNextGPU|SelectOneGPU)$'
# racecheck runs the tests about 4x slower than the others (it timed out at
# 145 s on 2026-12-05 in the last test, TestLayerTinyModelsGPU). SANRUN
# runs a part of SAN instead and SANTAG names its log ($tool$SANTAG.log):
# bench/gpu/scripts/session22-apart.sh's PART=prec runs racecheck as three
# such slices at once and joins their logs into racecheck.log (each a whole
# sanitizer run, so the join passes recording_test.go's checks only if each
# does). RACELIM is racecheck's time limit (300 s), SANLIM the others'
# (150 s; eight sanitizer runs at once on one machine took longer).
for tool in $TOOLS; do
	lim=${SANLIM:-150}
	[ "$tool" = racecheck ] && lim=${RACELIM:-300}
	QPACK_CUDA_TINY_ONE=1 timeout $lim compute-sanitizer --tool $tool --error-exitcode 3 "$T" -test.v -test.count=1 -test.run "${SANRUN:-$SAN}" -test.timeout $((lim - 5))s >"$OUT/$tool${SANTAG:-}.log" 2>&1
	echo "exit status $?" >>"$OUT/$tool${SANTAG:-}.log"
done
if has bandwidth; then
	timeout 60 "$T" -test.v -test.run '^$' -test.bench MatVecBandwidth -test.benchtime 1x >"$OUT/bandwidth.log" 2>&1
	echo "exit status $?" >>"$OUT/bandwidth.log"
fi
if has gemmrate; then
	timeout 120 "$T" -test.v -test.run '^$' -test.bench GemmRate -test.benchtime 1x -test.timeout 115s >"$OUT/gemmrate.log" 2>&1
	echo "exit status $?" >>"$OUT/gemmrate.log"
fi
tail -n 3 "$OUT"/*.log
