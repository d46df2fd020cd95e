// Command fakegemini behaves like Google's Gemini CLI in non-interactive
// mode for kusaw's tests: it checks argv as the real one does, refuses an
// untrusted folder without --skip-trust (exit 55) and a key without the
// gemini-api-key auth type in its settings (exit 41), prints stream-json
// in the real shape (init, message deltas, tool_use/tool_result, result
// with stats) and does what FAKE_AGENT_SCENARIO asks (fakecli.Known).
// call_api posts to GOOGLE_GEMINI_BASE_URL's streamGenerateContent with
// GEMINI_API_KEY as x-goog-api-key.
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
	"strings"
	"time"

	"github.com/kusaw/kusaw/providers/internal/fakecli"
)

const defaultVersion = "0.61.0"

var spec = fakecli.Spec{
	"-p": {"prompt", fakecli.Value}, "--prompt": {"prompt", fakecli.Value},
	"-o": {"output-format", fakecli.Value}, "--output-format": {"output-format", fakecli.Value},
	"-y": {"yolo", fakecli.Bool}, "--yolo": {"yolo", fakecli.Bool},
	"--approval-mode": {"approval-mode", fakecli.Value},
	"--skip-trust":    {"skip-trust", fakecli.Bool},
	"-s":              {"sandbox", fakecli.Bool}, "--sandbox": {"sandbox", fakecli.Bool},
	"--include-directories": {"include", fakecli.Value},
	"-m":                    {"model", fakecli.Value}, "--model": {"model", fakecli.Value},
	"-r": {"resume", fakecli.Value}, "--resume": {"resume", fakecli.Value},
	"-v": {"version", fakecli.Bool}, "--version": {"version", fakecli.Bool},
	"-h": {"help", fakecli.Bool}, "--help": {"help", fakecli.Bool},
}

func main() {
	fakecli.MaybeHold()
	fakecli.Record()
	p, err := fakecli.Parse(spec, os.Args[1:])
	if err != nil {
		fakecli.Fail(1, "%s", strings.Replace(err.Error(), "error: unknown option", "Unknown argument:", 1))
	}
	if p.Has("version") {
		v := os.Getenv(fakecli.EnvVersion)
		if v == "" {
			v = defaultVersion
		}
		fmt.Println(v)
		return
	}
	if !p.Has("prompt") {
		fakecli.Fail(1, "fakegemini: only the non-interactive mode (-p) is implemented")
	}
	prompt := p.Get("prompt")
	format := p.Get("output-format")
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" && format != "stream-json" {
		fakecli.Fail(1, "Invalid values:\n  Argument: output-format, Given: %q, Choices: \"text\", \"json\", \"stream-json\"", format)
	}
	if m := p.Get("approval-mode"); p.Has("approval-mode") && m != "default" && m != "auto_edit" && m != "yolo" && m != "plan" {
		fakecli.Fail(1, "Invalid values:\n  Argument: approval-mode, Given: %q, Choices: \"default\", \"auto_edit\", \"yolo\", \"plan\"", m)
	}
	if p.Has("yolo") && p.Has("approval-mode") {
		fakecli.Fail(1, "Cannot use both --yolo (-y) and --approval-mode together. Use --approval-mode=yolo instead.")
	}
	for _, d := range p.Flags["include"] {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			fakecli.Fail(1, "Error: --include-directories %s: not a directory", d)
		}
	}
	if !p.Has("skip-trust") && os.Getenv("GEMINI_CLI_TRUST_WORKSPACE") != "true" {
		fakecli.Fail(55, "Gemini CLI is not running in a trusted directory. To proceed, either use `--skip-trust`, set the `GEMINI_CLI_TRUST_WORKSPACE=true` environment variable, or trust this directory in interactive mode.")
	}
	if !loggedIn() {
		fakecli.Fail(41, "Please set an Auth method in your settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA")
	}
	scen := fakecli.Scenarios("fakegemini", func(string) bool { return true })
	run(format, prompt, p.Get("resume"), p.Get("model"), p.Has("yolo") || p.Get("approval-mode") == "yolo", scen)
}

// settings merges the system settings over the user's, as the CLI does.
func settings() map[string]any {
	home := os.Getenv("GEMINI_CLI_HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	out := map[string]any{}
	for _, f := range []string{filepath.Join(home, ".gemini", "settings.json"), os.Getenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH")} {
		if f == "" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var m map[string]any
		if json.Unmarshal(b, &m) == nil {
			merge(out, m)
		}
	}
	return out
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				merge(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

func loggedIn() bool {
	s := settings()
	sec, _ := s["security"].(map[string]any)
	auth, _ := sec["auth"].(map[string]any)
	switch auth["selectedType"] {
	case "gemini-api-key":
		return os.Getenv("GEMINI_API_KEY") != "" || os.Getenv("GOOGLE_API_KEY") != ""
	case "oauth-personal":
		home := os.Getenv("GEMINI_CLI_HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		_, err := os.Stat(filepath.Join(home, ".gemini", "oauth_creds.json"))
		return err == nil
	}
	return false
}

type session struct {
	out    fakecli.Emitter
	format string
	id     string
	model  string
	start  time.Time
	in     int
	outTok int
	tools  int
	texts  []string
}

func now() string { return time.Now().UTC().Format("2006-01-02T15:04:05.000Z") }

func (s *session) emit(v map[string]any) {
	if s.format == "stream-json" {
		v["timestamp"] = now()
		s.out.Emit(v)
	}
}

func (s *session) text(t string) {
	s.in += fakecli.Tokens(100)
	s.outTok += len(strings.Fields(t)) + 1
	s.texts = append(s.texts, t)
	for _, w := range strings.SplitAfter(t, " ") {
		s.emit(map[string]any{"type": "message", "role": "assistant", "content": w, "delta": true})
	}
}

func (s *session) tool(name string, params map[string]any, ok bool, errMsg string) {
	s.tools++
	id := fmt.Sprintf("%s__%s_%d_0", name, name, time.Now().UnixMilli())
	s.emit(map[string]any{"type": "tool_use", "tool_name": name, "tool_id": id, "parameters": params})
	r := map[string]any{"type": "tool_result", "tool_id": id, "status": "success"}
	if !ok {
		r["status"] = "error"
		r["error"] = map[string]any{"type": "execution_failed", "message": errMsg}
	}
	s.emit(r)
}

func (s *session) stats() map[string]any {
	cached := s.in / 5
	m := map[string]any{"total_tokens": s.in + s.outTok, "input_tokens": s.in, "output_tokens": s.outTok, "cached": cached, "input": s.in - cached}
	out := map[string]any{"duration_ms": time.Since(s.start).Milliseconds() + 1, "tool_calls": s.tools, "models": map[string]any{s.model: m}}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (s *session) result(errMsg string) {
	r := map[string]any{"type": "result", "status": "success", "stats": s.stats()}
	if errMsg != "" {
		r["status"] = "error"
		r["error"] = map[string]any{"type": "unknown", "message": errMsg}
	}
	switch s.format {
	case "stream-json":
		s.emit(r)
	case "json":
		s.out.Emit(map[string]any{"session_id": s.id, "response": strings.Join(s.texts, ""), "stats": r["stats"]})
	default:
		fmt.Println(strings.Join(s.texts, ""))
	}
}

func run(format, prompt, resume, model string, yolo bool, scen map[string]bool) {
	if model == "" {
		model = "gemini-fake-1"
	}
	s := &session{out: fakecli.Emitter{W: os.Stdout}, format: format, id: resume, model: model, start: time.Now()}
	if s.id == "" {
		s.id = fakecli.UUID()
	}
	s.emit(map[string]any{"type": "init", "session_id": s.id, "model": model})
	s.emit(map[string]any{"type": "message", "role": "user", "content": prompt})
	if scen["api_error"] {
		s.result("[API Error: got status: UNAVAILABLE. The model is overloaded. Please try again later.]")
		fmt.Fprintln(os.Stderr, "Error when talking to Gemini API: 503 UNAVAILABLE")
		os.Exit(1)
	}
	if scen["call_api"] {
		text, err := callAPI(model, prompt)
		if err != nil {
			s.result("[API Error: " + err.Error() + "]")
			os.Exit(1)
		}
		s.text(text)
		s.result("")
		return
	}
	if scen["crash"] {
		fmt.Println(`{"type":"tool_use",`)
		fmt.Fprintln(os.Stderr, "fakegemini: crashed")
		os.Exit(2)
	}
	if scen["edit_file"] {
		path, content := fakecli.EditTarget("fakegemini")
		err := fakecli.WriteFile(path, content)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		s.tool("write_file", map[string]any{"file_path": path, "content": content}, err == nil, msg)
	}
	if scen["fetch"] {
		url := os.Getenv(fakecli.EnvURL)
		params := map[string]any{"command": "curl -sS " + url}
		if !yolo {
			// Outside yolo a shell command needs an approval nobody gives.
			s.tool("run_shell_command", params, false, "Tool execution denied by policy.")
		} else {
			report, ok := fakecli.Fetch(url)
			s.tool("run_shell_command", params, ok, report)
		}
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
	s.text(final)
	switch {
	case scen["no_result"]:
		os.Exit(0)
	case scen["is_error_exit0"]:
		msg := os.Getenv(fakecli.EnvErrorText)
		if msg == "" {
			msg = "[API Error: You exceeded your current quota (429 RESOURCE_EXHAUSTED)]"
		}
		s.result(msg)
		os.Exit(0)
	case scen["success_then_exit1"]:
		s.result("")
		fmt.Fprintln(os.Stderr, "fakegemini: failed after the result")
		os.Exit(1)
	case scen["hang_after_result"]:
		s.result("")
		fakecli.Hang()
		os.Exit(0)
	case scen["error_then_hang"]:
		s.result("usage limit reached")
		fakecli.Hang()
		os.Exit(1)
	case scen["two_results"]:
		s.result("")
		s.result("")
		os.Exit(0)
	}
	s.result("")
}

// callAPI posts one streamGenerateContent request and returns the text of
// its parts. It never calls the real API.
func callAPI(model, prompt string) (string, error) {
	base := strings.TrimRight(os.Getenv("GOOGLE_GEMINI_BASE_URL"), "/")
	if base == "" {
		return "", fmt.Errorf("GOOGLE_GEMINI_BASE_URL is not set (the fake never calls the real API)")
	}
	body, _ := json.Marshal(map[string]any{"contents": []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": prompt}}}}})
	req, err := http.NewRequest("POST", base+"/v1beta/models/"+model+":streamGenerateContent?alt=sse", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-goog-api-key", os.Getenv("GEMINI_API_KEY"))
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment}}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return "", fmt.Errorf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
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
			Candidates []struct {
				Content struct {
					Parts []struct {
						Text string `json:"text"`
					} `json:"parts"`
				} `json:"content"`
			} `json:"candidates"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) == nil {
			for _, c := range ev.Candidates {
				for _, p := range c.Content.Parts {
					text.WriteString(p.Text)
				}
			}
		}
	}
	return text.String(), sc.Err()
}
