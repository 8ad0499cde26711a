#!/usr/bin/env bash
# Fidelity proof: qpack against the official huggingface_hub client.
#
#   testdata/hubcheck/run.sh QPACK_BINARY OUT_DIR
#
# Serves testdata/hubcheck/repo (plus generated LFS files) with
# `qpack hub-serve`, then: the official client downloads from it and checks
# what it got; qpack downloads into a cache the official tools then scan,
# verify and read offline; qpack reads the official client's cache offline.
# Needs python3 with huggingface_hub, and no network beyond loopback.
# Results: OUT_DIR/summary.txt (PASS/FAIL lines), details in OUT_DIR/*.log.
set -uo pipefail
QPACK=$(readlink -f "$1")
OUT=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'kill "$HUB_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
exec 3>>"$OUT/details.log"

say() { echo "$@" >> "$SUMMARY"; echo "$@" >&2; }

# The served directory: the committed small files plus generated LFS files
# (deterministic pseudo-random bytes; nothing large is committed).
mkdir -p "$WORK/repos"
cp -r "$HERE/repo/org" "$WORK/repos/"
python3 - "$WORK/repos/org/tiny-moe" <<'PY'
import os, random, sys
root = sys.argv[1]
def gen(path, n, seed):
    r = random.Random(seed)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(r.randbytes(n))
gen(os.path.join(root, "model-00001-of-00002.safetensors"), 3_000_000, 1)      # LFS by .gitattributes
gen(os.path.join(root, "sub/dir/model-00002-of-00002.safetensors"), 1_500_001, 2)
gen(os.path.join(root, "big.bin"), 1_200_000, 3)                                # LFS by size threshold
PY
cp -r "$WORK/repos/org/tiny-moe" "$WORK/repos/org/private-moe"

TOKEN="hf_hubcheck_$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
"$QPACK" hub-serve "$WORK/repos" --addr 127.0.0.1:18321 --cdn-addr 127.0.0.1:18322 --cdn-host localhost \
  --lfs-threshold 1048576 --tree-page-size 3 --private org/private-moe --token "$TOKEN" \
  --log "$OUT/hub-requests.jsonl" > "$WORK/hub.out" 2> "$OUT/hub-serve.log" &
HUB_PID=$!
for _ in $(seq 50); do grep -q '^cdn ' "$WORK/hub.out" 2>/dev/null && break; sleep 0.1; done
cat "$WORK/hub.out" >> "$OUT/hub-serve.log"
ENDPOINT=$(awk '/^hub /{print $2}' "$WORK/hub.out")
if [ -z "$ENDPOINT" ]; then say "FAIL hub-serve did not start"; cat "$OUT/hub-serve.log"; exit 1; fi
COMMIT=$(awk '/^repo org\/tiny-moe /{sub("main=","",$3); print $3}' "$OUT/hub-serve.log")

export HF_ENDPOINT="$ENDPOINT" HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost HF_HOME="$WORK/hfhome" HF_HUB_ENABLE_HF_TRANSFER=0
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_HUB_OFFLINE HF_HUB_CACHE HUGGINGFACE_HUB_CACHE
if ! command -v hf >/dev/null; then export HF_CLI="$WORK/hf"; printf '#!/bin/sh\nexec python3 -c "from huggingface_hub.cli.hf import main; main()" "$@"\n' > "$HF_CLI"; chmod +x "$HF_CLI"; fi

say "# hubcheck $(date -u +%Y-%m-%dT%H:%M:%SZ): qpack $("$QPACK" --version 2>&1 | awk '{print $NF}') vs huggingface_hub $(python3 -c 'import huggingface_hub as h; print(h.__version__)') on python $(python3 -c 'import platform; print(platform.python_version())')"
say "# fake Hub $ENDPOINT, CDN http://localhost:18322, main of org/tiny-moe = $COMMIT"

ARGS=$(python3 - <<PY
import json
w = "$WORK"
print(json.dumps({
  "repo": "org/tiny-moe", "private": "org/private-moe", "token": "$TOKEN", "commit": "$COMMIT",
  "src": w + "/repos/org/tiny-moe", "privsrc": w + "/repos/org/private-moe", "out": "$OUT",
  "c1": w + "/c1", "c1b": w + "/c1b", "c2": w + "/c2", "c3": w + "/c3", "c4": w + "/c4", "c5": w + "/c5",
  "l1": w + "/l1", "l2": w + "/l2",
  "qjson": "$OUT/qpack-download.json", "qoffjson": "$OUT/qpack-offline.json", "qdry": "$OUT/qpack-dryrun.json",
  "log": "$OUT/hub-requests.jsonl",
}))
PY
)
export HUBCHECK_ARGS="$ARGS"
FAIL=0
py() { python3 "$HERE/check.py" "$@" 2>&3 | tee -a "$SUMMARY" >&2; [ "${PIPESTATUS[0]}" = 0 ] || FAIL=1; }
q() { # q NAME ARGS... : a qpack run that must succeed
  local name=$1; shift
  echo "\$ qpack $*" >&3
  if "$QPACK" "$@" 2>&3; then say "PASS $name"; else say "FAIL $name: qpack exited $?"; FAIL=1; fi
}

# 1. The official client against the fake Hub.
py py-download
# 2. qpack writes a cache and a local dir; the official tools read them.
q "qpack download into a fresh cache" download org/tiny-moe --cache-dir "$WORK/c3" --json > "$OUT/qpack-download.json"
q "qpack download --local-dir" download org/tiny-moe --local-dir "$WORK/l2" > /dev/null
q "qpack download --dry-run --include (same patterns as Python)" download org/tiny-moe --dry-run --json \
  --cache-dir "$WORK/c6" --include '*.json' --include 'sub/' > "$OUT/qpack-dryrun.json"
py qpack-cache
HF_HUB_OFFLINE=1 py py-offline
py py-localdir-reuse
# 3. qpack reads the cache the official client wrote, with no network.
HF_HUB_OFFLINE=1 HF_ENDPOINT=http://127.0.0.1:1 q "qpack download --offline on the Python-written cache" \
  download org/tiny-moe --offline --cache-dir "$WORK/c2" --json > "$OUT/qpack-offline.json"
py qpack-json
# 4. The request log: stop the server so it writes it.
kill -TERM "$HUB_PID"; wait "$HUB_PID" 2>/dev/null
py log
for d in c2 c3; do (cd "$WORK/$d" && find . \( -type l -printf '%p -> %l\n' \) -o \( -type f -printf '%p %s\n' \) | sort) > "$OUT/layout-$d.txt"; done

P=$(grep -c '^PASS' "$SUMMARY"); F=$(grep -c '^FAIL' "$SUMMARY")
say "$P passed, $F failed"
exit $FAIL
