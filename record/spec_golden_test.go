package record

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/config"
)

var update = flag.Bool("update", false, "rewrite testdata/spec.golden.json from fullSpec")

// fullSpec sets every field of the spec's wire form, so the golden file
// shows each one (TestFullSpecSetsEveryField keeps it so).
func fullSpec() *AttemptSpec {
	sha := func(c string) string { return strings.Repeat(c, 40) }
	deadline := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	hosts := []SpecHost{{Host: "api.example.com", Path: "sandbox.egress.allow[0]"}}
	inject := []SpecInject{{Provider: true, Host: "llm.example.com", Header: "x-api-key", Secret: "llm", BaseURL: "https://llm.example.com",
		BaseURLEnv: "LLM_BASE_URL", KeyEnv: "LLM_KEY"}}
	res := SpecResources{Pids: 256, Memory: 1 << 30, CPU: 2, Disk: 4 << 30, Output: 64 << 20}
	return &AttemptSpec{Version: SpecVersion, ID: "r1/build/2", Run: "r1", Step: "build", Number: 2, Of: 3, Pool: "gpu", Deadline: &deadline,
		Repos: []SpecRepo{{Name: "app", Sandbox: config.ModeRequired, RunBranch: "kusaw/r1", AttemptBranch: "kusaw/attempts/r1/build/2",
			Base: sha("a"), RunBase: sha("9"), Sparse: []string{"services/api"}, WriteLayer: "overlay"}},
		Processes: []SpecProcess{{Repos: []string{"app"}, Mode: config.ModeRequired, ModeOrigin: "repo:app", Network: config.NetworkAllowlist}},
		Mode:      config.ModeRequired, ModeOrigin: "repo:app", Network: config.NetworkAllowlist,
		Setup: [][]string{{"npm", "ci"}},
		StepConfig: SpecStep{ID: "build", Provider: "claude-code", Builtin: "checks", Run: []string{"make", "test"}, Prompt: "Fix the build.",
			TimeoutMS: 600000, Env: map[string]SpecEnv{"TOKEN": {Value: "plain", Secret: "gh"}}, EnvOrder: []string{"TOKEN"},
			Sandbox: &SpecStepSandbox{Mode: config.ModeRequired, Network: config.NetworkAudit, AllowRead: []string{"/opt/sdk"}, AllowWrite: []string{"/var/cache/build"},
				Allow: []SpecHost{{Host: "*.pkg.example.com:8443", Path: "steps.build.sandbox.egress.allow[0]"}}, Inject: inject, InjectSet: true, Resources: &res},
			Limits: &SpecLimits{CostUSD: 2.5, Tokens: 100000, Turns: 30, DurationMS: 1800000}, Ports: 2},
		Policy: SpecPolicy{Mode: config.ModeRequired, Network: config.NetworkAllowlist, AllowRead: []string{"/usr/local/go"}, AllowWrite: []string{"/tmp/shared"},
			Egress: SpecEgress{Allow: hosts, ProviderHosts: true, Inject: inject, AllowRanges: []string{"10.1.0.0/16"}, Resolver: "127.0.0.53:53",
				Budgets:       SpecBudgets{Enabled: true, PerHost: 1 << 20, Total: 8 << 20},
				UpstreamProxy: &SpecUpstream{URL: "http://proxy.corp.example:3128", Credentials: "corp-proxy"}, UpstreamNoProxy: []SpecHost{{Host: "git.corp.example", Path: "sandbox.egress.upstream_no_proxy[0]"}}},
			Resources: res, SettingsScriptsWritable: []string{".vscode/tasks.json"}},
		Provider: &SpecProvider{Command: "claude", Args: []string{"--verbose"}, ExitGraceMS: 5000, BaseURL: "https://llm.example.com", CAFile: "/etc/kusaw/gateway-ca.pem", CAPEM: "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n", APIKey: "llm", Model: "sonnet",
			Agent: &SpecAgent{Argv: []string{"qwen", "--output-format", "stream-json", "--model={model}", "{prompt}"}, Format: "jsonl", Result: "/type=result",
				Success: "/is_error=false", Text: "/result", Session: "/session_id", InputTokens: "/usage/input_tokens", OutputTokens: "/usage/output_tokens",
				CacheReadTokens: "/usage/cache_read_input_tokens", CostUSD: "/total_cost_usd", KeyEnv: "OPENAI_API_KEY", BaseURLEnv: "OPENAI_BASE_URL",
				LoginTokenEnv: []string{"QWEN_TOKEN"}, Env: []string{"QWEN_TELEMETRY=0"}, LoginFolders: []string{"~/.qwen"}, EgressHosts: []string{"api.openai.com"},
				HandshakeHosts: []string{"telemetry.example.com"}, SandboxOffArgs: []string{"--yolo"}, InjectHost: "api.openai.com", InjectHeader: "Authorization",
				InjectUpstream: "https://api.openai.com/v1"}},
		Params:     map[string]string{"ISSUE": "42"},
		Secrets:    []string{"gh", "llm"},
		Caches:     []SpecCache{{Name: "npm", Env: "NPM_CONFIG_CACHE", Path: "/var/cache/npm"}},
		Handoff:    &SpecHandoff{Files: map[string]string{"outcome.txt": "failed"}, Env: map[string]string{"KUSAW_PREVIOUS_OUTCOME": "failed"}, Note: "see " + HandoffPlaceholder},
		Env:        map[string]string{EnvCandidate: "1"},
		Siblings:   []string{"kusaw/attempts/r1/build/3"},
		Merge:      map[string]string{"app": sha("b")},
		Candidates: []SpecCandidate{{Number: 1, Heads: map[string]string{"app": sha("c")}}},
	}
}

// The wire form serve and its workers exchange is testdata/spec.golden.json:
// a change of it (a field renamed, added or dropped, here or in the config
// it is made from) is a visible diff, and SpecVersion goes up with it.
// go test ./record -run TestSpecGolden -update rewrites the file.
func TestSpecGolden(t *testing.T) {
	b, err := json.MarshalIndent(fullSpec(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	golden := filepath.Join("testdata", "spec.golden.json")
	if *update {
		if err := os.WriteFile(golden, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (make it with go test ./record -run TestSpecGolden -update)", err)
	}
	if !bytes.Equal(b, want) {
		t.Fatalf("the spec's wire form changed: if that is meant, bump SpecVersion and run go test ./record -run TestSpecGolden -update\ngot:\n%s", b)
	}
	// The golden file is a spec this kusaw runs.
	if _, err := ParseSpec(want); err != nil {
		t.Fatalf("the golden spec does not parse: %v", err)
	}
}

// Every field of the wire form is set in fullSpec, so a new field shows in
// the golden file rather than hiding behind omitempty.
func TestFullSpecSetsEveryField(t *testing.T) {
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		if v.IsZero() {
			t.Errorf("fullSpec leaves %s unset: set it, so the golden file shows it", path)
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			walk(v.Elem(), path)
		case reflect.Struct:
			if v.Type() == reflect.TypeOf(time.Time{}) {
				return
			}
			for i := 0; i < v.NumField(); i++ {
				walk(v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				walk(v.Index(i), path+"[]")
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				walk(v.MapIndex(k), path+"["+k.String()+"]")
			}
		}
	}
	walk(reflect.ValueOf(fullSpec()), "AttemptSpec")
}

// The config's form survives the wire: what the attempt reads from its
// spec's factory is what serve's config said.
func TestSpecConfigRoundTrip(t *testing.T) {
	pat := func(s string) config.HostEntry {
		p, err := config.ParseHostPattern(s)
		if err != nil {
			t.Fatal(err)
		}
		return config.HostEntry{Raw: s, Pattern: p, Path: "x"}
	}
	step := &config.Step{ID: "build", Provider: "claude-code", Run: []string{"make"}, Prompt: "p", Timeout: 90 * time.Second,
		Env: map[string]config.EnvValue{"A": {Value: "1"}, "T": {Secret: &config.SecretRef{Key: "gh"}}}, EnvOrder: []string{"A", "T"}, Ports: 1,
		Limits: &config.Limits{CostUSD: 1.5, Tokens: 10, Turns: 3, Duration: time.Minute},
		Sandbox: &config.StepSandbox{Mode: config.ModeRequired, Network: config.NetworkAudit, AllowRead: []string{"/r"}, AllowWrite: []string{"/w"},
			Allow: []config.HostEntry{pat("*.example.com"), pat("localhost:3000-3002"), pat("[::1]:8080"), pat("127.0.0.1:9000")}, InjectSet: true,
			Inject:    []config.InjectEntry{{Host: "h.example.com", Header: "authorization", Secret: "k", BaseURLEnv: "B", KeyEnv: "K"}},
			Resources: &config.Resources{Pids: 1, Memory: 2, CPU: 3, Disk: 4, Output: 5}}}
	pol := config.SandboxPolicy{Mode: config.ModeOff, Network: config.NetworkAllowlist, AllowRead: []string{"/go"},
		Egress: config.Egress{Allow: []config.HostEntry{pat("api.example.com:443")}, ProviderHosts: true, Resolver: "1.1.1.1:53",
			Budgets:       config.Budgets{Enabled: true, PerHost: 1, Total: 2},
			UpstreamProxy: &config.UpstreamProxy{URL: "http://p:3128", Credentials: &config.SecretRef{Key: "pp"}}}}
	pc := &config.ProviderConfig{Command: "c", Args: []string{"-x"}, ExitGrace: 3 * time.Second, BaseURL: "https://b", CAFile: "/ca.pem", CAPEM: []byte("pem"), APIKey: &config.SecretRef{Key: "k"}, Model: "m"}
	sp := testSpec()
	sp.StepConfig, sp.Policy, sp.Provider = StepOf(step, step.Prompt), PolicyOf(pol), ProviderOf(pc)
	sp.StepConfig.ID, sp.Step = "build", "build"
	b, _ := sp.Marshal()
	got, err := ParseSpec(b)
	if err != nil {
		t.Fatal(err)
	}
	f, s := got.Factory("/state", map[string]string{"app": "/repos/app"})
	step.Repos, step.Attempts = []string{"app"}, 1
	if !reflect.DeepEqual(s, step) {
		t.Errorf("step:\n got %+v\nwant %+v", s, step)
	}
	if !reflect.DeepEqual(f.Sandbox, pol) {
		t.Errorf("policy:\n got %+v\nwant %+v", f.Sandbox, pol)
	}
	if !reflect.DeepEqual(f.Providers["claude-code"], pc) {
		t.Errorf("provider:\n got %+v\nwant %+v", f.Providers["claude-code"], pc)
	}
}
