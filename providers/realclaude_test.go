package providers

// The real Claude Code CLI, installed from npm, run by the argv kusaw
// builds against a fake Messages API behind a stand-in of the inject proxy.
//
// Skips and failures: without npm, or when the registry or the install
// fails, the test skips with the reason, except under CI=true, where it
// fails (CI reaches the npm registry, so not running there is a defect).
// The package is cached per version under the user's cache folder
// (kusaw-test/claude-code/<version>), so only a new release downloads.
//
// Network: the CLI runs inside `bwrap --unshare-net`, in a network
// namespace whose only interface is loopback; the fake API and the
// stand-in run in there too (this test binary, re-executed as a helper).
// Nothing the CLI does can leave the machine.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/providers/providertest"
	"github.com/kusaw/kusaw/status"
)

const (
	helperEnv = "KUSAW_REALCLAUDE_HELPER"
	realKey   = "sk-ant-kusaw-test-not-a-real-key"
	apiText   = "pong from the fake Messages API"
)

func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// helperJob is what the outer test asks the in-namespace helper to do.
type helperJob struct {
	Argv   []string
	Env    []string
	Dir    string
	Direct bool // skip the inject stand-in: the CLI's key reaches the API as is
	Tools  []providertest.ToolUse
	Report string
}

type helperReport struct {
	Code     int
	Stdout   string
	Stderr   string
	Requests []helperRequest
}

type helperRequest struct {
	Method, Path, Key, Auth string
	Body                    string
}

// injectStandIn does what the egress inject proxy does, driven by the
// provider's InjectSpec: strip the client's credentials, add the real key,
// forward to the upstream, stream the answer.
func injectStandIn(spec *InjectSpec, upstream, key string) http.Handler {
	u, _ := url.Parse(upstream)
	return &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			for _, h := range spec.StripHeaders {
				r.Out.Header.Del(h)
			}
			r.Out.Header.Set(spec.Header, key)
		},
		FlushInterval: -1,
	}
}

// runHelper runs inside the network namespace: fake API, stand-in, CLI.
func runHelper(jobFile string) int {
	var job helperJob
	b, err := os.ReadFile(jobFile)
	if err == nil {
		err = json.Unmarshal(b, &job)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 70
	}
	api := providertest.StartMessagesAPI(apiText)
	api.WantKey = realKey
	api.Tools = job.Tools
	defer api.Close()
	spec := claudeSpec.Inject
	base := api.URL
	if !job.Direct {
		standIn := httptest.NewServer(injectStandIn(spec, api.URL, realKey))
		defer standIn.Close()
		base = standIn.URL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, job.Argv[0], job.Argv[1:]...)
	cmd.Dir = job.Dir
	cmd.Env = append(job.Env, spec.BaseURLEnv+"="+base, spec.KeyEnv+"="+PlaceholderKey)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	rep := helperReport{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		rep.Code = ee.ExitCode()
	case err != nil:
		rep.Code = -1
		rep.Stderr += "\nhelper: " + err.Error()
	}
	for _, r := range api.Requests() {
		rep.Requests = append(rep.Requests, helperRequest{r.Method, r.Path, r.Header.Get("x-api-key"), r.Header.Get("authorization"), string(r.Body)})
	}
	b, _ = json.Marshal(rep)
	if err := os.WriteFile(job.Report, b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 70
	}
	return 0
}

// runIsolated runs job through this test binary inside bwrap's network
// namespace and returns the helper's report.
func runIsolated(t *testing.T, bwrap string, job helperJob) helperReport {
	t.Helper()
	tmp := t.TempDir()
	job.Report = filepath.Join(tmp, "report.json")
	jobFile := filepath.Join(tmp, "job.json")
	b, _ := json.Marshal(job)
	if err := os.WriteFile(jobFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bwrap, "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent", "--", self, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+jobFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "bwrap:") {
			skipOrFail(t, "bwrap cannot make a network namespace here: %s", tail(out, 300))
		}
		t.Fatalf("helper: %v: %s", err, tail(out, 2000))
	}
	var rep helperReport
	b, err = os.ReadFile(job.Report)
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatalf("helper report: %v", err)
	}
	return rep
}

func TestRealClaudeCode(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the npm install and run of the real Claude Code")
	}
	bwrap := "/usr/bin/bwrap"
	if _, err := os.Stat(bwrap); err != nil {
		skipOrFail(t, "the real Claude Code runs in bwrap's network namespace; %s: %v", bwrap, err)
	}
	bin, version := providertest.InstallClaude(t)
	p := mustGet(t, "claude-code")

	pr, err := p.Probe(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Version != version || !strings.Contains(pr.VersionLine, "Claude Code") {
		t.Fatalf("probe read version %q (%q), npm says %q", pr.Version, pr.VersionLine, version)
	}
	t.Logf("Claude Code %s at %s", pr.Version, pr.RealPath)

	extra := t.TempDir()
	for _, tc := range []struct {
		name string
		req  RunRequest
	}{
		{"sandboxed", RunRequest{Sandboxed: true, Network: "allowlist", ExtraDirs: []string{extra}, UserSettings: `{"includeCoAuthoredBy":false}`}},
		{"unsandboxed", RunRequest{Args: []string{"--model", "sonnet"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Command = bin
			req.Prompt = "-reply with the word pong"
			argv, err := p.Argv(req)
			if err != nil {
				t.Fatal(err)
			}
			env := append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(),
				"DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}, p.Env(req)...)
			rep := runIsolated(t, bwrap, helperJob{Argv: argv, Env: env, Dir: t.TempDir()})
			var events []Event
			res := p.ParseStream(strings.NewReader(rep.Stdout), func(e Event) { events = append(events, e) })
			o, reason := p.Outcome(res, rep.Code)
			if o != status.OutcomePassed {
				t.Fatalf("argv %q: exit %d, %s %s\nresult %+v\nstderr %s\nstdout %s", argv, rep.Code, o, reason, res, tail([]byte(rep.Stderr), 1500), tail([]byte(rep.Stdout), 1500))
			}
			if res.Text != apiText || res.SessionID == "" || res.Turns < 1 || res.Malformed != 0 || len(events) < 3 || events[0].Type != EventInit {
				t.Fatalf("stream: %+v events %s", res, types(events))
			}
			wantMode := "acceptEdits"
			if req.Sandboxed {
				wantMode = "bypassPermissions"
			}
			if events[0].Data["permission_mode"] != wantMode {
				t.Fatalf("the CLI runs in %v, kusaw asked for %s", events[0].Data["permission_mode"], wantMode)
			}
			var posts int
			for _, r := range rep.Requests {
				if r.Method != "POST" || !strings.HasPrefix(r.Path, "/v1/messages") {
					continue
				}
				posts++
				if r.Key != realKey || strings.Contains(r.Body, PlaceholderKey) {
					t.Fatalf("the API got key %q: the stand-in did not replace the placeholder", r.Key)
				}
			}
			if posts == 0 || !strings.Contains(strings.Join(bodies(rep.Requests), ""), "reply with the word pong") {
				t.Fatalf("the prompt never reached the API: %d posts", posts)
			}
		})
	}

	// Tool calls in the real stream shape, and the permission modes kusaw
	// picks: inside the sandbox (bypassPermissions) the agent edits another
	// worktree given with --add-dir and runs a command; outside it
	// (acceptEdits) the edit goes through and the command is refused.
	for _, tc := range []struct {
		name      string
		sandboxed bool
	}{{"tools sandboxed", true}, {"tools unsandboxed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			cwd, other := t.TempDir(), t.TempDir()
			note, ran := filepath.Join(other, "NOTE.md"), filepath.Join(cwd, "ran.txt")
			if !tc.sandboxed {
				note = filepath.Join(cwd, "NOTE.md")
			}
			req := RunRequest{Command: bin, Prompt: "write the note, then run the command", Sandboxed: tc.sandboxed, ExtraDirs: []string{other}}
			argv, err := p.Argv(req)
			if err != nil {
				t.Fatal(err)
			}
			env := append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
				"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"}, p.Env(req)...)
			rep := runIsolated(t, bwrap, helperJob{Argv: argv, Env: env, Dir: cwd, Tools: []providertest.ToolUse{
				{Name: "Write", Input: map[string]any{"file_path": note, "content": "# note\n"}},
				{Name: "Bash", Input: map[string]any{"command": "sh -c 'echo ran > " + ran + "'", "description": "write ran.txt"}},
			}})
			var tools []Event
			res := p.ParseStream(strings.NewReader(rep.Stdout), func(e Event) {
				if e.Type == EventTool {
					tools = append(tools, e)
				}
			})
			if o, reason := p.Outcome(res, rep.Code); o != status.OutcomePassed || res.Text != apiText {
				t.Fatalf("exit %d %s %s %+v\nstderr %s\nstdout %s", rep.Code, o, reason, res, tail([]byte(rep.Stderr), 800), tail([]byte(rep.Stdout), 3000))
			}
			if b, err := os.ReadFile(note); err != nil || string(b) != "# note\n" {
				t.Fatalf("Write did not happen: %q %v\nstdout %s", b, err, tail([]byte(rep.Stdout), 3000))
			}
			if len(tools) != 4 || tools[0].Data["name"] != "Write" || tools[0].Data["phase"] != "started" ||
				tools[1].Data["phase"] != "completed" || tools[1].Data["is_error"] != false || tools[2].Data["name"] != "Bash" || res.Tools != 2 {
				t.Fatalf("tool events %v", tools)
			}
			_, err = os.Stat(ran)
			if tc.sandboxed {
				if err != nil || tools[3].Data["is_error"] != false || res.PermissionDenials != 0 {
					t.Fatalf("bypassPermissions did not run the command: %v %v denials %d", err, tools[3].Data, res.PermissionDenials)
				}
			} else if err == nil || tools[3].Data["is_error"] != true || res.PermissionDenials != 1 {
				t.Fatalf("acceptEdits ran a command without approval: %v %v denials %d", err, tools[3].Data, res.PermissionDenials)
			}
		})
	}

	// Without the inject stand-in the placeholder reaches the API and is
	// refused: the real CLI must report it as a failure, whatever its exit
	// code says.
	t.Run("placeholder key refused", func(t *testing.T) {
		req := RunRequest{Command: bin, Prompt: "hi", Sandboxed: true}
		argv, _ := p.Argv(req)
		// Without CLAUDE_CODE_MAX_RETRIES the CLI retries a 401 ten
		// times over about two minutes (see TestClaudeRetryEvents).
		env := append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "CLAUDE_CODE_MAX_RETRIES=0"}, p.Env(req)...)
		rep := runIsolated(t, bwrap, helperJob{Argv: argv, Env: env, Dir: t.TempDir(), Direct: true})
		res := p.ParseStream(strings.NewReader(rep.Stdout), func(Event) {})
		if o, reason := p.Outcome(res, rep.Code); o != status.OutcomeFailed || reason != status.ReasonProviderError || !res.Seen {
			t.Fatalf("placeholder key: exit %d, %s %s, result %+v, stderr %s", rep.Code, o, reason, res, tail([]byte(rep.Stderr), 500))
		}
		for _, r := range rep.Requests {
			if r.Key != PlaceholderKey {
				t.Fatalf("the API saw key %q, want the placeholder", r.Key)
			}
		}
	})
}

func bodies(rs []helperRequest) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Body)
	}
	return out
}
