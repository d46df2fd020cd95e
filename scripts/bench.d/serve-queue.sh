#!/usr/bin/env bash
# kusaw serve with 50 queued no-op runs (DESIGN §12: RSS ≤ 150 MiB, no lost
# run): throughput in runs/s, the same as a multiple of one in-process
# kusaw run measured in the same run, serve's peak RSS and lost runs.
# serve.max_parallel is its default (the number of cores) unless
# KUSAW_BENCH_PARALLEL sets it.
set -euo pipefail
cd "$(dirname "$0")/../.."
go test -run '^$' -bench 'ServeQueue50' -benchtime 1x ./e2e/ 2>&1 | grep -vE '^(goos|goarch|pkg|cpu|PASS|ok )'
