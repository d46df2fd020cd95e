package record

import (
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

func testSpec() *AttemptSpec {
	return &AttemptSpec{Version: SpecVersion, ID: "r1/build/2", Run: "r1", Step: "build", Number: 2, Of: 3,
		Repos:     []SpecRepo{{Name: "app", Sandbox: config.ModeRequired, RunBranch: "kusaw/r1", AttemptBranch: "kusaw/attempts/r1/build/2", Base: strings.Repeat("a", 40)}},
		Processes: []SpecProcess{{Repos: []string{"app"}, Mode: config.ModeRequired, ModeOrigin: "repo:app", Network: config.NetworkAllowlist}},
		Mode:      config.ModeRequired, ModeOrigin: "repo:app", Network: config.NetworkAllowlist,
		StepConfig: config.Step{ID: "build", Run: []string{"make"}, Env: map[string]config.EnvValue{"TOKEN": {Secret: &config.SecretRef{Key: "gh"}}}},
		Policy:     config.SandboxPolicy{Network: config.NetworkAllowlist, Egress: config.Egress{Allow: []config.HostEntry{{Raw: "example.com", Pattern: config.HostPattern{Name: "example.com"}}}}},
		Secrets:    []string{"gh"}}
}

// The wire form round-trips: a worker reads the same spec serve wrote.
func TestSpecRoundTrip(t *testing.T) {
	s := testSpec()
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := got.Marshal()
	if string(b) != string(b2) {
		t.Fatalf("round trip changed the spec:\n%s\n%s", b, b2)
	}
	if got.Policy.Egress.Allow[0].Pattern.Name != "example.com" || got.StepConfig.Env["TOKEN"].Secret.Key != "gh" {
		t.Fatalf("lost fields: %+v", got)
	}
}

func TestSpecCheckRefuses(t *testing.T) {
	for name, mut := range map[string]func(*AttemptSpec){
		"version":     func(s *AttemptSpec) { s.Version = 99 },
		"id":          func(s *AttemptSpec) { s.ID = "other/build/2" },
		"prompt file": func(s *AttemptSpec) { s.StepConfig.PromptFile = "/home/serve/prompt.md" },
		"no base":     func(s *AttemptSpec) { s.Repos[0].Base = "" },
		"no process":  func(s *AttemptSpec) { s.Processes = nil },
		"step":        func(s *AttemptSpec) { s.StepConfig.ID = "other" },
	} {
		s := testSpec()
		mut(s)
		b, _ := s.Marshal()
		if _, err := ParseSpec(b); err == nil {
			t.Errorf("%s: a broken spec was accepted", name)
		}
	}
	if _, err := ParseSpec([]byte("{")); err == nil {
		t.Error("bad JSON accepted")
	}
}

// The view a machine builds from a spec names the step's repos first, at
// that machine's paths, and keeps the others (which its sandbox hides).
func TestSpecFactoryView(t *testing.T) {
	s := testSpec()
	f, step := s.Factory("/w/state", map[string]string{"app": "/w/cache/app", "secret-repo": "/w/other"})
	if step.ID != "build" || len(step.Repos) != 1 || step.Repos[0] != "app" {
		t.Fatalf("step %+v", step)
	}
	if f.StateDir != "/w/state" || f.Repos["app"].Path != "/w/cache/app" || f.Repos["app"].Sandbox != config.ModeRequired {
		t.Fatalf("factory %+v", f)
	}
	if got := f.ActiveRepos(step); len(got) != 1 || got[0] != "app" {
		t.Fatalf("active repos %v", got)
	}
	if len(f.RepoOrder) != 2 || f.Repos["secret-repo"] == nil {
		t.Fatalf("other repos dropped: %v", f.RepoOrder)
	}
	if m, _ := f.EffectiveMode(step, step.Repos); m != config.ModeRequired {
		t.Fatalf("mode %s", m)
	}
}
