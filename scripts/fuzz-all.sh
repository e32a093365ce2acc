#!/usr/bin/env bash
# Runs every `go test -fuzz` target of the module for the given time each (default 60s).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-60s}"
for dir in $(go list -f '{{.Dir}}' ./...); do
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    pkg=$(go list "$dir")
    echo "== $pkg $target ($fuzztime)"
    go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" "$pkg"
  done
done
