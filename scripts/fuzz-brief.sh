#!/usr/bin/env bash
# Runs every fuzz target for a few seconds (make test). Longer runs:
# FUZZTIME=5m scripts/fuzz-brief.sh
set -euo pipefail
t=${FUZZTIME:-3s}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for fn in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    echo "fuzz $pkg $fn ($t)"
    go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "$pkg" >/dev/null
  done
done
