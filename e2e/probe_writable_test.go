package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/secretstore"
)

// Issue 24, finding 1: a step rewrote the agent CLI installed in its login
// folder (~/.claude/local/claude), which the sandbox lets it write. At the
// next kusaw run the CLI's --version probe ran the planted code on the
// host. Now kusaw refuses the CLI there (provider.writable_cli, with the
// fix) and runs nothing of it. The twin: the same CLI installed outside
// every writable folder is probed and the step runs. As root and as uid
// 65534.
func TestProbeRefusesCLIInLoginFolder(t *testing.T) {
	f := buildFakes(t)
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, _ := seamDir(t, uid)
			home := filepath.Join(dir, "home") // testEnv's HOME
			marker := filepath.Join(dir, "planted-ran")
			planted := filepath.Join(home, ".claude", "local", "claude")
			installed := filepath.Join(dir, "opt", "claude", "bin", "claude")
			for _, p := range []string{planted, installed} {
				writeFile(t, p, "#!/bin/sh\necho \"$0 $*\" >> "+marker+"\nexec "+f.Claude+" \"$@\"\n")
				os.Chmod(p, 0o755)
			}
			factory := func(cli string) {
				writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
providers:
  claude-code: {command: `+cli+`}
pipelines:
  default: [agent]
steps:
  agent:
    prompt: Write PLAN.md.
    sandbox: "off"
    env:
      CLAUDE_CODE_OAUTH_TOKEN: {secret: agent.token}
      FAKE_AGENT_SCENARIO: edit_file
      FAKE_AGENT_FILE: PLAN.md
      FAKE_AGENT_CONTENT: the plan
`)
			}
			if err := secretstore.OpenDir(filepath.Join(dir, "secrets")).Set("agent.token", "fake-oauth-token-1234"); err != nil {
				t.Fatal(err)
			}
			factory(planted)
			res := runKusawAs(t, uid, 2*time.Minute, dir, "run")
			if res.code == 0 || !strings.Contains(res.stderr, "provider.writable_cli") || !strings.Contains(res.stderr, "lies in "+filepath.Join(home, ".claude")) || !strings.Contains(res.stderr, "providers.claude-code.command") {
				t.Fatalf("the CLI in the login folder was not refused: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			if b, err := os.ReadFile(marker); err == nil {
				t.Fatalf("kusaw ran the planted CLI on the host: %s", b)
			}
			verifyRecords(t, uid, dir)

			// Twin: installed outside every folder a sandbox writes.
			factory(installed)
			res = runKusawAs(t, uid, 2*time.Minute, dir, "run")
			if res.code != 0 {
				t.Fatalf("the CLI outside the login folder: %d\n%s%s", res.code, res.stdout, res.stderr)
			}
			if b, _ := os.ReadFile(marker); !strings.Contains(string(b), installed+" --version") {
				t.Fatalf("the installed CLI was not probed: %q", b)
			}
		})
	}
}
