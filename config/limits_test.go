package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLimitsAndExitGrace(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "app", ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, fs := Parse([]byte(`version: 1
repos:
  app: {path: app}
providers:
  cursor: {exit_grace: 2s}
pipelines:
  default:
    steps: [a]
    limits: {cost_usd: 5, duration: 1h}
steps:
  a:
    prompt: do it
    limits: {cost_usd: 0.25, tokens: 200000, turns: 30, duration: 20m}
  b:
    prompt: do it
    limits: {}
`), filepath.Join(dir, "factory.yaml"))
	if len(fs.Errors()) > 0 {
		t.Fatalf("findings: %v", fs)
	}
	l := f.Steps["a"].Limits
	if l == nil || l.CostUSD != 0.25 || l.Tokens != 200000 || l.Turns != 30 || l.Duration != 20*time.Minute {
		t.Fatalf("step limits %+v", l)
	}
	if l.String() != "cost_usd 0.25, tokens 200000, turns 30, duration 20m0s" {
		t.Fatalf("String %q", l.String())
	}
	if f.Steps["b"].Limits != nil {
		t.Fatalf("an empty limits map is no limits: %+v", f.Steps["b"].Limits)
	}
	if pl := f.Pipelines["default"].Limits; pl == nil || pl.CostUSD != 5 || pl.Duration != time.Hour || pl.Tokens != 0 {
		t.Fatalf("pipeline limits %+v", pl)
	}
	if f.Providers["cursor"].ExitGrace != 2*time.Second {
		t.Fatalf("exit_grace %v", f.Providers["cursor"].ExitGrace)
	}
}
