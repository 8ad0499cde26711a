#!/usr/bin/env bash
# Offline and partial-cache proof: qpack repack reads a cache that the
# official huggingface_hub client filled.
#
#   testdata/hubcheck/offline.sh QPACK_BINARY OUT_DIR
#
# Serves the bundled tiny checkpoint testdata/tiny/qwen3_5_moe-q4g32 as
# org/tiny-moe with `qpack hub-serve`; snapshot_download fills a cache; the
# Hub is stopped; with HF_HUB_OFFLINE=1 `qpack repack --from-hf` builds a
# container from that cache, which must be byte-identical (every file but
# manifest.json, whose provenance names the source, and the manifest's file
# list and digests) to `qpack repack --from-dir` of the snapshot, and
# `verify-install --deep --source REPO` passes offline. Then one shard and
# tokenizer.json are removed from a copy of the cache: offline, repack
# refuses (exit 2, naming the shard); online, against a restarted Hub, it
# fetches only those two files (counted in the fake Hub's request log) and
# makes the same container, and the cache is left as it was.
# Results: OUT_DIR/summary.txt (PASS/FAIL lines), details in OUT_DIR/details.log.
set -uo pipefail
QPACK=$(readlink -f "$1")
OUT=$(readlink -f "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
WORK=$(mktemp -d)
HUB_PID=
trap '[ -n "$HUB_PID" ] && kill "$HUB_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
exec 3>>"$OUT/details.log"
say() { echo "$@" >> "$SUMMARY"; echo "$@" >&2; }
FAIL=0
pass() { say "PASS $*"; }
fail() { say "FAIL $*"; FAIL=1; }

mkdir -p "$WORK/repos/org"
cp -r "$HERE/../tiny/qwen3_5_moe-q4g32" "$WORK/repos/org/tiny-moe"
SRC="$WORK/repos/org/tiny-moe"

start_hub() { # start_hub LOG
  "$QPACK" hub-serve "$WORK/repos" --addr 127.0.0.1:18331 --cdn-addr 127.0.0.1:18332 --cdn-host localhost \
    --lfs-threshold 65536 --log "$1" > "$WORK/hub.out" 2>> "$OUT/details.log" &
  HUB_PID=$!
  for _ in $(seq 50); do grep -q '^cdn ' "$WORK/hub.out" 2>/dev/null && break; sleep 0.1; done
  ENDPOINT=$(awk '/^hub /{print $2}' "$WORK/hub.out")
  [ -n "$ENDPOINT" ] || { fail "hub-serve did not start"; exit 1; }
}
stop_hub() { kill -TERM "$HUB_PID"; wait "$HUB_PID" 2>/dev/null; HUB_PID=; }

export HF_HUB_DISABLE_XET=1 HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1 HF_HUB_ENABLE_HF_TRANSFER=0
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost HF_HOME="$WORK/hfhome"
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_HUB_OFFLINE HF_HUB_CACHE HUGGINGFACE_HUB_CACHE
C1="$WORK/c1" C2="$WORK/c2"
py() { python3 "$HERE/offline.py" "$@" 2>&3; }

# 1. The official client fills a cache from the fake Hub.
start_hub "$OUT/hub-requests-fill.jsonl"
export HF_ENDPOINT="$ENDPOINT"
say "# offline check $(date -u +%Y-%m-%dT%H:%M:%SZ): qpack $("$QPACK" --version 2>&1 | awk '{print $NF}') vs huggingface_hub $(python3 -c 'import huggingface_hub as h; print(h.__version__)' 2>/dev/null) on python $(python3 -c 'import platform; print(platform.python_version())')"
if [ -n "${OFFLINE_CHECK_FILL_WITH_QPACK:-}" ]; then # a dry run of this script where huggingface_hub is absent
  "$QPACK" download org/tiny-moe --cache-dir "$C1" >&3 2>&3
  SNAP=$(echo "$C1"/models--org--tiny-moe/snapshots/*)
  say "# the cache was filled by qpack download (OFFLINE_CHECK_FILL_WITH_QPACK), not by huggingface_hub"
elif SNAP=$(py fill org/tiny-moe "$C1"); then pass "snapshot_download filled the cache ($SNAP)"; else fail "snapshot_download"; exit 1; fi
stop_hub

# 2. Hub stopped, offline: repack from that cache; compare with --from-dir of the snapshot.
export HF_ENDPOINT=http://127.0.0.1:1
echo '$ HF_HUB_OFFLINE=1 qpack repack --from-hf org/tiny-moe --cache-dir C1' >&3
if HF_HUB_OFFLINE=1 "$QPACK" repack --from-hf org/tiny-moe --cache-dir "$C1" --output "$WORK/offline.qpack" --reserve -1 --json > "$OUT/repack-offline.json" 2>&3; then
  pass "HF_HUB_OFFLINE=1 repack --from-hf from the official client's cache, the Hub stopped"
else fail "offline repack exited $?"; fi
"$QPACK" repack --from-dir "$SNAP" --output "$WORK/fromdir.qpack" --reserve -1 --json > "$WORK/fromdir.json" 2>&3 || fail "repack --from-dir of the snapshot"
if py same "$WORK/offline.qpack" "$WORK/fromdir.qpack"; then pass "offline --from-hf container is byte-identical to --from-dir of the snapshot"; else fail "containers differ"; fi
echo '$ HF_HUB_OFFLINE=1 qpack verify-install --deep --source org/tiny-moe' >&3
if HF_HUB_OFFLINE=1 "$QPACK" verify-install "$WORK/offline.qpack" --deep --source org/tiny-moe --cache-dir "$C1" --no-receipt >&3 2>&3; then
  pass "HF_HUB_OFFLINE=1 verify-install --deep --source REPO from the cache"
else fail "offline deep verify exited $?"; fi

# 3. A partial cache: one shard and tokenizer.json removed.
cp -a "$C1" "$C2"
py drop "$C2" org/tiny-moe model-00002-of-00003.safetensors tokenizer.json || fail "dropping files from the cache copy"
echo '$ HF_HUB_OFFLINE=1 qpack repack (partial cache)' >&3
HF_HUB_OFFLINE=1 "$QPACK" repack --from-hf org/tiny-moe --cache-dir "$C2" --output "$WORK/none.qpack" --reserve -1 2> "$WORK/err.txt"
rc=$?; cat "$WORK/err.txt" >&3
if [ "$rc" = 2 ] && grep -q 'model-00002-of-00003.safetensors' "$WORK/err.txt" && [ ! -e "$WORK/none.qpack" ]; then
  pass "offline with a shard missing from the cache: exit 2 naming it, nothing written"
else fail "offline partial: exit $rc"; fi
(cd "$C2" && find . | sort) > "$WORK/c2-before.txt"
start_hub "$OUT/hub-requests-partial.jsonl"
export HF_ENDPOINT="$ENDPOINT"
echo '$ qpack repack --from-hf org/tiny-moe --cache-dir C2 (partial cache, online)' >&3
if "$QPACK" repack --from-hf org/tiny-moe --cache-dir "$C2" --output "$WORK/partial.qpack" --reserve -1 --json > "$OUT/repack-partial.json" 2>&3; then
  pass "online repack with a partial cache"
else fail "partial repack exited $?"; fi
stop_hub
if py fetched "$OUT/hub-requests-partial.jsonl" "$SRC" model-00002-of-00003.safetensors tokenizer.json; then
  pass "only the files missing from the cache were fetched (request log)"
else fail "fetched more than the missing files"; fi
if py same "$WORK/partial.qpack" "$WORK/fromdir.qpack"; then pass "partial-cache container is byte-identical too"; else fail "partial container differs"; fi
(cd "$C2" && find . | sort) > "$WORK/c2-after.txt"
if cmp -s "$WORK/c2-before.txt" "$WORK/c2-after.txt"; then pass "the cache was not written (the raw checkpoint is not stored)"; else fail "the cache changed"; diff "$WORK/c2-before.txt" "$WORK/c2-after.txt" >&3; fi
(cd "$C1" && find . \( -type l -printf '%p -> %l\n' \) -o \( -type f -printf '%p %s\n' \) | sort) > "$OUT/layout-c1.txt"

P=$(grep -c '^PASS' "$SUMMARY"); F=$(grep -c '^FAIL' "$SUMMARY")
say "$P passed, $F failed"
exit $FAIL
