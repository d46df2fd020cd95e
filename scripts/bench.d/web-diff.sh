#!/usr/bin/env bash
# The web page's diff of a run (GET /v1/runs/{id}/diff: one git process,
# read as a file list and a patch split into files) against a bare git
# diff of the same commits in the same run; 200 files of 200 lines, about
# 1 MiB of patch.
set -euo pipefail
cd "$(dirname "$0")/../.."
go test -run '^$' -bench 'DiffView' -benchtime 40x ./serve/ 2>&1 | grep -vE '^(goos|goarch|pkg|cpu|PASS|ok )'
