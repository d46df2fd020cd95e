package config

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestScaffoldMirrorEnv: a repository's mirror variables go into the
// checks step's env and its hosts into the allowlist, and the file parses
// with both as the step's (what kusaw init checks before writing).
func TestScaffoldMirrorEnv(t *testing.T) {
	in := ScaffoldInput{Provider: DefaultProvider, Sandbox: true, ProviderHosts: []string{"api.anthropic.com"},
		Repos: []ScaffoldRepo{{Name: "app", Path: ".", Test: []string{"go", "test", "./..."}, TestWhy: "go.mod",
			Registry: []string{"localhost:3000", "sum.golang.org"}, Caches: []string{"go"},
			Env: map[string]string{"GOPROXY": "http://localhost:3000", "GONOSUMDB": "corp.example"}}}}
	data := Scaffold(in)
	f, fs := Parse(data, filepath.Join(t.TempDir(), "factory.yaml"))
	for _, e := range fs.Errors() {
		if e.Code != ECodeNotGitRepo { // the folder is no repository here
			t.Fatalf("%v\n%s", e, data)
		}
	}
	s := f.Steps["checks"]
	if s == nil || s.Env["GOPROXY"].Value != "http://localhost:3000" || s.Env["GONOSUMDB"].Value != "corp.example" {
		t.Fatalf("checks env: %+v\n%s", s, data)
	}
	if !strings.Contains(string(data), "allow: [localhost:3000, sum.golang.org]") {
		t.Errorf("allowlist:\n%s", data)
	}
	in.Repos[0].Env = nil
	if strings.Contains(string(Scaffold(in)), "env:") {
		t.Error("an env block without mirror variables")
	}
}
