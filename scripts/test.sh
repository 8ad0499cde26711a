#!/usr/bin/env bash
# The project's test command (the README's second set-up command).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
go test -count=1 -timeout 20m ./...
