package providers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/providers/providertest"
	"github.com/kusaw/kusaw/status"
)

var (
	fakesOnce sync.Once
	fakes     providertest.Fakes
	fakesErr  error
	fakesDir  string
)

func TestMain(m *testing.M) {
	if job := os.Getenv(helperEnv); job != "" {
		os.Exit(runHelper(job))
	}
	code := m.Run()
	if fakesDir != "" {
		os.RemoveAll(fakesDir)
	}
	os.Exit(code)
}

func buildFakes(t *testing.T) providertest.Fakes {
	t.Helper()
	fakesOnce.Do(func() {
		fakesDir, fakesErr = os.MkdirTemp("", "kusaw-fakes-")
		if fakesErr == nil {
			fakes, fakesErr = providertest.Build(fakesDir)
		}
	})
	if fakesErr != nil {
		t.Fatalf("building the fake CLIs: %v", fakesErr)
	}
	return fakes
}

type runOut struct {
	code   int
	stdout string
	stderr string
	res    Result
	events []Event
}

// runAgent runs argv in dir with a clean environment plus env, and parses
// its stdout with the provider's parser.
func runAgent(t *testing.T, p Provider, argv []string, dir string, env ...string) runOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	home := t.TempDir()
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + home}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %q: %v", argv, err)
	}
	r := runOut{code: code, stdout: out.String(), stderr: errb.String()}
	r.res = p.ParseStream(strings.NewReader(r.stdout), func(e Event) { r.events = append(r.events, e) })
	return r
}

func TestFakeScenarios(t *testing.T) {
	f := buildFakes(t)
	tests := []struct {
		scenario string
		code     int
		outcome  status.Outcome
		reason   status.Reason
	}{
		{"ok", 0, status.OutcomePassed, status.ReasonNone},
		{"is_error_exit0", 0, status.OutcomeFailed, status.ReasonProviderError},
		{"success_then_exit1", 1, status.OutcomeFailed, status.ReasonProviderExitLied},
		{"no_result", 0, status.OutcomeFailed, status.ReasonProviderNoResult},
		{"crash", 2, status.OutcomeFailed, status.ReasonProviderNoResult},
	}
	for _, prov := range []struct {
		name, cmd, keyEnv string
	}{{"claude-code", f.Claude, "ANTHROPIC_API_KEY=k"}, {"cursor", f.Cursor, "CURSOR_API_KEY=k"}, {"codex", f.Codex, "OPENAI_API_KEY=k"}, {"gemini", f.Gemini, "GEMINI_API_KEY=k"}} {
		p := mustGet(t, prov.name)
		for _, sandboxed := range []bool{false, true} {
			for _, tc := range tests {
				req := RunRequest{Command: prov.cmd, Prompt: "do the thing", Sandboxed: sandboxed}
				argv, err := p.Argv(req)
				if err != nil {
					t.Fatal(err)
				}
				env := append(p.Env(req), prov.keyEnv, "FAKE_AGENT_SCENARIO="+tc.scenario)
				env = append(env, geminiKeySettings(t, p, req)...)
				r := runAgent(t, p, argv, t.TempDir(), env...)
				if r.code != tc.code {
					t.Errorf("%s sandboxed=%v %s: exit %d, want %d; stderr %q", prov.name, sandboxed, tc.scenario, r.code, tc.code, r.stderr)
					continue
				}
				o, reason := p.Outcome(r.res, r.code)
				if o != tc.outcome || reason != tc.reason {
					t.Errorf("%s sandboxed=%v %s: outcome %s %s, want %s %s", prov.name, sandboxed, tc.scenario, o, reason, tc.outcome, tc.reason)
				}
				if len(r.events) == 0 || r.events[0].Type != EventInit || r.res.SessionID == "" {
					t.Errorf("%s %s: no init event / session id: %v", prov.name, tc.scenario, types(r.events))
				}
				if tc.scenario == "crash" && r.res.Malformed == 0 {
					t.Errorf("%s crash: malformed lines not counted", prov.name)
				}
			}
		}
	}
}

func TestFakeEditFile(t *testing.T) {
	f := buildFakes(t)
	for _, prov := range []struct {
		name, cmd, keyEnv string
	}{{"claude-code", f.Claude, "ANTHROPIC_API_KEY=k"}, {"cursor", f.Cursor, "CURSOR_API_KEY=k"}, {"codex", f.Codex, "OPENAI_API_KEY=k"}, {"gemini", f.Gemini, "GEMINI_API_KEY=k"}} {
		p := mustGet(t, prov.name)
		for _, sandboxed := range []bool{false, true} {
			dir := t.TempDir()
			req := RunRequest{Command: prov.cmd, Prompt: "write the plan", Sandboxed: sandboxed}
			argv, _ := p.Argv(req)
			env := append(p.Env(req), prov.keyEnv, "FAKE_AGENT_SCENARIO=edit_file", "FAKE_AGENT_FILE=PLAN.md", "FAKE_AGENT_CONTENT=# plan\n")
			env = append(env, geminiKeySettings(t, p, req)...)
			r := runAgent(t, p, argv, dir, env...)
			if o, reason := p.Outcome(r.res, r.code); o != status.OutcomePassed {
				t.Fatalf("%s: %s %s; stderr %q", prov.name, o, reason, r.stderr)
			}
			b, err := os.ReadFile(filepath.Join(dir, "PLAN.md"))
			if err != nil || string(b) != "# plan\n" {
				t.Fatalf("%s sandboxed=%v: file not written: %q %v", prov.name, sandboxed, b, err)
			}
			want := map[string]string{"claude-code": "init,text,tool,tool,text,result", "cursor": "init,thinking,text,tool,tool,text,result",
				"codex": "init,tool,text,result", "gemini": "init,tool,tool,text,result"}[prov.name]
			if r.res.Tools != 1 || types(r.events) != want {
				t.Fatalf("%s: tools %d events %s", prov.name, r.res.Tools, types(r.events))
			}
		}
	}
	// Without a permission mode that allows edits the fake's Write is
	// denied, as the real CLI's would be in default mode.
	dir := t.TempDir()
	p := mustGet(t, "claude-code")
	argv, _ := p.Argv(RunRequest{Command: f.Claude, Prompt: "p", Args: []string{"--permission-mode", "default"}})
	r := runAgent(t, p, argv, dir, "ANTHROPIC_API_KEY=k", "FAKE_AGENT_SCENARIO=edit_file")
	if _, err := os.Stat(filepath.Join(dir, "FAKE_AGENT.md")); err == nil {
		t.Fatal("default permission mode still wrote the file")
	}
	if d := withoutUsage(r.events)[3].Data; d["is_error"] != true {
		t.Fatalf("denied write not reported as a failed tool: %v", d)
	}
}

func TestFakeClaudeCallsAPI(t *testing.T) {
	f := buildFakes(t)
	api := providertest.NewMessagesAPI(t, "answer from the fake API")
	api.WantKey = "real-key"
	p := mustGet(t, "claude-code")
	argv, _ := p.Argv(RunRequest{Command: f.Claude, Prompt: "ping", Sandboxed: true})
	env := append(p.Env(RunRequest{Sandboxed: true}), "FAKE_AGENT_SCENARIO=call_api", "ANTHROPIC_BASE_URL="+api.URL)

	r := runAgent(t, p, argv, t.TempDir(), append(env, "ANTHROPIC_API_KEY=real-key")...)
	if o, _ := p.Outcome(r.res, r.code); o != status.OutcomePassed || r.res.Text != "answer from the fake API" {
		t.Fatalf("outcome %s text %q stderr %q", o, r.res.Text, r.stderr)
	}
	reqs := api.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("x-api-key") != "real-key" || !bytes.Contains(reqs[0].Body, []byte("ping")) {
		t.Fatalf("requests %+v", reqs)
	}
	// A wrong key (the placeholder, when no proxy adds the real one) is
	// an error result and a failed attempt.
	r = runAgent(t, p, argv, t.TempDir(), append(env, "ANTHROPIC_API_KEY="+PlaceholderKey)...)
	if o, reason := p.Outcome(r.res, r.code); o != status.OutcomeFailed || reason != status.ReasonProviderError || !strings.Contains(r.res.Text, "401") {
		t.Fatalf("wrong key: %s %s %q", o, reason, r.res.Text)
	}
	// Without a base URL the fake refuses rather than calling the real API.
	r = runAgent(t, p, argv, t.TempDir(), "IS_SANDBOX=1", "FAKE_AGENT_SCENARIO=call_api", "ANTHROPIC_API_KEY=k")
	if !r.res.IsError || !strings.Contains(r.res.Text, "ANTHROPIC_BASE_URL is not set") {
		t.Fatalf("no base URL: %+v", r.res)
	}
}

func TestFakesAcceptKusawArgv(t *testing.T) {
	f := buildFakes(t)
	d1, d2 := t.TempDir(), t.TempDir()
	settings := filepath.Join(t.TempDir(), "settings.json")
	os.WriteFile(settings, []byte(`{"model":"opus"}`), 0o600)
	argvFile := filepath.Join(t.TempDir(), "argv.json")
	reqs := []RunRequest{
		{Prompt: "-starts with a dash", ExtraDirs: []string{d1, d2}},
		{Prompt: "--help", Sandboxed: true, ExtraDirs: []string{d1}, UserSettings: settings},
		{Prompt: "multi\nline prompt", Sandboxed: true, Args: []string{"--model", "sonnet", "--allowedTools", "Bash(go test:*)", "Edit", "--settings", `{"env":{"X":"1"}}`}},
	}
	for _, name := range Names() {
		if name == "opencode" {
			// No fake of opencode: its argv is the real CLI's to accept
			// (e2e TestRealOpencodeCLISandboxedInject, opencode 1.18).
			continue
		}
		p := mustGet(t, name)
		for _, req := range reqs {
			req.Command = map[string]string{"claude-code": f.Claude, "cursor": f.CursorAgent, "codex": f.Codex, "gemini": f.Gemini}[name]
			switch name {
			case "cursor":
				req.Args = nil
			case "codex":
				req.Args, req.UserSettings = []string{"-c", `model_reasoning_effort="high"`}, ""
				req.Model, req.BaseURL = "gpt-fake-1", "http://127.0.0.1:9/v1"
			case "gemini":
				req.Args, req.UserSettings, req.Model = nil, "", "gemini-2.5-flash"
			}
			argv, err := p.Argv(req)
			if err != nil {
				t.Fatal(err)
			}
			env := append(p.Env(req), "ANTHROPIC_API_KEY=k", "CURSOR_API_KEY=k", "OPENAI_API_KEY=k", "GEMINI_API_KEY=k", "FAKE_AGENT_ARGV_FILE="+argvFile)
			env = append(env, geminiKeySettings(t, p, req)...)
			r := runAgent(t, p, argv, t.TempDir(), env...)
			if o, reason := p.Outcome(r.res, r.code); o != status.OutcomePassed {
				t.Fatalf("%s rejected %q: %s %s: %s", name, argv, o, reason, r.stderr)
			}
			var got []string
			b, _ := os.ReadFile(argvFile)
			json.Unmarshal(b, &got)
			if last := got[len(got)-1]; len(got) == 0 || last != req.Prompt && last != "--prompt="+req.Prompt {
				t.Fatalf("%s: prompt not passed intact: %q", name, got)
			}
			if !strings.Contains(withoutUsage(r.events)[1].Data["text"].(string), strings.SplitN(req.Prompt, "\n", 2)[0]) && name == "claude-code" {
				t.Fatalf("%s: the fake did not see the prompt: %v", name, r.events[1].Data)
			}
		}
	}
}

// The fakes reject what the real CLIs reject, so a wrong argv from kusaw
// fails in tests rather than on a user's machine.
func TestFakesRejectBadArgv(t *testing.T) {
	f := buildFakes(t)
	dir := t.TempDir()
	tests := []struct {
		name string
		argv []string
		env  []string
		want string
	}{
		{"stream-json without --verbose", []string{f.Claude, "-p", "--output-format", "stream-json", "--", "hi"}, nil, "requires --verbose"},
		{"unknown flag", []string{f.Claude, "-p", "--frobnicate", "--", "hi"}, nil, "unknown option '--frobnicate'"},
		{"bad permission mode", []string{f.Claude, "-p", "--permission-mode", "yolo", "hi"}, nil, "argument 'yolo' is invalid"},
		{"variadic --add-dir swallows a trailing prompt", []string{f.Claude, "-p", "--add-dir", dir, "hi"}, nil, "is not a directory"},
		{"variadic --add-dir without the prompt", []string{f.Claude, "-p", "--add-dir", dir}, nil, "Input must be provided"},
		{"settings not JSON", []string{f.Claude, "-p", "--settings", "{nope", "--", "hi"}, nil, "invalid settings JSON"},
		{"cursor without --trust", []string{f.Cursor, "-p", "--output-format", "stream-json", "--", "hi"}, nil, "--trust"},
		{"cursor bad sandbox", []string{f.Cursor, "-p", "--trust", "--sandbox", "off", "--", "hi"}, nil, "Allowed choices are enabled, disabled"},
		{"cursor unknown flag", []string{f.Cursor, "-p", "--trust", "--frobnicate", "--", "hi"}, nil, "unknown option '--frobnicate'"},
		{"cursor --add-dir not a folder", []string{f.Cursor, "-p", "--trust", "--add-dir", filepath.Join(dir, "nope"), "--", "hi"}, nil, "not a directory"},
		{"cursor without login", []string{f.Cursor, "-p", "--trust", "--", "hi"}, []string{}, "Authentication required"},
		{"unknown scenario", []string{f.Claude, "-p", "--", "hi"}, []string{"FAKE_AGENT_SCENARIO=okk"}, `unknown scenario "okk"`},
		{"cursor cannot call_api", []string{f.Cursor, "-p", "--trust", "--", "hi"}, []string{"CURSOR_API_KEY=k", "FAKE_AGENT_SCENARIO=call_api"}, "unknown scenario"},
	}
	if os.Geteuid() == 0 {
		tests = append(tests, struct {
			name string
			argv []string
			env  []string
			want string
		}{"root bypass outside a sandbox", []string{f.Claude, "-p", "--permission-mode", "bypassPermissions", "--", "hi"}, nil, "cannot be used with root"})
	}
	for _, tc := range tests {
		env := tc.env
		if env == nil {
			env = []string{"ANTHROPIC_API_KEY=k", "CURSOR_API_KEY=k"}
		}
		r := runAgent(t, mustGet(t, "claude-code"), tc.argv, dir, env...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d stderr %q, want failure mentioning %q", tc.name, r.code, r.stderr, tc.want)
		}
	}
	// Claude without any login: an is_error result and exit 1, like the
	// real CLI ("Not logged in").
	p := mustGet(t, "claude-code")
	argv, _ := p.Argv(RunRequest{Command: f.Claude, Prompt: "hi"})
	r := runAgent(t, p, argv, dir)
	if o, reason := p.Outcome(r.res, r.code); r.code != 1 || o != status.OutcomeFailed || reason != status.ReasonProviderError || !strings.Contains(r.res.Text, "Not logged in") {
		t.Fatalf("not logged in: exit %d %s %s %q", r.code, o, reason, r.res.Text)
	}
	// Cursor signs in from its config folder too.
	cfg := t.TempDir()
	os.WriteFile(filepath.Join(cfg, "auth.json"), []byte(`{}`), 0o600)
	cp := mustGet(t, "cursor")
	argv, _ = cp.Argv(RunRequest{Command: f.Cursor, Prompt: "hi"})
	r = runAgent(t, cp, argv, dir, "CURSOR_CONFIG_DIR="+cfg)
	if o, _ := cp.Outcome(r.res, r.code); o != status.OutcomePassed || r.events[0].Data["api_key_source"] != "login" {
		t.Fatalf("cursor login folder: %s %q", o, r.stderr)
	}
}

func TestProbeFakes(t *testing.T) {
	f := buildFakes(t)
	ctx := context.Background()
	p := mustGet(t, "claude-code")
	pr, err := p.Probe(ctx, f.Claude)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Version != "2.1.332" || pr.VersionLine != "2.1.332 (Claude Code)" || pr.Path != f.Claude || pr.InstallDir != f.Dir ||
		pr.Env.APIKey != "ANTHROPIC_API_KEY" || len(pr.EgressHosts) == 0 || len(pr.Handshake) == 0 || len(pr.LoginPaths) == 0 {
		t.Fatalf("probe %+v", pr)
	}
	probeMu.Lock()
	runs := probeRuns
	probeMu.Unlock()
	if _, err := p.Probe(ctx, f.Claude); err != nil {
		t.Fatal(err)
	}
	probeMu.Lock()
	if probeRuns != runs {
		t.Fatal("second probe of the same binary ran --version again")
	}
	probeMu.Unlock()
	// A new binary at the same path (new mtime) is probed again.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(f.Claude, later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Probe(ctx, f.Claude); err != nil {
		t.Fatal(err)
	}
	probeMu.Lock()
	if probeRuns != runs+1 {
		t.Fatalf("changed binary not probed again (%d runs, want %d)", probeRuns, runs+1)
	}
	probeMu.Unlock()

	// Cursor's older name is found when `agent` is not on PATH.
	only := t.TempDir()
	if err := os.Link(f.CursorAgent, filepath.Join(only, "cursor-agent")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", only)
	t.Setenv(providertest.EnvVersion, "2026.01.02-abc")
	cpr, err := mustGet(t, "cursor").Probe(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(cpr.Path) != "cursor-agent" || cpr.Version != "2026.01.02-abc" || cpr.Command != "cursor-agent" {
		t.Fatalf("cursor probe %+v", cpr)
	}
	// Missing CLIs: a typed reason and the fix.
	for _, cmd := range []string{"", "/nonexistent/claude"} {
		_, err = p.Probe(ctx, cmd)
		var se *status.Error
		if !errors.As(err, &se) || se.Reason != status.ReasonProviderMissing || !strings.Contains(se.Fix, "providers.claude-code.command") || strings.Contains(err.Error(), "\n") {
			t.Fatalf("missing %q: %v", cmd, err)
		}
	}
	// A binary whose --version fails.
	bad := filepath.Join(t.TempDir(), "claude")
	os.WriteFile(bad, []byte("#!/bin/sh\necho broken >&2\nexit 3\n"), 0o755)
	if _, err := p.Probe(ctx, bad); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Fatalf("failing --version: %v", err)
	}
}

func TestPrepare(t *testing.T) {
	f := buildFakes(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("CLAUDE_CONFIG_DIR", "")
	os.Mkdir(filepath.Join(home, ".claude"), 0o700)
	link := filepath.Join(t.TempDir(), "claude")
	if err := os.Symlink(f.Claude, link); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := PrepareInput{Step: "plan", Command: link, Prompt: "p", Sandboxed: true, Network: "allowlist", ExtraDirs: []string{"/w/docs"}}
	got, err := Prepare(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Argv[0] != f.Claude || got.Probe.Path != link || len(got.ReadPaths) != 1 || got.ReadPaths[0] != f.Dir {
		t.Fatalf("sandboxed runs exec the real path and read its folder: argv0 %q read %q", got.Argv[0], got.ReadPaths)
	}
	if len(got.LoginPaths) != 1 || got.LoginPaths[0] != filepath.Join(home, ".claude") {
		t.Fatalf("login paths %q (only existing ones)", got.LoginPaths)
	}
	if indexOf(got.Argv, "--add-dir") < 0 || indexOf(got.Env, "IS_SANDBOX=1") < 0 || got.Token.Required {
		t.Fatalf("argv %q env %q token %+v", got.Argv, got.Env, got.Token)
	}
	// Unsandboxed: the configured path, no read paths.
	in.Sandboxed = false
	got, err = Prepare(ctx, in)
	if err != nil || got.Argv[0] != link || got.ReadPaths != nil {
		t.Fatalf("unsandboxed: %v %q %q", err, got.Argv, got.ReadPaths)
	}

	var se *status.Error
	// A fresh HOME without a token is refused before anything runs.
	fresh := PrepareInput{Step: "plan", Command: "/nonexistent", Prompt: "p", Sandboxed: true, FreshHome: true}
	_, err = Prepare(ctx, fresh)
	if !errors.As(err, &se) || se.Reason != status.ReasonSandboxTokenMissing || !strings.Contains(se.Fix, "steps.plan.env.CLAUDE_CODE_OAUTH_TOKEN --secret") {
		t.Fatalf("fresh HOME without a token: %v", err)
	}
	fresh.Command, fresh.StepEnv = f.Claude, []string{"CLAUDE_CODE_OAUTH_TOKEN"}
	got, err = Prepare(ctx, fresh)
	if err != nil || got.LoginPaths != nil {
		t.Fatalf("fresh HOME with a token: %v, login paths %q", err, got.LoginPaths)
	}
	for _, tc := range []struct {
		in     PrepareInput
		reason status.Reason
	}{
		{PrepareInput{Provider: "codex", Prompt: "p"}, status.ReasonProviderMissing},
		{PrepareInput{Command: "/nonexistent/claude", Prompt: "p"}, status.ReasonProviderMissing},
		{PrepareInput{Command: f.Claude, Prompt: "p", Args: []string{"--output-format", "json"}}, status.ReasonStepStartFailed},
		{PrepareInput{Provider: "cursor", Command: f.Cursor, Prompt: ""}, status.ReasonStepStartFailed},
	} {
		_, err := Prepare(ctx, tc.in)
		if !errors.As(err, &se) || se.Reason != tc.reason || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want %s", tc.in, err, tc.reason)
		}
	}
}

func TestProbeSkipsForeignAgent(t *testing.T) {
	f := buildFakes(t)
	dir := t.TempDir()
	foreign := filepath.Join(dir, "agent")
	if err := os.WriteFile(foreign, []byte("#!/bin/sh\necho 'agent 0.4.1 (another vendor)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	ctx := context.Background()
	p := mustGet(t, "cursor")
	_, err := p.Probe(ctx, "")
	var se *status.Error
	if !errors.As(err, &se) || se.Reason != status.ReasonProviderMissing || !strings.Contains(se.Msg, "another vendor") || !strings.Contains(se.Fix, "providers.cursor.command") {
		t.Fatalf("only a foreign agent: %v", err)
	}
	if err := os.Link(f.CursorAgent, filepath.Join(dir, "cursor-agent")); err != nil {
		t.Fatal(err)
	}
	pr, err := p.Probe(ctx, "")
	if err != nil || filepath.Base(pr.Path) != "cursor-agent" {
		t.Fatalf("foreign agent not passed over: %+v %v", pr, err)
	}
	// A command the user names is taken as it is.
	if pr, err := p.Probe(ctx, foreign); err != nil || pr.Path != foreign {
		t.Fatalf("explicit command: %+v %v", pr, err)
	}
}

func withoutUsage(evs []Event) []Event {
	var out []Event
	for _, e := range evs {
		if e.Type != EventUsage {
			out = append(out, e)
		}
	}
	return out
}

// The scenarios of #19: two results, the real Cursor's failure shape,
// a CLI that does not exit after its result, an MCP call.
func TestFakeNewScenarios(t *testing.T) {
	f := buildFakes(t)
	for _, prov := range []struct {
		name, cmd, keyEnv string
	}{{"claude-code", f.Claude, "ANTHROPIC_API_KEY=k"}, {"cursor", f.Cursor, "CURSOR_API_KEY=k"}} {
		p := mustGet(t, prov.name)
		req := RunRequest{Command: prov.cmd, Prompt: "do the thing"}
		argv, _ := p.Argv(req)
		r := runAgent(t, p, argv, t.TempDir(), prov.keyEnv, "FAKE_AGENT_SCENARIO=two_results")
		if o, reason := p.Outcome(r.res, r.code); o != status.OutcomeFailed || reason != status.ReasonProviderMultipleResults {
			t.Errorf("%s two_results: %s %s", prov.name, o, reason)
		}
		// hang_after_result: the result comes first; the process (and the
		// child holding its pipes) goes on for FAKE_AGENT_SLEEP.
		start := time.Now()
		r = runAgent(t, p, argv, t.TempDir(), prov.keyEnv, "FAKE_AGENT_SCENARIO=hang_after_result", "FAKE_AGENT_SLEEP=1500ms")
		if !r.res.Seen || r.res.IsError || time.Since(start) < 1500*time.Millisecond {
			t.Errorf("%s hang_after_result: %+v after %s", prov.name, r.res, time.Since(start))
		}
		r = runAgent(t, p, argv, t.TempDir(), prov.keyEnv, "FAKE_AGENT_SCENARIO=error_then_hang", "FAKE_AGENT_SLEEP=10ms")
		if o, reason := p.Outcome(r.res, r.code); o != status.OutcomeFailed || reason != status.ReasonProviderError {
			t.Errorf("%s error_then_hang: %s %s", prov.name, o, reason)
		}
		if r.res.Usage == nil || r.res.Usage.InputTokens == 0 {
			t.Errorf("%s: the fake's result has no usage: %+v", prov.name, r.res.Usage)
		}
	}
	cp := mustGet(t, "cursor")
	argv, _ := cp.Argv(RunRequest{Command: f.Cursor, Prompt: "hi"})
	r := runAgent(t, cp, argv, t.TempDir(), "CURSOR_API_KEY=k", "FAKE_AGENT_SCENARIO=api_error")
	if r.code != 1 || r.res.Seen || !strings.Contains(r.stderr, "unavailable") || types(r.events) != "init" {
		t.Errorf("cursor api_error: exit %d events %s stderr %q", r.code, types(r.events), r.stderr)
	}
	r = runAgent(t, cp, argv, t.TempDir(), "CURSOR_API_KEY=k", "FAKE_AGENT_SCENARIO=mcp")
	var mcp bool
	for _, e := range r.events {
		mcp = mcp || e.Type == EventTool && e.Data["name"] == "search" && e.Data["mcp_server"] == "docs"
	}
	if !mcp {
		t.Errorf("cursor mcp: no tool event named search: %v", r.events)
	}
	// kusaw refuses --stream-partial-output; the fake shows why (each
	// chunk its own assistant event).
	if _, err := cp.Argv(RunRequest{Prompt: "hi", Args: []string{"--stream-partial-output"}}); err == nil || !strings.Contains(err.Error(), "stream-partial-output") {
		t.Errorf("--stream-partial-output accepted: %v", err)
	}
	r = runAgent(t, cp, append(argv[:len(argv)-2:len(argv)-2], "--stream-partial-output", "--", "hi"), t.TempDir(), "CURSOR_API_KEY=k")
	if n := strings.Count(types(r.events), "text"); n < 3 {
		t.Errorf("the fake's partial output: %d text events", n)
	}
}

// geminiKeySettings gives a gemini run the system settings kusaw writes
// (the gemini-api-key auth type), as Prepare would; nothing for others.
func geminiKeySettings(t *testing.T, p Provider, req RunRequest) []string {
	t.Helper()
	c, ok := p.(configurer)
	if !ok || p.Name() != "gemini" {
		return nil
	}
	env, err := c.attemptConfig(t.TempDir(), PrepareInput{Sandboxed: req.Sandboxed, StepEnv: []string{"GEMINI_API_KEY"}}, t.TempDir(), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	return env
}
