package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSettingScripts(t *testing.T) {
	wt := t.TempDir()
	write := func(p, s string) {
		os.MkdirAll(filepath.Dir(filepath.Join(wt, p)), 0o755)
		os.WriteFile(filepath.Join(wt, p), []byte(s), 0o644)
	}
	write(".claude/settings.json", `{"hooks": {"PostToolUse": [{"matcher": "Edit", "hooks": [
		{"type": "command", "command": "bash scripts/fmt.sh --fix && \"$CLAUDE_PROJECT_DIR\"/.claude/hooks/check.py"},
		{"type": "command", "command": "npx prettier --write"}]}]},
	  "statusLine": {"type": "command", "command": "./bin/status"},
	  "apiKeyHelper": "/usr/local/bin/key-helper"}`)
	write(".mcp.json", `{"mcpServers": {"local": {"command": "node", "args": ["tools/server.js", "--port=3000"]},
	  "remote": {"command": "npx", "args": ["-y", "@scope/server"]}}}`)
	write(".vscode/tasks.json", `{
	  // comments, as VS Code writes them
	  "tasks": [{"label": "build", "command": "sh", "args": ["${workspaceFolder}/build/run.sh"],},],
	}`)
	got := []string{}
	for _, s := range settingScripts(wt) {
		got = append(got, rel(wt, s.Path))
	}
	want := []string{".claude/hooks/check.py", "bin/status", "build/run.sh", "scripts/fmt.sh", "tools/server.js"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("scripts %v, want %v", got, want)
	}
}

// The scripts settings name are read-only in the plan, a missing one with a
// stand-in; the factory's list keeps one writable.
func TestPlanProtectsSettingScripts(t *testing.T) {
	f := newFixture(t)
	os.MkdirAll(filepath.Join(f.wt, ".claude"), 0o755)
	os.WriteFile(filepath.Join(f.wt, ".claude", "settings.json"), []byte(`{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"bash scripts/fmt.sh"}]}]}}`), 0o644)
	os.WriteFile(filepath.Join(f.wt, ".mcp.json"), []byte(`{"mcpServers":{"s":{"command":"node","args":["tools/server.js"]}}}`), 0o644)
	os.MkdirAll(filepath.Join(f.wt, "scripts"), 0o755)
	os.WriteFile(filepath.Join(f.wt, "scripts", "fmt.sh"), []byte("gofmt -l .\n"), 0o644)
	p, err := BuildPlan(f.input())
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string]string{}
	for _, m := range p.Mounts {
		if ops[m.Dst] == "" {
			ops[m.Dst] = m.Op
		}
	}
	if ops[filepath.Join(f.wt, "scripts", "fmt.sh")] != "ro-bind" {
		t.Errorf("scripts/fmt.sh: %q", ops[filepath.Join(f.wt, "scripts", "fmt.sh")])
	}
	// tools/ is missing: the first missing folder becomes a read-only stand-in.
	if ops[filepath.Join(f.wt, "tools")] != "tmpfs" {
		t.Errorf("tools/: %q", ops[filepath.Join(f.wt, "tools")])
	}
	in := f.input()
	in.SettingsScriptsWritable = []string{"tools/"}
	if p, err = BuildPlan(in); err != nil {
		t.Fatal(err)
	}
	for _, m := range p.Mounts {
		if m.Dst == filepath.Join(f.wt, "tools") {
			t.Errorf("tools/ protected although listed writable: %+v", m)
		}
	}
	for _, bad := range []string{".git/hooks", "../x", "/etc"} {
		in.SettingsScriptsWritable = []string{bad}
		if _, err := BuildPlan(in); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
