#!/usr/bin/env bash
# make demo: kusaw's main job on a small generated git repository. A
# three-step pipeline of command and built-in steps runs in fresh worktrees,
# sandboxed with bubblewrap, and leaves its record under demo/.work/.kusaw.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kusaw="$root/bin/kusaw"
work="$root/demo/.work"
rm -rf "$work"
mkdir -p "$work/greeter"
cd "$work/greeter"
git init -q -b main
git config user.name "demo" && git config user.email "demo@localhost"
cat > greet.sh <<'SH'
#!/bin/sh
echo "hello, ${1:-world}"
SH
cat > Makefile <<'MK'
test:
	@sh test.sh
MK
cat > test.sh <<'SH'
#!/bin/sh
set -e
out=$(sh greet.sh kusaw)
[ "$out" = "hello, kusaw" ] || { echo "greet.sh printed: $out"; exit 1; }
[ -f NOTES.md ] || { echo "NOTES.md is missing"; exit 1; }
echo "ok: greet.sh and NOTES.md"
SH
git add -A && git commit -qm "greeter: first version"

cd "$work"
cat > factory.yaml <<'YAML'
# The demo factory: one repo, three steps, every step sandboxed.
version: 1
repos:
  greeter:
    path: greeter
    base: main
sandbox:
  mode: required        # every attempt runs inside bubblewrap
pipelines:
  default: [notes, checks, diff]
steps:
  notes:                # a command step: writes a file in its worktree
    run: [sh, -c, 'printf "# Notes\n\nWritten by step %s, attempt %s.\n" "$KUSAW_STEP" "$KUSAW_ATTEMPT" > NOTES.md']
  checks:               # built-in: runs the repo's own tests (make test)
    builtin: checks
    attempts: 2
    timeout: 2m
  diff:                 # built-in: the run's patch and diffstat into artifacts/
    builtin: diff
YAML

echo "== kusaw validate"
"$kusaw" validate
echo
echo "== kusaw run"
"$kusaw" run
echo
echo "== kusaw runs"
"$kusaw" runs
run=$("$kusaw" runs --json 2>/dev/null | sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -n 1)
if [ -n "$run" ]; then
  echo
  echo "== kusaw show $run"
  "$kusaw" show "$run"
fi
if [ -n "$run" ]; then
  rd="$work/.kusaw/runs/$run"
  echo
  echo "== the diff step's artifacts (the run's patch against main)"
  for f in "$rd"/steps/diff/1/artifacts/*; do
    [ -f "$f" ] || continue
    echo "-- $(basename "$f")"
    head -n 20 "$f"
  done
  echo
  echo "== kusaw log verify (hash chain and signed seals of every events file)"
  "$kusaw" log verify "$rd/events.jsonl" "$rd"/steps/*/*/events.jsonl
fi
echo
echo "The record is under $work/.kusaw/runs/; the repo's run branch is kusaw/<run-id>:"
git -C "$work/greeter" branch --list 'kusaw/*' | head -n 5
