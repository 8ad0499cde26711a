#!/bin/sh
# Issue 15's benchmarks on the accelerator machine (no Go there).
#
# Build on the development machine, from the repository root:
#   CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -o .devcarry-benchgpu/gpu ./bench/gpu
# then, with the run tool (carry [".devcarry-benchgpu"]), from the repository
# root there:
#   sh bench/gpu/device.sh
# It runs bench/gpu at Qwen3.6-35B-A3B dims (8 layers; the CPU prefill on 4,
# scaled per layer) and at Qwen3-Next-80B-A3B dims (8 layers, no CPU
# prefill), each under `timeout`, and writes to $OUT/bench-gpu/: <name>.txt
# (the command, date and uptime before and after, the text report),
# <name>.json (the same as JSON), <name>.stderr.txt, and machine.txt
# (nvidia-smi, nproc, free, df). About 4 minutes in all, at most 5.5 (the
# two timeouts); progress lines in the stderr files survive a kill. DIMS="35b" runs
# one, EXTRA="-layers 16" adds flags to both.
set -u
BIN=${BIN:-.devcarry-benchgpu/gpu}
OUT=${OUT:-/tmp/bench-gpu-out}
DIR=${DIR:-${TMPDIR:-/tmp}}
DIMS=${DIMS:-35b 80b}
EXTRA=${EXTRA:-}
log=$OUT/bench-gpu
mkdir -p "$log"
{
	date -u
	timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.mem --format=csv || echo "nvidia-smi: exit $?"
	echo "nproc: $(nproc)"
	free -g
	df -h "$DIR"
	uptime
} >"$log/machine.txt" 2>&1

status=0
run() {
	name=$1
	limit=$2
	shift 2
	{
		echo "\$ $BIN $*"
		date -u
		uptime
	} >"$log/$name.txt"
	# The steps have their own -timeout; this bounds the whole run.
	timeout -k 15 "$limit" "$BIN" "$@" -dir "$DIR" -json-out "$log/$name.json" >>"$log/$name.txt" 2>"$log/$name.stderr.txt"
	rc=$?
	{
		echo "exit $rc"
		date -u
		uptime
	} >>"$log/$name.txt"
	[ $rc -eq 0 ] || status=1
}
for d in $DIMS; do
	case $d in
	35b) run 35b-8l 180 -dims 35b -layers 8 -cpu-layers 4 -tokens 32 -prompt 4096 -timeout 100s $EXTRA ;;
	80b) run 80b-8l 150 -dims 80b -layers 8 -cpu-layers 0 -tokens 32 -prompt 4096 -timeout 90s $EXTRA ;;
	*) echo "device.sh: unknown dims $d" >&2; status=2 ;;
	esac
done
# The files as one archive too: the device tool brings back a few files of
# $OUT only (the eleventh session lost the per-step JSON to that).
tar -C "$OUT" -czf "$OUT/bench-gpu.tgz" bench-gpu
cat "$log"/*.txt
exit $status
