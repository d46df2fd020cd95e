#!/usr/bin/env bash
# Makes sure the system tools kusaw's build, demo and tests need are
# installed. As root it installs what is missing with apt-get; otherwise it
# stops with one line naming the exact command to run.
# Usage: scripts/ensure-deps.sh [command:package ...]
set -euo pipefail
want=("$@")
[ ${#want[@]} -gt 0 ] || want=(git:git bwrap:bubblewrap curl:curl)
missing=()
for pair in "${want[@]}"; do
  cmd=${pair%%:*} pkg=${pair#*:}
  # bwrap must be the system's, in /usr/bin (kusaw never takes it from PATH).
  if [ "$cmd" = bwrap ]; then
    [ -x /usr/bin/bwrap ] || missing+=("$pkg")
  elif [ "$cmd" = libc.a ]; then
    # the static C library kusaw-bridge's C stage links (make build)
    f=$(cc -print-file-name=libc.a 2>/dev/null || true)
    [ -f "$f" ] && [ "${f#/}" != "$f" ] || missing+=("$pkg")
  else
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi
echo "missing system packages: run 'sudo apt-get install -y ${missing[*]}' and try again" >&2
exit 1
