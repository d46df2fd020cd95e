package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func modeFactory(factoryMode Mode, repos map[string]Mode) *Factory {
	f := &Factory{Repos: map[string]*Repo{}, Sandbox: SandboxPolicy{Mode: factoryMode, Network: NetworkOpen}}
	for _, n := range []string{"a", "b", "c"} {
		if m, ok := repos[n]; ok {
			f.Repos[n] = &Repo{Name: n, Sandbox: m}
			f.RepoOrder = append(f.RepoOrder, n)
		}
	}
	return f
}

// Each rule of docs/architecture.md, "Effective sandbox mode", in order; the first that applies wins.
func TestEffectiveMode(t *testing.T) {
	tests := []struct {
		name       string
		factory    Mode
		repos      map[string]Mode
		step       *StepSandbox
		active     []string
		want       Mode
		wantOrigin string
	}{
		// rule 1: the step's own setting wins over everything
		{"step off beats required repo", ModeRequired, map[string]Mode{"a": ModeRequired}, &StepSandbox{Mode: ModeOff}, []string{"a"}, ModeOff, "step:s"},
		{"step required beats off repos", ModeOff, map[string]Mode{"a": ModeOff}, &StepSandbox{Mode: ModeRequired}, []string{"a"}, ModeRequired, "step:s"},
		{"step map without mode falls through", ModeRequired, map[string]Mode{"a": ModeUnset}, &StepSandbox{Network: NetworkAllowlist}, []string{"a"}, ModeRequired, "factory"},
		// rule 2: any active repo requiring it
		{"one required repo among off", ModeOff, map[string]Mode{"a": ModeOff, "b": ModeRequired}, nil, []string{"a", "b"}, ModeRequired, "repo:b"},
		{"required repo not active is ignored", ModeOff, map[string]Mode{"a": ModeUnset, "b": ModeRequired}, nil, []string{"a"}, ModeOff, "factory"},
		// rule 3: every active repo off
		{"all active repos off beat factory required", ModeRequired, map[string]Mode{"a": ModeOff, "b": ModeOff}, nil, []string{"a", "b"}, ModeOff, "repos"},
		{"one unset repo stops rule 3", ModeRequired, map[string]Mode{"a": ModeOff, "b": ModeUnset}, nil, []string{"a", "b"}, ModeRequired, "factory"},
		// rule 4: sandbox.mode
		{"factory required", ModeRequired, map[string]Mode{"a": ModeUnset}, nil, []string{"a"}, ModeRequired, "factory"},
		{"factory off", ModeOff, map[string]Mode{"a": ModeUnset}, nil, []string{"a"}, ModeOff, "factory"},
		{"factory unset means off", ModeUnset, map[string]Mode{"a": ModeUnset}, nil, []string{"a"}, ModeOff, "factory"},
		{"no active repos", ModeRequired, map[string]Mode{}, nil, nil, ModeRequired, "factory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := modeFactory(tc.factory, tc.repos)
			s := &Step{ID: "s", Sandbox: tc.step}
			got, origin := f.EffectiveMode(s, tc.active)
			if got != tc.want || origin != tc.wantOrigin {
				t.Fatalf("got %s (%s), want %s (%s)", got, origin, tc.want, tc.wantOrigin)
			}
		})
	}
}

func TestEffectiveNetworkNeedsSandbox(t *testing.T) {
	f := modeFactory(ModeOff, map[string]Mode{"a": ModeUnset})
	s := &Step{ID: "s", Sandbox: &StepSandbox{Network: NetworkAllowlist}}
	if n := f.EffectiveNetwork(s, ModeOff); n != NetworkOpen {
		t.Fatalf("allowlist with mode off must be open, got %s", n)
	}
	if n := f.EffectiveNetwork(s, ModeRequired); n != NetworkAllowlist {
		t.Fatalf("got %s", n)
	}
	f.Sandbox.Network = NetworkAllowlist
	if n := f.EffectiveNetwork(&Step{ID: "t"}, ModeRequired); n != NetworkAllowlist {
		t.Fatalf("factory network not inherited: %s", n)
	}
}

func TestPerRepoAttempts(t *testing.T) {
	f := modeFactory(ModeOff, map[string]Mode{"a": ModeRequired, "b": ModeOff})
	s := &Step{ID: "s", PerRepo: true}
	at := f.Attempts(s)
	if len(at) != 2 || at[0][0] != "a" || at[1][0] != "b" {
		t.Fatalf("attempts %v", at)
	}
	if m, _ := f.EffectiveMode(s, at[0]); m != ModeRequired {
		t.Fatal("repo a's attempt must be required")
	}
	if m, _ := f.EffectiveMode(s, at[1]); m != ModeOff {
		t.Fatal("repo b's attempt must be off")
	}
	if at := f.Attempts(&Step{ID: "x"}); len(at) != 1 || len(at[0]) != 2 {
		t.Fatalf("one attempt with all repos expected: %v", at)
	}
}

func TestAllowlistOrigins(t *testing.T) {
	must := func(s string) HostPattern {
		p, err := ParseHostPattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := modeFactory(ModeRequired, map[string]Mode{"a": ModeUnset})
	f.Sandbox.Egress.ProviderHosts = true
	f.Sandbox.Egress.Allow = []HostEntry{{Raw: "registry.npmjs.org", Pattern: must("registry.npmjs.org")}}
	s := &Step{ID: "impl", Provider: "claude-code", Prompt: "x", Sandbox: &StepSandbox{Allow: []HostEntry{
		{Raw: "proxy.golang.org", Pattern: must("proxy.golang.org")},
		{Raw: "registry.npmjs.org", Pattern: must("registry.npmjs.org")},
	}}}
	got := f.Allowlist(s, []string{"api.anthropic.com"})
	want := []struct{ host, origin string }{
		{"registry.npmjs.org", "factory"}, {"proxy.golang.org", "step:impl"}, {"api.anthropic.com", "provider:claude-code"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i, w := range want {
		if got[i].Pattern.String() != w.host || got[i].Origin != w.origin {
			t.Errorf("entry %d = %s (%s), want %s (%s)", i, got[i].Pattern, got[i].Origin, w.host, w.origin)
		}
	}
	f.Sandbox.Egress.ProviderHosts = false
	if got := f.Allowlist(s, []string{"api.anthropic.com"}); len(got) != 2 {
		t.Fatalf("provider_hosts: false must not add provider hosts: %+v", got)
	}
	cmd := &Step{ID: "test", Run: []string{"go"}}
	f.Sandbox.Egress.ProviderHosts = true
	if got := f.Allowlist(cmd, []string{"api.anthropic.com"}); len(got) != 1 {
		t.Fatalf("a command step gets no provider hosts: %+v", got)
	}
}

func TestCheckAllowWrite(t *testing.T) {
	home := "/home/u"
	refused := []string{"/", "/etc", "/usr/local/bin", "/home", "/home/u", "/home/u/.ssh", "/home/u/.ssh/keys", "/home/u/.bashrc", "/home/u/.config", "/home/u/.claude", "/home/u/.config/kusaw", "/var/lib",
		"/usr/local", "/usr/local/src/app", "/var", "/var/log/app", "/var/cache/x", "/var/lib/dpkg/info", "/opt", "/srv", "/mnt", "/private/etc/x", "/opt/homebrew/lib"}
	for _, p := range refused {
		if err := checkAllowWrite(p, home); err == nil {
			t.Errorf("%s must be refused", p)
		}
	}
	allowed := []string{"/home/u/.cache/go-build", "/home/u/src/cache", "/tmp", "/work/cache", "/home/u/.npm",
		"/srv/app", "/opt/build/proj", "/var/tmp", "/var/tmp/ci/proj", "/var/lib/jenkins/workspace", "/mnt/data/proj", "/media/disk/x"}
	for _, p := range allowed {
		if err := checkAllowWrite(p, home); err != nil {
			t.Errorf("%s must be allowed: %v", p, err)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"512MiB": 512 << 20, "2GiB": 2 << 30, "100MB": 100e6, "4096": 4096, "1.5KiB": 1536, "10 MiB": 10 << 20} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1MiB", "MiB", "1XB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) must fail", bad)
		}
	}
}

func TestStepInjectReplacesFactory(t *testing.T) {
	f := modeFactory(ModeRequired, map[string]Mode{"a": ModeUnset})
	f.Sandbox.Egress.Inject = []InjectEntry{{Provider: true}}
	if got := f.Inject(&Step{ID: "x"}); len(got) != 1 || !got[0].Provider {
		t.Fatalf("factory inject not inherited: %+v", got)
	}
	off := &Step{ID: "y", Sandbox: &StepSandbox{InjectSet: true}}
	if got := f.Inject(off); len(got) != 0 {
		t.Fatalf("inject: [] on the step must turn it off: %+v", got)
	}
}

// TestPipelineForms: the list form and the map form read the same, and a
// parallel group keeps its members in written order.
func TestPipelineForms(t *testing.T) {
	dir := t.TempDir()
	for _, r := range []string{"app"} {
		if err := os.MkdirAll(filepath.Join(dir, r, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	body := "version: 1\nrepos:\n  app: {path: app}\nsteps:\n  a: {run: [true]}\n  b: {run: [true]}\n  c: {run: [true]}\npipelines:\n  short: [a, [b, c], a]\n  long:\n    steps: [a, [b, c], a]\n"
	p := filepath.Join(dir, "factory.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	f, fs, err := Load(p)
	if err != nil || len(fs.Errors()) > 0 {
		t.Fatalf("load: %v %v", err, fs.Errors())
	}
	for _, name := range []string{"short", "long"} {
		pl := f.Pipelines[name]
		if len(pl.Steps) != 3 || pl.Steps[0].Step != "a" || strings.Join(pl.Steps[1].Group, ",") != "b,c" || pl.Steps[2].Step != "a" {
			t.Errorf("%s: %+v", name, pl.Steps)
		}
		if got := strings.Join(pl.StepIDs(), ","); got != "a,b,c,a" {
			t.Errorf("%s: StepIDs %s", name, got)
		}
	}
}

// A provider's base_url joins its hosts: on localhost it becomes a local
// service entry, so the CLI reaches a local gateway with no extra key.
func TestAllowlistProviderBaseURL(t *testing.T) {
	for url, want := range map[string]string{
		"https://localhost:8443":            "localhost:8443",
		"https://127.0.0.1:9000/v1":         "127.0.0.1:9000",
		"http://[::1]:8080":                 "[::1]:8080",
		"https://gateway.corp.example":      "gateway.corp.example",
		"https://gateway.corp.example:8443": "gateway.corp.example:8443",
		"https://localhost":                 "localhost:443",
	} {
		f := &Factory{Providers: map[string]*ProviderConfig{"claude-code": {BaseURL: url}}}
		f.Sandbox.Egress.ProviderHosts = true
		got := f.Allowlist(&Step{ID: "a", Provider: "claude-code"}, []string{"api.anthropic.com"})
		if len(got) != 2 || got[0].Pattern.String() != want || got[0].Origin != "provider:claude-code" {
			t.Errorf("base_url %s: allowlist %+v, want %s first", url, got, want)
		}
	}
}
