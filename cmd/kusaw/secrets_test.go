package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/secretstore"
)

func runKusawIn(stdin string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// TestConfigSetSecretFromSchema: --secret writes the {secret: KEY}
// reference for any secret field the schema has (a delivery token, a
// forge's webhook secret), refuses a typo and an unknown provider with
// the nearest name and stores nothing then, and kusaw secrets lists and
// removes names, never values.
func TestConfigSetSecretFromSchema(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(secretstore.DirEnv, filepath.Join(dir, "store"))
	if out, err := exec.Command("git", "init", "-q", filepath.Join(dir, "app")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	file := filepath.Join(dir, "factory.yaml")
	os.WriteFile(file, []byte(`version: 1
repos:
  app: {path: app}
pipelines:
  default:
    steps: [a]
    deliver:
      push: {remote: origin}
      pull_request: {forge: github, repo: acme/app, base: main}
steps:
  a: {run: ["true"]}
`), 0o644)
	code, out, errOut := runKusawIn("ghp-value-1234", "config", "set", "-f", file, "pipelines.default.deliver.pull_request.token", "--secret")
	if code != 0 {
		t.Fatalf("set the delivery token: %d %s %s", code, out, errOut)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "token: {secret: pipelines.default.deliver.pull_request.token}") && !strings.Contains(string(b), "secret: pipelines.default.deliver.pull_request.token") {
		t.Fatalf("the file has no reference to the token:\n%s", b)
	}
	if strings.Contains(string(b), "ghp-value-1234") || strings.Contains(out+errOut, "ghp-value-1234") {
		t.Fatal("the value reached the file or the output")
	}
	if code, out, _ := runKusaw("validate", "-f", file); code != 0 {
		t.Fatalf("validate after config set: %d %s", code, out)
	}
	for key, want := range map[string]string{
		"providers.claude-code.apikey": "did you mean providers.claude-code.api_key?",
		"providers.claud.api_key":      "did you mean providers.claude-code?",
	} {
		code, _, errOut := runKusawIn("v", "config", "set", "-f", file, key, "--secret")
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("config set %s --secret: %d %q, want exit 2 with %q", key, code, errOut, want)
		}
	}
	// serve's API token is kusaw's own named secret: stored only.
	if code, out, errOut := runKusawIn("tok-0123456789", "config", "set", "-f", file, "serve.token", "--secret"); code != 0 {
		t.Fatalf("config set serve.token --secret: %d %s %s", code, out, errOut)
	}
	if b, _ := os.ReadFile(file); strings.Contains(string(b), "token: {secret: serve.token}") {
		t.Fatal("serve.token was written into the file")
	}
	runKusaw("secrets", "rm", "serve.token")
	code, out, _ = runKusaw("secrets", "list")
	if code != 0 || strings.TrimSpace(out) != "pipelines.default.deliver.pull_request.token" {
		t.Fatalf("secrets list: %d %q (a refused key must not be stored)", code, out)
	}
	if code, _, errOut := runKusaw("secrets", "rm", "nope"); code != 2 || !strings.Contains(errOut, "no secret \"nope\"") {
		t.Errorf("secrets rm of a missing key: %d %q", code, errOut)
	}
	if code, out, _ := runKusaw("secrets", "rm", "pipelines.default.deliver.pull_request.token"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("secrets rm: %d %q", code, out)
	}
	if _, out, _ := runKusaw("secrets", "list"); !strings.Contains(out, "no secrets stored") {
		t.Fatalf("after rm: %q", out)
	}
}
