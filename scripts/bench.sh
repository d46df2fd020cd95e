#!/usr/bin/env bash
# make bench: every overhead kusaw adds, measured against its baseline in
# the same run (bare bwrap, a direct connection, plain git), as ratios.
# The figures and the machine they ran on go in docs/benchmarks.md.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-bench-results.txt}
: > "$out"
say() { printf '%s\n' "$*" | tee -a "$out"; }
bench() { # name, then the go test arguments
  local name=$1; shift
  say ""
  say "== $name"
  if ! go test -run '^$' "$@" 2>&1 | grep -vE '^(goos|goarch|pkg|cpu|PASS|ok )' | tee -a "$out"; then
    say "!! $name failed"
    failed=1
  fi
}
failed=0
say "kusaw benchmarks, $(date -u +%Y-%m-%dT%H:%MZ)"
say "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -sr)"
say "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
say "go: $(go version | cut -d' ' -f3), bwrap: $(/usr/bin/bwrap --version 2>/dev/null | cut -d' ' -f2), git: $(git --version | cut -d' ' -f3)"

bench "sandbox: true under the plan vs the same bwrap argv vs bare true" -bench SandboxTrue -benchtime 100x ./sandbox/
bench "sandbox: the allowlist view vs the host's / read-only (bwrap start)" -bench ViewVsHostRoot -benchtime 100x ./sandbox/
bench "write layer: a sandboxed true with the worktree under an overlay (kusaw-bridge __layer before bwrap) vs without" -bench WriteLayerStart -benchtime 100x ./sandbox/
bench "kernel filters: what seccomp and the confinement stage (session keyring, Landlock; in C and in Go) add to a sandboxed true, vs the same bwrap argv without them" -bench KernelFilters -benchtime 100x ./sandbox/
bench "stage start: kusaw-bridge __confine -- /bin/true with the stage in C (cgo) and in Go (CGO_ENABLED=0) vs /bin/true, outside bwrap" -bench StageStart -benchtime 300x ./cmd/kusaw-bridge/
bench "allowlist start: the confinement stage and the egress bridge in one start of kusaw-bridge vs two (as before), outside bwrap" -bench AllowlistStart -benchtime 300x ./cmd/kusaw-bridge/
bench "worktree: AddAttempt vs plain git worktree add; whole attempt cycle" -bench 'AddAttempt|AttemptCycle' -benchtime 10x ./worktree/
bench "worktree reuse: a no-op attempt's start, commit and release on 1k, 20k and 100k files vs git worktree add of the same repository (repositories cached under ~/.cache/kusaw-bench)" -bench WorktreeReuse -benchtime 3x -timeout 60m ./worktree/
bench "worktree reuse, whole run: kusaw run of a no-op step on 20k files after the first run (its tree from the pool) vs git worktree add + remove of the same repository, alternated" -bench KusawRunReuse20k -benchtime 3x -timeout 30m ./e2e/
bench "seam: the private ref store and the checks after each attempt, vs creating its worktree" -bench SeamChecks -benchtime 10x ./worktree/
bench "limits: starting a process under sandbox.resources (cgroup, rlimits, the holding sh) vs without" -bench RunLimits -benchtime 50x ./internal/proc/
bench "pipeline: kusaw run of a no-op 3-step pipeline (binary, end to end) vs the git worktree floor" -bench 'KusawRunNoop3Steps|GitFloorNoop3Steps' -benchtime 10x ./e2e/
bench "pipeline: the engine alone (in-process) vs the git baseline" -bench 'PipelineNoop3Steps|PipelineGitBaseline' -benchtime 10x ./factory/
bench "retention: kusaw gc removing 500 runs and their 1,000 branches vs the runs folder and the branches removed at once" -bench 'GC.*500' -benchtime 3x ./factory/
bench "chainlog: Append vs a plain JSON line" -bench Append ./chainlog/
bench "providers: stream parsing" -bench ParseStream ./providers/
bench "egress: CONNECT throughput and set-up, proxy alone and full path (bwrap + bridge), vs direct" -bench 'ConnectThroughput|ConnectSetup|FullPath' -benchtime 1x ./egress/
bench "sandbox exec CLI: kusaw sandbox exec -- true vs the same bwrap argv vs true" -bench SandboxExecCLI -benchtime 200x ./e2e/
bench "allowlist start: sandbox exec --step with network allowlist vs the same step with network open, against one bare bwrap" -bench SandboxExecAllowlist -benchtime 30x ./e2e/
bench "first run: kusaw run checks on a fresh Go module with a dependency, the first run (empty caches) vs the second (the go preset's caches kept)" -bench NewcomerGoChecks -benchtime 1x ./e2e/
bench "cluster: 12 runs of a sleeping step on 3 workers vs 1 worker; dispatch latency to an idle worker" -bench ClusterScale -benchtime 1x ./e2e/
bench "cluster: an object stored and read back through kusaw's per-pool store vs nats.go's object store" -bench ObjectStore -benchtime 20x ./cluster/
for extra in scripts/bench.d/*.sh; do
  [ -x "$extra" ] || continue
  say ""
  say "== $(basename "$extra" .sh)"
  "$extra" 2>&1 | tee -a "$out" || { say "!! $extra failed"; failed=1; }
done
say ""
say "== the two start-up ratios (issue 16)"
for what in 'sandbox exec -- true' 'allowlist start'; do
  say "$(grep -o -E "$what: .*" "$out" | tail -1)"
done
say ""
say "results in $out"
exit $failed
