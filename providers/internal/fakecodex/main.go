// Command fakecodex behaves like OpenAI's Codex CLI (`codex exec`) for
// kusaw's tests: it checks argv as the real one does (exec and exec
// resume, -c key=value with TOML values, --json, --sandbox values, the
// options resume does not take), needs a login (OPENAI_API_KEY,
// CODEX_API_KEY, or auth.json in CODEX_HOME or ~/.codex), prints the
// --json events in the real shape (thread.started, item.*,
// turn.completed with usage, turn.failed, error) and does what
// FAKE_AGENT_SCENARIO asks (fakecli.Known). call_api posts to the custom
// model provider's base_url (/responses) with the key from its env_key.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/providers/internal/fakecli"
)

const defaultVersion = "codex-cli 0.171.0"

var spec = fakecli.Spec{
	"--json": {"json", fakecli.Bool},
	"-c":     {"config", fakecli.Value}, "--config": {"config", fakecli.Value},
	"--enable": {"enable", fakecli.Value}, "--disable": {"disable", fakecli.Value},
	"-m": {"model", fakecli.Value}, "--model": {"model", fakecli.Value},
	"-s": {"sandbox", fakecli.Value}, "--sandbox": {"sandbox", fakecli.Value},
	"--dangerously-bypass-approvals-and-sandbox": {"bypass", fakecli.Bool},
	"--skip-git-repo-check":                      {"skip-git", fakecli.Bool},
	"--add-dir":                                  {"add-dir", fakecli.Value},
	"-C":                                         {"cd", fakecli.Value}, "--cd": {"cd", fakecli.Value},
	"--ephemeral": {"ephemeral", fakecli.Bool},
	"-o":          {"output-last", fakecli.Value}, "--output-last-message": {"output-last", fakecli.Value},
	"--last": {"last", fakecli.Bool},
	"-V":     {"version", fakecli.Bool}, "--version": {"version", fakecli.Bool},
	"-h": {"help", fakecli.Bool}, "--help": {"help", fakecli.Bool},
}

func main() {
	fakecli.MaybeHold()
	fakecli.Record()
	p, err := fakecli.Parse(spec, os.Args[1:])
	if err != nil {
		fakecli.Fail(2, "%v", strings.Replace(err.Error(), "unknown option", "unexpected argument", 1))
	}
	if p.Has("version") {
		v := os.Getenv(fakecli.EnvVersion)
		if v == "" {
			v = defaultVersion
		}
		fmt.Println(v)
		return
	}
	if len(p.Args) == 0 || p.Args[0] != "exec" {
		fakecli.Fail(2, "fakecodex: only `codex exec` is implemented")
	}
	args := p.Args[1:]
	resume := ""
	if len(args) > 0 && args[0] == "resume" {
		// resume's own options: no --sandbox, --add-dir or --cd.
		for _, o := range []string{"sandbox", "add-dir", "cd"} {
			if p.Has(o) && afterResume(o) {
				fakecli.Fail(2, "error: unexpected argument '--%s' found", o)
			}
		}
		if len(args) < 2 {
			fakecli.Fail(2, "error: a session id or --last is required")
		}
		resume, args = args[1], args[2:]
	}
	if sb := p.Get("sandbox"); p.Has("sandbox") && sb != "read-only" && sb != "workspace-write" && sb != "danger-full-access" {
		fakecli.Fail(2, "error: invalid value '%s' for '--sandbox <SANDBOX_MODE>'\n  [possible values: read-only, workspace-write, danger-full-access]", sb)
	}
	if p.Has("bypass") && p.Has("sandbox") {
		fakecli.Fail(2, "error: the argument '--dangerously-bypass-approvals-and-sandbox' cannot be used with '--sandbox <SANDBOX_MODE>'")
	}
	cfg := map[string]string{}
	for _, kv := range p.Flags["config"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			fakecli.Fail(2, "error: invalid value '%s' for '--config <key=value>': expected key=value", kv)
		}
		cfg[k] = tomlValue(v)
	}
	for _, d := range p.Flags["add-dir"] {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			fakecli.Fail(1, "Error: --add-dir %s: not a directory", d)
		}
	}
	if len(args) > 1 {
		fakecli.Fail(2, "error: unexpected argument '%s' found", args[1])
	}
	prompt := ""
	if len(args) == 1 {
		prompt = args[0]
	}
	if prompt == "" {
		fakecli.Fail(1, "No prompt provided. Either specify one as an argument or pipe the prompt into stdin.")
	}
	provider := cfg["model_provider"]
	var base, keyEnv string
	if provider != "" && provider != "openai" {
		base = cfg["model_providers."+provider+".base_url"]
		keyEnv = cfg["model_providers."+provider+".env_key"]
		if base == "" {
			fakecli.Fail(1, "Error loading config.toml: model provider `%s` not found", provider)
		}
		if w := cfg["model_providers."+provider+".wire_api"]; w != "" && w != "responses" {
			fakecli.Fail(1, "Error loading config.toml: unknown variant `%s`, expected `responses`", w)
		}
	} else if !loggedIn() {
		fakecli.Fail(1, "Not logged in. Run `codex login` or set OPENAI_API_KEY.")
	}
	scen := fakecli.Scenarios("fakecodex", func(string) bool { return true })
	run(p, prompt, resume, base, keyEnv, scen)
}

// afterResume reports whether option o was given after the resume word
// (resume does not take it; before it, exec does).
func afterResume(o string) bool {
	seen := false
	for _, a := range os.Args[1:] {
		if a == "--" {
			return false
		}
		if a == "resume" {
			seen = true
		}
		if seen && (a == "--"+o || strings.HasPrefix(a, "--"+o+"=") || o == "sandbox" && a == "-s" || o == "cd" && a == "-C") {
			return true
		}
	}
	return false
}

// tomlValue reads a -c value: a TOML string when quoted, else the raw text.
func tomlValue(v string) string {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		var s string
		if json.Unmarshal([]byte(v), &s) == nil {
			return s
		}
	}
	return v
}

func loggedIn() bool {
	if os.Getenv("OPENAI_API_KEY") != "" || os.Getenv("CODEX_API_KEY") != "" {
		return true
	}
	home := os.Getenv("CODEX_HOME")
	if home == "" {
		h, _ := os.UserHomeDir()
		home = filepath.Join(h, ".codex")
	}
	_, err := os.Stat(filepath.Join(home, "auth.json"))
	return err == nil
}

type session struct {
	out        fakecli.Emitter
	n          int
	in, cached int
	outTok     int
}

func (s *session) item(phase string, it map[string]any) {
	s.out.Emit(map[string]any{"type": "item." + phase, "item": it})
}

func (s *session) id() string {
	id := "item_" + strconv.Itoa(s.n)
	s.n++
	return id
}

func (s *session) message(text string) {
	s.in += fakecli.Tokens(100)
	s.cached += 20
	s.outTok += len(strings.Fields(text)) + 1
	s.item("completed", map[string]any{"id": s.id(), "type": "agent_message", "text": text})
}

func (s *session) command(cmd, output string, code int) {
	id := s.id()
	s.item("started", map[string]any{"id": id, "type": "command_execution", "command": cmd, "aggregated_output": "", "exit_code": nil, "status": "in_progress"})
	st := "completed"
	if code != 0 {
		st = "failed"
	}
	s.item("completed", map[string]any{"id": id, "type": "command_execution", "command": cmd, "aggregated_output": output, "exit_code": code, "status": st})
}

func (s *session) completed() {
	s.out.Emit(map[string]any{"type": "turn.completed", "usage": map[string]any{"input_tokens": s.in, "cached_input_tokens": s.cached,
		"cache_write_input_tokens": 0, "output_tokens": s.outTok, "reasoning_output_tokens": 0}})
}

func (s *session) failed(msg string) {
	s.out.Emit(map[string]any{"type": "error", "message": msg})
	s.out.Emit(map[string]any{"type": "turn.failed", "error": map[string]any{"message": msg}})
}

func run(p fakecli.Parsed, prompt, resume, base, keyEnv string, scen map[string]bool) {
	s := &session{out: fakecli.Emitter{W: os.Stdout}}
	thread := resume
	if thread == "" {
		thread = fakecli.UUID()
	}
	s.out.Emit(map[string]any{"type": "thread.started", "thread_id": thread})
	if m := p.Get("model"); m != "" && base != "" {
		s.item("completed", map[string]any{"id": s.id(), "type": "error", "message": "Model metadata for `" + m + "` not found. Defaulting to fallback metadata; this can degrade performance and cause issues."})
	}
	s.out.Emit(map[string]any{"type": "turn.started"})
	if scen["api_error"] {
		for i := 1; i <= 2; i++ {
			s.out.Emit(map[string]any{"type": "error", "message": fmt.Sprintf("Reconnecting... %d/2 (unexpected status 503 Service Unavailable)", i)})
		}
		s.failed("unexpected status 503 Service Unavailable")
		os.Exit(1)
	}
	if scen["call_api"] {
		text, err := callResponses(base, keyEnv, prompt)
		if err != nil {
			s.failed(err.Error())
			os.Exit(1)
		}
		s.message(text)
		s.completed()
		return
	}
	if scen["crash"] {
		fmt.Println(`{"type":"item.started",`)
		fmt.Fprintln(os.Stderr, "fakecodex: crashed")
		os.Exit(2)
	}
	if scen["edit_file"] {
		path, content := fakecli.EditTarget("fakecodex")
		if err := fakecli.WriteFile(path, content); err != nil {
			s.command("/bin/bash -lc 'cat > "+filepath.Base(path)+"'", err.Error(), 1)
		} else {
			id := s.id()
			s.item("completed", map[string]any{"id": id, "type": "file_change", "changes": []any{map[string]any{"path": path, "kind": "add"}}, "status": "completed"})
		}
	}
	if scen["fetch"] {
		url := os.Getenv(fakecli.EnvURL)
		report, ok := fakecli.Fetch(url)
		code := 0
		if !ok {
			code = 7
		}
		s.command("/bin/bash -lc 'curl -sS "+url+"'", report, code)
	}
	if scen["sleep"] {
		fakecli.Sleep()
	}
	final := os.Getenv(fakecli.EnvText)
	if final == "" {
		final = "Done."
	}
	if resume != "" {
		final += " (resumed " + resume + ")"
	}
	s.message(final)
	switch {
	case scen["no_result"]:
		os.Exit(0)
	case scen["is_error_exit0"]:
		msg := os.Getenv(fakecli.EnvErrorText)
		if msg == "" {
			msg = "stream disconnected before completion: rate limit reached"
		}
		s.failed(msg)
		os.Exit(0)
	case scen["success_then_exit1"]:
		s.completed()
		fmt.Fprintln(os.Stderr, "fakecodex: failed after the result")
		os.Exit(1)
	case scen["hang_after_result"]:
		s.completed()
		fakecli.Hang()
		os.Exit(0)
	case scen["error_then_hang"]:
		s.failed("usage limit reached")
		fakecli.Hang()
		os.Exit(1)
	case scen["two_results"]:
		s.completed()
		s.completed()
		os.Exit(0)
	}
	s.completed()
}

// callResponses posts one streamed Responses API request and returns the
// text of its output_text deltas. It never calls the real API.
func callResponses(base, keyEnv, prompt string) (string, error) {
	if base == "" {
		return "", fmt.Errorf("no custom model provider base_url (the fake never calls the real API)")
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-fake-1", "stream": true, "input": []any{map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": prompt}}}}})
	req, err := http.NewRequest("POST", strings.TrimRight(base, "/")+"/responses", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("content-type", "application/json")
	if keyEnv != "" {
		k := os.Getenv(keyEnv)
		if k == "" {
			return "", fmt.Errorf("Missing environment variable: `%s`.", keyEnv)
		}
		req.Header.Set("authorization", "Bearer "+k)
	}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("stream disconnected before completion: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return "", fmt.Errorf("unexpected status %d %s: %s", resp.StatusCode, http.StatusText(resp.StatusCode), strings.TrimSpace(string(b)))
	}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) == nil && ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	return text.String(), sc.Err()
}
