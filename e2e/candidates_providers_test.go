package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// One step races two agents: candidate 1 runs Claude Code, candidate 2
// Codex (both fakes), and a judge picks Codex's work, which lands.
func TestCandidatesFromTwoProvidersAndJudge(t *testing.T) {
	f := buildFakes(t)
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {command: `+f.Claude+`}
  codex: {command: `+f.Codex+`}
pipelines:
  default: [try]
steps:
  try:
    prompt: write ANSWER.md
    candidates: [{provider: claude-code}, {provider: codex}]
    select: judge:pick
    env:
      ANTHROPIC_API_KEY: fake-key
      OPENAI_API_KEY: fake-key
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: ANSWER.md
  pick:
    run: [sh, -c, 'grep -q fakeclaude "$KUSAW_CANDIDATE_1/ANSWER.md" || exit 7; grep -q fakecodex "$KUSAW_CANDIDATE_2/ANSWER.md" || exit 8; echo 2 > "$KUSAW_ARTIFACTS/choice"']
`, "app")
	if res := runKusaw(t, dir, "validate"); res.code != 0 {
		t.Fatalf("validate exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	res := runKusaw(t, dir, "run")
	id := onlyRun(t, dir)
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s\npick: %s", res.code, res.stdout, res.stderr, mayRead(filepath.Join(dir, ".kusaw", "runs", id, "steps", "pick", "1", "stderr.log")))
	}
	if got := onBranch(dir, id, "ANSWER.md"); !strings.Contains(got, "fakecodex") {
		t.Fatalf("the judge chose Codex's candidate; the run branch holds %q", got)
	}
	for n, want := range map[string]string{"1": f.Claude, "2": f.Codex} {
		var a struct {
			Processes []struct{ Argv []string }
		}
		json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "try", n, "attempt.json"))), &a)
		if len(a.Processes) == 0 || len(a.Processes[0].Argv) == 0 || a.Processes[0].Argv[0] != want {
			t.Fatalf("attempt %s ran %+v, want %s", n, a.Processes, want)
		}
	}
	ev := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "events.jsonl"))
	if !strings.Contains(ev, `"provider":"codex"`) || !strings.Contains(ev, `"provider":"claude-code"`) {
		t.Errorf("candidates.selected does not name each candidate's provider")
	}

	// A candidate's provider is validated like the step's own: Codex
	// reports no cost, so limits.cost_usd is refused for the step.
	bad := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [try]
steps:
  try:
    prompt: write ANSWER.md
    candidates: [{provider: claude-code}, {provider: codex}]
    limits: {cost_usd: 2}
`, "app")
	if res := runKusaw(t, bad, "validate"); res.code == 0 || !strings.Contains(res.stdout+res.stderr, "codex does not report cost") {
		t.Fatalf("validate accepted a cost limit over a Codex candidate: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}

	// continue_session needs a CLI whose session a new worktree can
	// continue: Cursor keeps its chats per working folder and each
	// attempt has its own.
	bad = factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [try]
steps:
  try:
    prompt: write ANSWER.md
    provider: cursor
    attempts: 2
    continue_session: true
`, "app")
	if res := runKusaw(t, bad, "validate"); res.code == 0 || !strings.Contains(res.stdout+res.stderr, "keeps its sessions per working folder") || !strings.Contains(res.stdout+res.stderr, "claude-code, codex, gemini") {
		t.Fatalf("validate accepted continue_session on cursor: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}
