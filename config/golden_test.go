package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

var wantRE = regexp.MustCompile(`(?m)^# want: (\S+) (\d+):(\d+)$`)

// TestInvalidFiles loads every broken factory under testdata/invalid and
// checks that it gives its expected code at its expected line:column. Each
// file is copied into a folder with a git repo "app" and a plain folder
// "notgit", so relative paths mean the same everywhere.
func TestInvalidFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 20 {
		t.Fatalf("only %d broken files; want at least 20", len(files))
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m := wantRE.FindSubmatch(data)
			if m == nil {
				t.Fatalf("%s has no '# want: CODE line:col' header", file)
			}
			want := fmt.Sprintf("%s %s:%s", m[1], m[2], m[3])
			dir := fixtureDir(t)
			p := filepath.Join(dir, "factory.yaml")
			os.WriteFile(p, data, 0o644)
			_, fs, err := Load(p)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range fs.Errors() {
				got = append(got, fmt.Sprintf("%s %d:%d", f.Code, f.Line, f.Column))
				if f.Message == "" || f.Fix == "" {
					t.Errorf("finding %s has no message or fix: %+v", f.Code, f)
				}
				if strings.Contains(f.Message, "\n") {
					t.Errorf("finding message is not one line: %q", f.Message)
				}
			}
			for _, g := range got {
				if g == want {
					return
				}
			}
			t.Errorf("want %s, got %v", want, got)
		})
	}
}

func fixtureDir(t *testing.T) string {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "app", ".git"), 0o755)
	os.MkdirAll(filepath.Join(dir, "notgit"), 0o755)
	return dir
}

func TestValidExamples(t *testing.T) {
	dir := fixtureDir(t)
	os.MkdirAll(filepath.Join(dir, "docs", ".git"), 0o755)
	os.MkdirAll(filepath.Join(dir, "prompts"), 0o755)
	os.WriteFile(filepath.Join(dir, "prompts", "implement.md"), []byte("do it"), 0o644)
	src := `version: 1
state_dir: .kusaw
repos:
  app: {path: app, base: main, sandbox: required}
  docs: {path: docs}
providers:
  claude-code: {command: claude, args: [--model, sonnet], base_url: "https://api.anthropic.com"}
setup:
  - [npm, ci]
sandbox:
  mode: "off"
  network: open
  egress:
    allow: [registry.npmjs.org, "*.github.com", "localhost:5432"]
    provider_hosts: true
    allow_ranges: [10.20.0.0/16]
    resolver: 127.0.0.1:53
    budgets: {per_host: 512MiB, total: 2GiB}
serve: {max_parallel: 2, resume: false}
pipelines:
  default: [plan, implement, test]
steps:
  plan: {provider: claude-code, prompt: Write PLAN.md, repos: [app]}
  implement:
    provider: cursor
    prompt_file: prompts/implement.md
    repos: [app, docs]
    per_repo: true
    attempts: 3
    timeout: 45m
    env: {GOFLAGS: -mod=mod, TOKEN: {secret: steps.implement.env.TOKEN}}
    sandbox: required
    requires: [sandbox]
  test:
    run: [go, test, ./...]
    repos: [app]
    sandbox:
      mode: required
      network: allowlist
      egress:
        allow: [proxy.golang.org]
`
	p := filepath.Join(dir, "factory.yaml")
	os.WriteFile(p, []byte(src), 0o644)
	f, fs, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if errs := fs.Errors(); len(errs) > 0 {
		t.Fatalf("valid file has errors: %v", errs)
	}
	if got := f.Steps["implement"]; got.Attempts != 3 || got.Timeout.Minutes() != 45 || !got.PerRepo || got.Env["TOKEN"].Secret == nil {
		t.Fatalf("implement parsed wrong: %+v", got)
	}
	if f.Sandbox.Egress.Budgets.PerHost != 512<<20 || f.Sandbox.Egress.Budgets.Total != 2<<30 {
		t.Fatalf("budgets %+v", f.Sandbox.Egress.Budgets)
	}
	if pos := f.PosOf("steps.implement.timeout"); pos.Line != 30 || pos.Column != 14 {
		t.Fatalf("position of steps.implement.timeout = %+v", pos)
	}
	if f.Steps["plan"].Kind() != KindAgent || f.Steps["test"].Kind() != KindCommand {
		t.Fatal("kinds wrong")
	}
}

// The twin of the write_layer refusals (testdata/invalid/write_layer_*):
// a repo whose attempts run sandboxed takes overlay, on Linux; none is
// the default.
func TestWriteLayerOverlay(t *testing.T) {
	dir := fixtureDir(t)
	os.MkdirAll(filepath.Join(dir, "docs", ".git"), 0o755)
	p := filepath.Join(dir, "factory.yaml")
	os.WriteFile(p, []byte(`version: 1
repos:
  app: {path: app, write_layer: overlay}
  docs: {path: docs, write_layer: none}
pipelines:
  default: [a]
steps:
  a: {run: [true], sandbox: required}
`), 0o644)
	f, fs, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	errs := fs.Errors()
	if runtime.GOOS != "linux" {
		if len(errs) != 1 || errs[0].Code != ECodeWriteLayer || !strings.Contains(errs[0].Message, "repos.app.write_layer") {
			t.Fatalf("off Linux: %v", errs)
		}
		return
	}
	if len(errs) > 0 {
		t.Fatalf("valid file has errors: %v", errs)
	}
	if f.Repos["app"].WriteLayer != WriteLayerOverlay || f.Repos["docs"].WriteLayer != "" {
		t.Errorf("write_layer: app %q, docs %q", f.Repos["app"].WriteLayer, f.Repos["docs"].WriteLayer)
	}
}
