#!/usr/bin/env bash
# Soak of the repack and deep-verify property tests: each seed corrupts one
# response of the fake Hub (a header range, a data range, API JSON, a small
# file; a flipped bit, two equal-length strings swapped, a truncation) and
# checks that the outcome is the byte-identical container (repack), an ok
# report with every shard hash checked (verify), or a clear error that
# placed nothing and blamed nothing good. CI runs a few dozen seeds per
# test; this runs thousands.
#
#   bench/soak/sources.sh [SEEDS]     (default 2000 per test)
set -euo pipefail
N=${1:-2000}
cd "$(dirname "$0")/../.."
QPACK_PROPERTY_SEEDS=$N exec go test -count=1 -timeout 0 -v \
  -run '^(TestPropertySingleCorruption|TestPropertyDeepSingleCorruption)$' ./repack/ ./verify/ 2>&1 |
  grep -E '^(--- |ok|FAIL|PASS|\s+property_test)'
