package record

import (
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
)

func testSpec() *AttemptSpec {
	return &AttemptSpec{Version: SpecVersion, ID: "r1/build/2", Run: "r1", Step: "build", Number: 2, Of: 3,
		Repos:     []SpecRepo{{Name: "app", Sandbox: config.ModeRequired, RunBranch: "kusaw/r1", AttemptBranch: "kusaw/attempts/r1/build/2", Base: strings.Repeat("a", 40), RunBase: strings.Repeat("9", 40)}},
		Processes: []SpecProcess{{Repos: []string{"app"}, Mode: config.ModeRequired, ModeOrigin: "repo:app", Network: config.NetworkAllowlist}},
		Mode:      config.ModeRequired, ModeOrigin: "repo:app", Network: config.NetworkAllowlist,
		StepConfig: SpecStep{ID: "build", Run: []string{"make"}, Env: map[string]SpecEnv{"TOKEN": {Secret: "gh"}}},
		Policy:     SpecPolicy{Network: config.NetworkAllowlist, Egress: SpecEgress{Allow: []SpecHost{{Host: "example.com"}}}},
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
	if got.Policy.Egress.Allow[0].Host != "example.com" || got.StepConfig.Env["TOKEN"].Secret != "gh" {
		t.Fatalf("lost fields: %+v", got)
	}
}

func TestSpecCheckRefuses(t *testing.T) {
	for name, mut := range map[string]func(*AttemptSpec){
		"version":              func(s *AttemptSpec) { s.Version = 99 },
		"id":                   func(s *AttemptSpec) { s.ID = "other/build/2" },
		"host":                 func(s *AttemptSpec) { s.Policy.Egress.Allow[0].Host = "exa mple.com" },
		"step host":            func(s *AttemptSpec) { s.StepConfig.Sandbox = &SpecStepSandbox{Allow: []SpecHost{{Host: "*"}}} },
		"range":                func(s *AttemptSpec) { s.Policy.Egress.AllowRanges = []string{"10.0.0.0/33"} },
		"no base":              func(s *AttemptSpec) { s.Repos[0].Base = "" },
		"no process":           func(s *AttemptSpec) { s.Processes = nil },
		"step":                 func(s *AttemptSpec) { s.StepConfig.ID = "other" },
		"env":                  func(s *AttemptSpec) { s.Env = map[string]string{"PATH": "/serve/bin"} },
		"env nul":              func(s *AttemptSpec) { s.Env = map[string]string{EnvCandidate: "1\x00"} },
		"sibling up":           func(s *AttemptSpec) { s.Siblings = []string{"kusaw/attempts/r1/build/../../../main"} },
		"sibling own":          func(s *AttemptSpec) { s.Siblings = []string{"kusaw/attempts/r1/build/2"} },
		"sibling other step":   func(s *AttemptSpec) { s.Siblings = []string{"kusaw/attempts/r1/deploy/3"} },
		"sibling not a number": func(s *AttemptSpec) { s.Siblings = []string{"kusaw/attempts/r1/build/03"} },
		"merge inactive repo":  func(s *AttemptSpec) { s.Merge = map[string]string{"lib": strings.Repeat("b", 40)} },
		"merge not a commit":   func(s *AttemptSpec) { s.Merge = map[string]string{"app": "HEAD~1"} },
		"candidate path": func(s *AttemptSpec) {
			s.Candidates = []SpecCandidate{{Number: 1, Heads: map[string]string{"../x": strings.Repeat("b", 40)}}}
		},
		"candidate repeated": func(s *AttemptSpec) {
			c := SpecCandidate{Number: 1, Heads: map[string]string{"app": strings.Repeat("b", 40)}}
			s.Candidates = []SpecCandidate{c, c}
		},
		"candidate number": func(s *AttemptSpec) { s.Candidates = []SpecCandidate{{Number: 0}} },
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
	// A part this kusaw does not know would be dropped: refused instead.
	b, _ := testSpec().Marshal()
	b = append(b[:len(b)-1], []byte(`,"later_shape":{"x":1}}`)...)
	if _, err := ParseSpec(b); err == nil || !strings.Contains(err.Error(), "later_shape") {
		t.Errorf("an unknown field: %v", err)
	}
}

// A shape's parts travel whole, and Needs lists every commit the attempt
// reads, base commits first.
func TestSpecShapeParts(t *testing.T) {
	s := testSpec()
	b1, b2, b3 := strings.Repeat("b", 40), strings.Repeat("c", 40), strings.Repeat("d", 64)
	s.Env = map[string]string{EnvCandidate: "2", EnvMergeConflicts: "a.go\nb.go"}
	s.Siblings = []string{"kusaw/attempts/r1/build/1", "kusaw/attempts/r1/build/3"}
	s.Merge = map[string]string{"app": b1}
	s.Candidates = []SpecCandidate{{Number: 1, Heads: map[string]string{"app": b2, "lib": b3}}, {Number: 3, Heads: map[string]string{"app": b1}}}
	b, _ := s.Marshal()
	got, err := ParseSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	if b2j, _ := got.Marshal(); string(b2j) != string(b) {
		t.Fatalf("round trip changed the spec:\n%s\n%s", b, b2j)
	}
	want := []SpecNeed{{"app", strings.Repeat("a", 40)}, {"app", b1}, {"app", b2}, {"lib", b3}}
	if n := got.Needs(); len(n) != len(want) || n[0] != want[0] || n[1] != want[1] || n[2] != want[2] || n[3] != want[3] {
		t.Fatalf("needs %v, want %v", n, want)
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
