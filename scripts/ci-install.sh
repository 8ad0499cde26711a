#!/usr/bin/env bash
# Installs the Debian packages .ci/run needs when their commands are missing:
# g++ (the Metal kernels are tested as C++ through metal/shim), clang (the
# CUDA kernels' source is checked by clang's CUDA front end and the gemm and
# routed-expert kernels run on its CPU emulator: cuda/*clang*_test.go,
# cuda/*emu*_test.go, which skip without clang++) and, off arm64,
# qemu-user-static (runtime/mlxq's NEON kernels run under emulation).
#
# As root it runs apt-get itself; otherwise through `sudo -n`, which fails at
# once instead of waiting for a password nobody will type. DEBIAN_FRONTEND
# goes through env(1) so that it reaches apt-get both ways (sudo resets the
# environment; a bare `$SUDO VAR=value cmd` with $SUDO empty would run the
# assignment as a command). The dpkg lock is waited for at most
# CI_APT_LOCK_TIMEOUT seconds (default 120). After apt-get, every command
# must exist or the script fails naming it.
#
# Exit status: 0 when every command is there (installed or already present),
# 1 otherwise, with a line on stderr saying what to do.
set -euo pipefail

need=()
missing_cmds=()
want() { # want COMMAND PACKAGE
  if ! command -v "$1" >/dev/null 2>&1; then
    need+=("$2")
    missing_cmds+=("$1")
  fi
}
want g++ g++
want clang++ clang
if [ "$(uname -m)" != "aarch64" ]; then
  want qemu-aarch64-static qemu-user-static
fi
if [ "${#need[@]}" -eq 0 ]; then
  exit 0
fi

echo "ci: installing ${need[*]}"
as_root=()
if [ "$(id -u)" != "0" ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "ci: ${missing_cmds[*]} missing, not running as root and no sudo: install ${need[*]} (apt-get install ${need[*]}) and rerun" >&2
    exit 1
  fi
  if ! sudo -n true; then
    echo "ci: sudo asks for a password here: run .ci/run as root, allow sudo without one, or install ${need[*]} first (apt-get install ${need[*]})" >&2
    exit 1
  fi
  as_root=(sudo -n)
fi
apt=(${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get
  -o "DPkg::Lock::Timeout=${CI_APT_LOCK_TIMEOUT:-120}")
if ! "${apt[@]}" update -qq; then
  echo "ci: apt-get update failed (see above); cannot install ${need[*]}" >&2
  exit 1
fi
if ! "${apt[@]}" install -y -qq "${need[@]}"; then
  echo "ci: apt-get install ${need[*]} failed (see above)" >&2
  exit 1
fi
hash -r
for c in "${missing_cmds[@]}"; do
  if ! command -v "$c" >/dev/null 2>&1; then
    echo "ci: apt-get installed ${need[*]} but $c is still not on PATH ($PATH)" >&2
    exit 1
  fi
done
