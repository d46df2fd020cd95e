#!/usr/bin/env bash
# Runs every fuzz target for a few seconds (make test). Longer runs:
# FUZZTIME=5m scripts/fuzz-brief.sh
#
# A failure always prints the fuzzer's own output and says what it was:
# - a finding: the fuzzer wrote a failing input and replaying it fails
#   again. The run fails with the file and the command that replays it;
#   commit the file as a regression seed once the bug is fixed.
# - the engine: a worker hung, was killed or timed out, and nothing it
#   wrote fails when replayed (a loaded machine does this). The target is
#   fuzzed once more; a second engine failure fails the run and says it was
#   the engine, not a finding.
set -uo pipefail
t=${FUZZTIME:-3s}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
targets=0
start=$(date +%s)

# fuzz_once PKG FN DIR: 0 passed; 1 finding (reported); 2 engine failure.
fuzz_once() {
  local pkg=$1 fn=$2 dir=$3 log=$out/log
  if go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "$pkg" >"$log" 2>&1; then
    return 0
  fi
  local written
  written=$(sed -n 's/.*Failing input written to \(testdata\/fuzz\/[^ ]*\).*/\1/p' "$log" | tail -n 1)
  if [ -n "$written" ] && [ -f "$dir/$written" ]; then
    local id=${written#testdata/fuzz/}
    if ! go test -count=1 -run "^${id%%/*}\$/^${id#*/}\$" "$pkg" >"$out/replay" 2>&1; then
      echo "--- fuzz $pkg $fn FOUND A FAILING INPUT; the fuzzer said:"
      cat "$log"
      echo "--- replaying it fails again:"
      cat "$out/replay"
      echo "fuzz: failing input: $dir/$written"
      echo "fuzz: replay with:   go test -run '${id%%/*}/${id#*/}' $pkg"
      echo "fuzz: fix the bug, then commit the file as a regression seed"
      return 1
    fi
    # Written, but passes on replay: what the worker was running when it
    # died, not a finding. Remove it so it is not committed by mistake.
    rm -f "$dir/$written"
  fi
  return 2
}

for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for fn in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //'); do
    targets=$((targets + 1))
    echo "fuzz $pkg $fn ($t)"
    fuzz_once "$pkg" "$fn" "$dir"
    rc=$?
    [ $rc = 1 ] && exit 1
    if [ $rc = 2 ]; then
      echo "--- fuzz $pkg $fn: the fuzzing engine failed (no reproducible input); its output:"
      cat "$out/log"
      echo "fuzz: trying $fn once more"
      fuzz_once "$pkg" "$fn" "$dir"
      rc=$?
      [ $rc = 1 ] && exit 1
      if [ $rc = 2 ]; then
        echo "--- fuzz $pkg $fn: the engine failed again; its output:"
        cat "$out/log"
        echo "fuzz: $fn failed twice in the fuzzing engine (a worker hung, was killed or timed out), not on an input of kusaw's: run 'go test -run ^\$ -fuzz ^$fn\$ -fuzztime $t $pkg' on a quieter machine"
        exit 1
      fi
    fi
  done
done
echo "fuzz: $targets targets passed in $(( $(date +%s) - start ))s"
