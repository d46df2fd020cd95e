package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/providers/providertest"
	"github.com/kusaw/kusaw/secretstore"
)

var (
	fakesOnce sync.Once
	fakes     providertest.Fakes
	fakesErr  error
)

// buildFakes builds the fake agent CLIs once for all e2e tests.
func buildFakes(t *testing.T) providertest.Fakes {
	t.Helper()
	need(t, "go")
	fakesOnce.Do(func() {
		dir := filepath.Join(filepath.Dir(kusawBin), "fakes")
		fakes, fakesErr = providertest.Build(dir)
	})
	if fakesErr != nil {
		t.Fatal(fakesErr)
	}
	return fakes
}

// agentFactory makes a factory whose claude-code is the fake; every step
// signs in with a token kept in the secret store (agent.token).
func agentFactory(t *testing.T, claude, body string) string {
	dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
  docs: {path: ./docs}
providers:
  claude-code: {command: `+claude+`}
`+body, "app", "docs")
	if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("agent.token", "fake-oauth-token-1234"); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestPipelineAgentStepWithFakeClaude(t *testing.T) {
	f := buildFakes(t)
	for _, boxed := range []bool{false, true} {
		name := "open"
		if boxed {
			name = "sandboxed"
		}
		t.Run(name, func(t *testing.T) {
			mode := "off"
			if boxed {
				needSandbox(t)
				mode = "required"
			}
			dir := agentFactory(t, f.Claude, `pipelines:
  default: [plan]
steps:
  plan:
    prompt: Write PLAN.md describing the change.
    repos: [app, docs]
    sandbox: `+mode+`
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: PLAN.md
      FAKE_AGENT_CONTENT: the plan
`)
			res := runKusaw(t, dir, "run")
			if res.code != 0 {
				t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			id := onlyRun(t, dir)
			if got := git(t, filepath.Join(dir, "app"), "show", "kusaw/"+id+":PLAN.md"); got != "the plan" {
				t.Errorf("PLAN.md on the run branch = %q", got)
			}
			adir := filepath.Join(dir, ".kusaw", "runs", id, "steps", "plan", "1")
			events := readFile(t, filepath.Join(adir, "events.jsonl"))
			for _, typ := range []string{"provider.init", "provider.tool", "provider.result"} {
				if !strings.Contains(events, `"type":"`+typ+`"`) {
					t.Errorf("no %s event", typ)
				}
			}
			var rec struct {
				Provider  string `json:"provider"`
				Processes []struct {
					Argv   []string        `json:"argv"`
					Result json.RawMessage `json:"provider_result"`
				} `json:"processes"`
			}
			json.Unmarshal([]byte(readFile(t, filepath.Join(adir, "attempt.json"))), &rec)
			argv := strings.Join(rec.Processes[0].Argv, " ")
			for _, want := range []string{"-p ", "-- Write PLAN.md", "--output-format stream-json", "--verbose", "--add-dir " + filepath.Join(adir, "worktrees", "docs")} {
				if !strings.Contains(argv, want) {
					t.Errorf("argv lacks %q: %s", want, argv)
				}
			}
			if boxed != strings.Contains(argv, `"sandbox":{"enabled":false}`) {
				t.Errorf("Claude Code's own sandbox off only inside kusaw's (sandboxed=%v): %s", boxed, argv)
			}
			if rec.Provider != "claude-code" || !strings.Contains(string(rec.Processes[0].Result), `"seen": true`) {
				t.Errorf("record: provider %q result %s", rec.Provider, rec.Processes[0].Result)
			}
		})
	}
}

func TestPipelineAgentOutcomeFromResultEvent(t *testing.T) {
	f := buildFakes(t)
	cases := []struct {
		scenario, outcome, reason string
	}{
		{"is_error_exit0", "failed", "provider.error"}, // exit 0 lies: the result says error
		{"no_result", "failed", "provider.no_result"},
		{"success_then_exit1", "failed", "provider.exit_after_success"},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			dir := agentFactory(t, f.Claude, `pipelines:
  default: [agent]
steps:
  agent:
    prompt: do it
    env: {FAKE_AGENT_SCENARIO: `+c.scenario+`, CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}}
`)
			res := runKusaw(t, dir, "run")
			if res.code != 1 {
				t.Fatalf("kusaw run exit %d, want 1\n%s%s", res.code, res.stdout, res.stderr)
			}
			a, _ := loadAttempt(t, dir, onlyRun(t, dir), "agent", 1)
			if a.Outcome != c.outcome || a.Reason != c.reason {
				t.Errorf("outcome %s/%s, want %s/%s", a.Outcome, a.Reason, c.outcome, c.reason)
			}
		})
	}
}

func TestPipelineAgentMissingCLIRefused(t *testing.T) {
	dir := agentFactory(t, "/nonexistent/claude", `pipelines:
  default: [agent]
steps:
  agent:
    prompt: do it
`)
	res := runKusaw(t, dir, "run")
	if res.code != 1 || !strings.Contains(res.stderr, "provider.missing") {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	a, _ := loadAttempt(t, dir, onlyRun(t, dir), "agent", 1)
	if a.Outcome != "refused" {
		t.Errorf("outcome %s", a.Outcome)
	}
}

// TestAgentPromptNamesParams: an agent's prompt takes a run parameter as
// {{params.NAME}}, as plain text: the task reaches the agent without a
// shell, and what looks like a command in it does not run.
func TestAgentPromptNamesParams(t *testing.T) {
	f := buildFakes(t)
	marker := filepath.Join(t.TempDir(), "ran")
	dir := agentFactory(t, f.Claude, `pipelines:
  default: [fix]
steps:
  fix:
    prompt: "Fix this: {{params.task}} ({{ params.missing }}), keep {{.Go}}"
    repos: [app]
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
`)
	task := "$(touch " + marker + ") `touch " + marker + "` the bug"
	res := runKusaw(t, dir, "run", "--param", "task="+task)
	if res.code != 0 {
		t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	id := onlyRun(t, dir)
	var rec struct {
		Processes []struct {
			Argv []string `json:"argv"`
		} `json:"processes"`
	}
	json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "fix", "1", "attempt.json"))), &rec)
	argv := rec.Processes[0].Argv
	if last := argv[len(argv)-1]; last != "Fix this: "+task+" (), keep {{.Go}}" {
		t.Fatalf("the prompt the agent got: %q", last)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the parameter's text ran as a command")
	}
}

// An agent's prompt is not the factory file's text: a trigger's issue
// body or a parameter can be all of it. When it is the absolute path of
// a file outside the view (another factory's secrets under /var/tmp
// here, readable by the user kusaw runs as), the sandbox must not show
// that file as "a file the step's command names"; a custom command's
// script still is (the twin). As root and as uid 65534.
func TestAgentPromptPathIsNotShownToTheSandbox(t *testing.T) {
	needSandbox(t)
	f := buildFakes(t)
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			other, err := os.MkdirTemp("/var/tmp", "kusaw-other-factory-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(other) })
			os.Chmod(other, 0o755)
			secret := filepath.Join(other, "deploy.env")
			script := filepath.Join(other, "check.sh")
			writeFile(t, secret, "DEPLOY_TOKEN=other-factory-secret\n")
			writeFile(t, script, "test -r "+script+"\n")
			for _, p := range []string{secret, script} {
				os.Chmod(p, 0o644)
			}
			dir, _ := seamDir(t, uid)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {command: `+f.Claude+`}
pipelines:
  default: [fix, check]
steps:
  fix:
    prompt: "{{params.task}}"
    repos: [app]
    sandbox: required
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
  check:
    run: [sh, `+script+`]
    repos: [app]
    sandbox: required
`)
			if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("agent.token", "fake-oauth-token-1234"); err != nil {
				t.Fatal(err)
			}
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run", "--param", "task="+secret)
			if res.code != 0 {
				t.Fatalf("kusaw run exit %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			id := onlyRun(t, dir)
			mounted := func(step, path string) bool {
				events := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", step, "1", "events.jsonl"))
				for _, line := range strings.Split(events, "\n") {
					if !strings.Contains(line, `"type":"sandbox.plan"`) {
						continue
					}
					var ev struct {
						Data struct {
							Plan struct {
								Mounts []struct {
									Src string `json:"src"`
									Dst string `json:"dst"`
								} `json:"mounts"`
							} `json:"plan"`
						} `json:"data"`
					}
					if err := json.Unmarshal([]byte(line), &ev); err != nil {
						t.Fatalf("%s: sandbox.plan event: %v", step, err)
					}
					if len(ev.Data.Plan.Mounts) == 0 {
						t.Fatalf("%s: sandbox.plan event without mounts: %s", step, line)
					}
					for _, m := range ev.Data.Plan.Mounts {
						if m.Src == path || m.Dst == path {
							return true
						}
					}
					return false
				}
				t.Fatalf("%s: no sandbox.plan event", step)
				return false
			}
			if mounted("fix", secret) {
				t.Errorf("the agent's prompt %s was mounted into its sandbox", secret)
			}
			if !mounted("check", script) {
				t.Errorf("the custom command's script %s was not mounted (the legitimate use)", script)
			}
		})
	}
}
