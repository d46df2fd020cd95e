#!/usr/bin/env bash
# make demo: kusaw's main job on a small generated git repository. A
# four-step pipeline of command and built-in steps runs in fresh worktrees,
# sandboxed with bubblewrap, and leaves its record under demo/.work/.kusaw.
# One step runs with network: allowlist: it reaches a local server the demo
# starts, through kusaw's proxy, and is refused a host not on its list.
# KUSAW and DEMO_WORK override the binary and the folder (the e2e test).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kusaw="${KUSAW:-$root/bin/kusaw}"
work="${DEMO_WORK:-$root/demo/.work}"
rm -rf "$work"

# The allowed local server: it answers every request with a version line.
mkdir -p "$work"
node -e 'require("http").createServer((q, s) => s.end("greeter-data 1.0\n")).listen(0, "127.0.0.1", function () { console.log(this.address().port) })' > "$work/server.port" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$work/server.port" ] && break; sleep 0.1; done
port=$(cat "$work/server.port")
[ -n "$port" ] || { echo "demo: the local server did not start (is node installed? make deps)"; exit 1; }

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
[ "$(cat DATA.txt)" = "greeter-data 1.0" ] || { echo "DATA.txt is not what the server gave"; exit 1; }
echo "ok: greet.sh, NOTES.md and DATA.txt"
SH
git add -A && git commit -qm "greeter: first version"

cd "$work"
cat > factory.yaml <<YAML
# The demo factory: one repo, four steps, every step sandboxed.
version: 1
repos:
  greeter:
    path: greeter
    base: main
sandbox:
  mode: required        # every attempt runs inside bubblewrap
pipelines:
  default: [notes, fetch, checks, diff]
steps:
  notes:                # a command step: writes a file in its worktree
    run: [sh, -c, 'printf "# Notes\n\nWritten by step %s, attempt %s.\n" "\$KUSAW_STEP" "\$KUSAW_ATTEMPT" > NOTES.md']
  fetch:                # no network but kusaw's proxy, which admits only the demo's server
    sandbox:
      network: allowlist
      egress:
        allow: ["localhost:$port"]
    run:
      - sh
      - -c
      - |
        curl -sf --noproxy '' -x "\$HTTP_PROXY" http://localhost:$port/data > DATA.txt || exit 1
        echo "fetched from the allowed local server: \$(cat DATA.txt)"
        code=\$(curl -s --noproxy '' -x "\$HTTP_PROXY" -o /dev/null -w '%{http_code}' http://example.com/)
        echo "example.com (not on the list): HTTP \$code"
        [ "\$code" = 403 ]
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
"$kusaw" run 2> "$work/run.err" || { cat "$work/run.err"; exit 1; }
cat "$work/run.err"
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
  echo "== the allowlist at work (step fetch)"
  echo "-- the step's own output"
  cat "$rd"/steps/fetch/1/stdout.log
  echo "-- the refusal, as kusaw run reported it"
  grep -i 'refused' "$work/run.err" || { echo "demo: kusaw run reported no refusal"; exit 1; }
  echo "-- egress.log: every decision of the proxy for this attempt"
  field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^\",]*\).*/\1/p"; }
  grep '"decision"' "$rd"/steps/fetch/1/egress.log | while IFS= read -r line; do
    printf '  %s:%s  %s  %s  up %s B, down %s B\n' "$(field host <<<"$line")" "$(field port <<<"$line")" \
      "$(field decision <<<"$line")" "$(field reason <<<"$line")" "$(field bytes_up <<<"$line")" "$(field bytes_down <<<"$line")"
  done
  echo
  echo "== kusaw log verify (hash chain and signed seals of every events file and the egress log)"
  "$kusaw" log verify "$rd/events.jsonl" "$rd"/steps/*/*/events.jsonl "$rd"/steps/fetch/1/egress.log
fi
echo
echo "The record is under $work/.kusaw/runs/; the repo's run branch is kusaw/<run-id>:"
git -C "$work/greeter" branch --list 'kusaw/*' | head -n 5
