#!/usr/bin/env bash
# make test's body: the unit and e2e tests, the darwin build, brief fuzzing;
# each part timed, and one line at the end that says what ran. A failing
# part prints its own output (internal/testreport shows a failed test's
# whole output and every skip with its reason) and the run stops there.
set -uo pipefail
GO=${GO:-go}
PKGS=${PKGS:-./...}
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
parts=()
t_all=$(date +%s)

part() { # part NAME SECONDS
  parts+=("$1 $2s")
}
finish() { # finish STATUS
  local total=$(( $(date +%s) - t_all )) line="" p
  for p in "${parts[@]}"; do line="${line:+$line; }$p"; done
  echo "make test: $1 in ${total}s: $line"
}

t=$(date +%s)
# The e2e package alone runs close to go test's default 10 minutes per
# package on 2 busy cores; past it go test kills the package with no test
# named. make test as a whole is meant to stay under 15 minutes.
$GO test -count=1 -timeout 25m -json $PKGS 2>&1 | $GO run ./internal/testreport -summary "$log/sum"
rc=$?
read -r npkg npass nfail nskip <"$log/sum" 2>/dev/null || { npkg=0 npass=0 nfail=0 nskip=0; }
part "go test ($npkg packages, $npass passed, $nfail failed, $nskip skipped)" $(( $(date +%s) - t ))
if [ $rc != 0 ]; then finish FAILED; exit 1; fi

# worktree as the kusaw CLI links it (make build's KUSAW_TAGS): without
# go-git, reads go to git's files and the git binary.
t=$(date +%s)
if ! $GO test -count=1 -tags kusaw_nogogit ./worktree/ >"$log/nogogit" 2>&1; then
  cat "$log/nogogit"; part "worktree -tags kusaw_nogogit (failed)" $(( $(date +%s) - t )); finish FAILED; exit 1
fi
part "worktree -tags kusaw_nogogit" $(( $(date +%s) - t ))

t=$(date +%s)
if ! { GOOS=darwin $GO build ./... && GOOS=darwin $GO vet ./...; }; then
  part "darwin build+vet (failed)" $(( $(date +%s) - t )); finish FAILED; exit 1
fi
part "darwin build+vet" $(( $(date +%s) - t ))

t=$(date +%s)
if ! scripts/fuzz-brief.sh | tee "$log/fuzz"; then
  part "fuzz (failed)" $(( $(date +%s) - t )); finish FAILED; exit 1
fi
nfuzz=$(grep -c '^fuzz github' "$log/fuzz")
part "fuzz ($nfuzz targets)" $(( $(date +%s) - t ))
finish passed
