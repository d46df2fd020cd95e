#!/usr/bin/env bash
# Fails when go mod tidy would change go.mod or go.sum (a requirement
# nothing imports, a direct one marked indirect, a missing sum), printing
# the change. Run in the module's folder (make lint runs it at the root).
set -uo pipefail
go=${GO:-go}
if ! diff=$("$go" mod tidy -diff 2>&1); then
  echo "go.mod or go.sum is not tidy; run go mod tidy. What it would change:"
  printf '%s\n' "$diff"
  exit 1
fi
