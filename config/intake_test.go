package config

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTriggersAndForges(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "app", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	src := `version: 1
repos:
  app: {path: app}
forges:
  github:
    token: {secret: github_token}
    webhook_secret: {secret: github_hook}
pipelines:
  default:
    steps: [a]
    deliver:
      push: {remote: origin}
      pull_request: {forge: github, repo: acme/app, base: main}
triggers:
  fix-issue:
    on: {forge: github, repo: acme/app, event: issues.labeled, label: kusaw}
    pipeline: default
    params: {task: "{{issue.title}}\n\n{{issue.body}}"}
  revise:
    on: {forge: github, repo: acme/app, event: pull_request_review.submitted, state: changes_requested}
    pipeline: default
  nightly:
    on: {schedule: "0 3 * * *"}
    pipeline: default
steps:
  a: {run: [true]}
`
	f, fs := Parse([]byte(src), filepath.Join(dir, "factory.yaml"))
	if len(fs.Errors()) > 0 {
		t.Fatalf("findings: %v", fs)
	}
	if got := f.Forges["github"]; got == nil || got.APIURL != "https://api.github.com" || got.WebhookSecret.Key != "github_hook" {
		t.Fatalf("forges.github = %+v", got)
	}
	pr := f.Pipelines["default"].Deliver.PullRequest
	if pr.Token == nil || pr.Token.Key != "github_token" || pr.APIURL != "https://api.github.com" {
		t.Fatalf("the pull request did not take the forge's token and API: %+v", pr)
	}
	if got := f.TriggerOrder; len(got) != 3 || got[0] != "fix-issue" {
		t.Fatalf("trigger order %v", got)
	}
	fix := f.Triggers["fix-issue"]
	if fix.On.Label != "kusaw" || fix.Params["task"] != "{{issue.title}}\n\n{{issue.body}}" {
		t.Fatalf("fix-issue = %+v", fix)
	}
	if s := f.Schedules(); len(s) != 1 || s[0].Name != "nightly" {
		t.Fatalf("schedules %v", s)
	}
	if n := len(f.TriggerOrderFor("github")); n != 2 {
		t.Fatalf("github triggers: %d", n)
	}
}

func TestExpandTemplateIsInert(t *testing.T) {
	vals := map[string]string{"issue.title": "{{issue.body}} $(rm -rf /)", "issue.body": "secret"}
	got := ExpandTemplate("T: {{ issue.title }} / {{nope}}", vals)
	// A value that looks like a template is not expanded again.
	if want := "T: {{issue.body}} $(rm -rf /) / "; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestExpandParams(t *testing.T) {
	got := ExpandParams("Do {{params.task}} ({{ params.TASK }}); keep {{.Go}} and {{issue.body}}; {{params.none}}.",
		map[string]string{"task": "x {{params.TASK}}", "TASK": "y"})
	if want := "Do x {{params.TASK}} (y); keep {{.Go}} and {{issue.body}}; ."; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
