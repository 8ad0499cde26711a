#!/usr/bin/env bash
# ci-leftovers.sh DIR: fails when a process started from DIR (its executable
# or its command line lies under DIR) is still running, which is how .ci/run
# checks that no test left a process behind: every binary the run builds or
# starts (test binaries, the metal shim harness, CLI builds) lives in its
# per-run temp dir. Processes may take a moment to exit, so the check waits
# up to CI_LEFTOVER_WAIT seconds (default 5) for them to go; those still
# there are listed on stderr and then killed (they belong to this run).
set -euo pipefail
dir="${1:?usage: ci-leftovers.sh DIR}"
dir="$(cd "$dir" && pwd -P)"
[ -d /proc/self ] || { echo "ci: no /proc: the leftover process check is skipped"; exit 0; }

leftovers() {
  local p pid exe cmd
  for p in /proc/[0-9]*; do
    pid="${p#/proc/}"
    [ "$pid" = "$$" ] && continue
    exe="$(readlink "$p/exe" 2>/dev/null || true)"
    cmd="$( { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null || true)"
    case "$exe" in "$dir"/*) echo "$pid $cmd"; continue ;; esac
    case " $cmd" in *" $dir"/*) echo "$pid $cmd" ;; esac
  done
}

deadline=$((SECONDS + ${CI_LEFTOVER_WAIT:-5}))
while :; do
  found="$(leftovers)"
  [ -z "$found" ] && exit 0
  [ "$SECONDS" -ge "$deadline" ] && break
  sleep 0.5
done
echo "ci: processes left behind (started from $dir), killing them:" >&2
echo "$found" >&2
while read -r pid _; do kill -KILL "$pid" 2>/dev/null || true; done <<<"$found"
exit 1
