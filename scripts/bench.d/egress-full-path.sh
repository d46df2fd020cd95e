#!/usr/bin/env bash
# CONNECT throughput and set-up latency through the full path (a client
# under kusaw sandbox exec → the bridge's listener → the proxy → a
# loopback upstream) against a direct loopback connection in the same run
# (DESIGN §12: throughput ≥ 50 % of direct, set-up p50 ≤ 0.3 ms over it).
set -euo pipefail
cd "$(dirname "$0")/../.."
go test -run '^$' -bench 'FullPathExec' -benchtime 1x ./e2e/ 2>&1 | grep -vE '^(goos|goarch|pkg|cpu|PASS|ok )'
