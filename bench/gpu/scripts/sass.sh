#!/bin/bash
# The SASS of the CUDA kernels for sm_90 on the development machine, without
# a GPU or a device call: NVRTC, ptxas and cuobjdump of CUDA 11.8 from
# Debian bookworm's non-free packages (nvidia-cuda-toolkit, libnvrtc11.2,
# libnvrtc-builtins11.8), fetched once into $DIR with an apt configuration
# of the script's own (the machine's sources and lists stay as they are).
# NVRTC compiles the backend's source (cuda.Source()) to PTX as the backend
# does (--std=c++17 -lineinfo --fmad=true, for compute_90), ptxas makes
# each named kernel's SASS alone (-e: ptxas 11.8 crashes on some of the
# others, the gemv and route kernels among them, thirtieth session), and
# the script prints each kernel's registers, spills and an opcode count.
# The device compiles with NVRTC 13, so its SASS differs in detail; the MoE
# kernels' registers agree (128 and 127, thirtieth session).
#   bash bench/gpu/scripts/sass.sh moe_gateup_q4 moe_down_q4
#   DEFINES="QP_MOE_MIN_GROUPS=3" bash bench/gpu/scripts/sass.sh moe_gateup_q4
# writes $DIR/<kernel>.sass (DIR: /tmp/qpack-sass).
set -eu
cd "$(git rev-parse --show-toplevel)"
DIR=${DIR:-/tmp/qpack-sass}
ROOT=$DIR/root
mkdir -p "$DIR"
if [ ! -x "$ROOT/usr/bin/ptxas" ]; then
	A=$DIR/apt
	mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$DIR/debs"
	cat >"$A/sources.list" <<'SRC'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main contrib non-free
SRC
	opts="-o Dir::Etc::SourceList=$A/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$A/lists -o Dir::Cache=$A/cache -o APT::Sandbox::User=root"
	# shellcheck disable=SC2086 # opts is a list of options
	timeout 300 apt-get $opts update >"$DIR/apt.log" 2>&1
	# shellcheck disable=SC2086
	(cd "$DIR/debs" && timeout 600 apt-get $opts download nvidia-cuda-toolkit libnvrtc11.2 libnvrtc-builtins11.8 >>"$DIR/apt.log" 2>&1)
	for f in "$DIR"/debs/*.deb; do dpkg -x "$f" "$ROOT"; done
fi
LIB=$ROOT/usr/lib/x86_64-linux-gnu
# The backend's source, as the device compiles it.
mkdir -p "$DIR/src"
T=$(mktemp -d ./.sass-src.XXXXXX)
trap 'rm -rf "$T"' EXIT
cat >"$T/main.go" <<'GO'
package main

import (
	"fmt"

	"github.com/qpack-go/qpack/cuda"
)

func main() { fmt.Print(cuda.Source()) }
GO
go run "./$T" >"$DIR/src/kernels.cu"
for d in ${DEFINES:-}; do
	sed -i "1i #define ${d%%=*} ${d#*=}" "$DIR/src/kernels.cu"
done
LD_LIBRARY_PATH=$LIB python3 - "$LIB/libnvrtc.so.11.2" "$DIR/src/kernels.cu" "$DIR/src/kernels.ptx" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
V, S = ctypes.c_void_p, ctypes.c_size_t
lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(V), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, V, V]
lib.nvrtcCompileProgram.argtypes = [V, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
for f in ("nvrtcGetProgramLogSize", "nvrtcGetPTXSize"):
    getattr(lib, f).argtypes = [V, ctypes.POINTER(S)]
for f in ("nvrtcGetProgramLog", "nvrtcGetPTX"):
    getattr(lib, f).argtypes = [V, ctypes.c_char_p]
prog = V()
if lib.nvrtcCreateProgram(ctypes.byref(prog), open(sys.argv[2], "rb").read(), b"kernels.cu", 0, None, None):
    sys.exit("nvrtcCreateProgram failed")
opts = [b"--gpu-architecture=compute_90", b"--std=c++17", b"-lineinfo", b"--fmad=true"]
rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
n = S()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(prog, log)
if rc:
    sys.exit("NVRTC: " + log.value.decode(errors="replace")[:4000])
lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
ptx = ctypes.create_string_buffer(n.value)
lib.nvrtcGetPTX(prog, ptx)
open(sys.argv[3], "wb").write(ptx.value)
PY
status=0
for k in "$@"; do
	if ! "$ROOT/usr/bin/ptxas" -arch=sm_90 -O3 -v -e "$k" "$DIR/src/kernels.ptx" -o "$DIR/$k.cubin" >"$DIR/$k.ptxas" 2>&1; then
		echo "$k: ptxas failed (ptxas 11.8 crashes on some kernels; see $DIR/$k.ptxas)"
		status=1
		continue
	fi
	"$ROOT/usr/bin/cuobjdump" -sass "$DIR/$k.cubin" | grep -E '^ +/\*[0-9a-f]{4}\*/' | sed 's/ ;.*//; s/^ *//' >"$DIR/$k.sass"
	echo "$k: $(grep -h 'registers' "$DIR/$k.ptxas" | sed 's/ptxas info *: //'); $(grep -h 'spill' "$DIR/$k.ptxas" | sed 's/^ *//'); $(wc -l <"$DIR/$k.sass") instructions"
	awk '{op = $2; if (op ~ /^@/) op = $3; sub(/\..*/, "", op); c[op]++} END {for (o in c) printf "%s %d\n", o, c[o]}' "$DIR/$k.sass" |
		sort -k2 -nr | head -16 | tr '\n' ' '
	echo
done
exit $status
