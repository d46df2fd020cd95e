package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kusaw logs shows an agent's stream-json as a transcript on a terminal
// (a line per tool call, its result shortened, the final message in full,
// usage last); piped it keeps the bytes unless --transcript or --json.
func TestLogsAgentTranscript(t *testing.T) {
	f := buildFakes(t)
	final := strings.Repeat("The plan is written. ", 150) + "THE END OF THE FINAL MESSAGE"
	dir := agentFactory(t, f.Claude, `pipelines:
  default: [plan]
steps:
  plan:
    prompt: Write PLAN.md describing the change.
    repos: [app]
    sandbox: "off"
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: PLAN.md
      FAKE_AGENT_CONTENT: the plan
      FAKE_AGENT_TEXT: "`+final+`"
`)
	if r := runKusaw(t, dir, "run"); r.code != 0 {
		t.Fatalf("kusaw run: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	id := onlyRun(t, dir)
	check := func(what, out string) {
		t.Helper()
		for _, want := range []string{"== plan attempt 1 transcript (claude-code) ==", "● started claude-code", "model claude-fake-1",
			"  Working on: Write PLAN.md describing the change.", "→ Write  PLAN.md\n    ← File created successfully at: PLAN.md\n",
			"✓ finished (success, ", final + "\n", "usage: $"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q:\n%s", what, want, out)
			}
		}
		if strings.Contains(out, `"type":"assistant"`) {
			t.Errorf("%s has the raw stream:\n%s", what, out)
		}
		if strings.Count(out, "THE END OF THE FINAL MESSAGE") != 1 {
			t.Errorf("%s shows the final message %d times", what, strings.Count(out, "THE END OF THE FINAL MESSAGE"))
		}
	}
	r := runKusaw(t, dir, "logs", id, "--transcript")
	if r.code != 0 {
		t.Fatalf("logs --transcript: %d %s", r.code, r.stderr)
	}
	check("logs --transcript", r.stdout)
	check("logs on a terminal", strings.ReplaceAll(runOnTerminal(t, dir, "logs", id), "\r\n", "\n"))
	if out := runOnTerminal(t, dir, "logs", id, "--raw"); !strings.Contains(out, `"type":"result"`) {
		t.Errorf("logs --raw on a terminal lacks the stream:\n%s", out)
	}

	// Piped: the bytes as written.
	r = runKusaw(t, dir, "logs", id)
	if r.code != 0 || !strings.Contains(r.stdout, `"type":"result"`) || strings.Contains(r.stdout, "transcript") {
		t.Errorf("logs piped: %d\n%s", r.code, r.stdout)
	}
	r = runKusaw(t, dir, "logs", id, "--json")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var kinds []string
	for _, l := range lines {
		var x struct{ Kind, Step string }
		if err := json.Unmarshal([]byte(l), &x); err != nil || x.Step != "plan" {
			t.Fatalf("logs --json line %q: %v", l, err)
		}
		kinds = append(kinds, x.Kind)
	}
	if got := strings.Join(kinds, ","); got != "probe,init,text,tool,text,result,usage" {
		t.Errorf("logs --json kinds %s", got)
	}
	if r := runKusaw(t, dir, "logs", id, "--raw", "--transcript"); r.code != 2 || !strings.Contains(r.stderr, "give one of them") {
		t.Errorf("--raw with --transcript: %d %s", r.code, r.stderr)
	}
}

// Following a running agent: each entry once, a tool call with its
// result, the usage when the attempt ends.
func TestLogsFollowAgentTranscript(t *testing.T) {
	f := buildFakes(t)
	dir := agentFactory(t, f.Claude, `pipelines:
  default: [plan]
steps:
  plan:
    prompt: Write PLAN.md.
    repos: [app]
    sandbox: "off"
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file,sleep
      FAKE_AGENT_SLEEP: 3s
      FAKE_AGENT_FILE: PLAN.md
      FAKE_AGENT_TEXT: followed to the end
`)
	run, out, errb := startKusaw(t, dir, "run")
	var id string
	waitFor(t, "the run's record", 30*time.Second, func() bool {
		ents, _ := os.ReadDir(filepath.Join(dir, ".kusaw", "runs"))
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs", e.Name(), "run.json")); err == nil {
				id = e.Name()
			}
		}
		return id != ""
	})
	r := runKusaw(t, dir, "logs", id, "-f", "--transcript")
	if err := run.Wait(); err != nil {
		t.Fatalf("kusaw run: %v\n%s%s", err, out, errb)
	}
	for want, n := range map[string]int{"== plan attempt 1 transcript (claude-code) ==": 1, "→ Write  PLAN.md\n    ← File created successfully at: PLAN.md\n": 1,
		"  followed to the end\n": 1, "✓ finished (success": 1, "usage: $": 1} {
		if got := strings.Count(r.stdout, want); got != n {
			t.Errorf("logs -f shows %q %d times, want %d:\n%s", want, got, n, r.stdout)
		}
	}
}
