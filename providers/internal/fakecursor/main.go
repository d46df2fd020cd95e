// Command fakecursor behaves like Cursor's agent CLI (`agent`, formerly
// `cursor-agent`) in print mode for kusaw's tests: it checks argv as the
// real one does (unknown options, --trust required headless, --sandbox
// enabled|disabled, login required), prints a stream-json session in the
// real shape, and does what FAKE_AGENT_SCENARIO asks (see fakecli.Known;
// call_api is not offered: Cursor cannot be pointed at another endpoint).
package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kusaw/kusaw/providers/internal/fakecli"
)

const defaultVersion = "2025.11.25-fake01"

var spec = fakecli.Spec{
	"-p": {"print", fakecli.Bool}, "--print": {"print", fakecli.Bool},
	"--output-format":         {"output-format", fakecli.Value},
	"--stream-partial-output": {"partial", fakecli.Bool},
	"-f":                      {"force", fakecli.Bool}, "--force": {"force", fakecli.Bool}, "--yolo": {"force", fakecli.Bool},
	"--trust":        {"trust", fakecli.Bool},
	"--sandbox":      {"sandbox", fakecli.Value},
	"--approve-mcps": {"approve-mcps", fakecli.Bool},
	"--workspace":    {"workspace", fakecli.Value},
	"--model":        {"model", fakecli.Value},
	"--mode":         {"mode", fakecli.Value},
	"--plan":         {"plan", fakecli.Bool},
	"--api-key":      {"api-key", fakecli.Value},
	"-H":             {"header", fakecli.Value}, "--header": {"header", fakecli.Value},
	"--add-dir": {"add-dir", fakecli.Value},
	"-e":        {"endpoint", fakecli.Value}, "--endpoint": {"endpoint", fakecli.Value},
	"--resume":   {"resume", fakecli.Optional},
	"--continue": {"continue", fakecli.Bool},
	"-v":         {"version", fakecli.Bool}, "--version": {"version", fakecli.Bool},
	"-h": {"help", fakecli.Bool}, "--help": {"help", fakecli.Bool},
}

func main() {
	fakecli.MaybeHold()
	fakecli.Record()
	p, err := fakecli.Parse(spec, os.Args[1:])
	if err != nil {
		fakecli.Fail(1, "%v", err)
	}
	if p.Has("version") {
		v := os.Getenv(fakecli.EnvVersion)
		if v == "" {
			v = defaultVersion
		}
		fmt.Println(v)
		return
	}
	if p.Has("help") {
		fmt.Println("Usage: agent [options] [command] [prompt...]  (kusaw's fake)")
		return
	}
	if !p.Has("print") {
		fakecli.Fail(1, "fakecursor: only print mode (-p) is implemented")
	}
	format := p.Get("output-format")
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" && format != "stream-json" {
		fakecli.Fail(1, "error: option '--output-format <format>' argument '%s' is invalid. Allowed choices are text, json, stream-json.", format)
	}
	if sb := p.Get("sandbox"); p.Has("sandbox") && sb != "enabled" && sb != "disabled" {
		fakecli.Fail(1, "error: option '--sandbox <mode>' argument '%s' is invalid. Allowed choices are enabled, disabled.", sb)
	}
	// Today's CLI takes --force (-f, --yolo) as trust of the workspace too.
	if !p.Has("trust") && !p.Has("force") {
		fakecli.Fail(1, "Workspace Trust Required: pass --trust to trust this workspace in print mode")
	}
	if ws := p.Get("workspace"); ws != "" {
		if err := os.Chdir(ws); err != nil {
			fakecli.Fail(1, "Error: workspace %s: %v", ws, err)
		}
	}
	for _, d := range p.Flags["add-dir"] {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			fakecli.Fail(1, "Error: --add-dir %s: not a directory", d)
		}
	}
	prompt := strings.Join(p.Args, " ")
	if prompt == "" {
		fakecli.Fail(1, "Error: No prompt provided for print mode")
	}
	keySource, ok := loggedIn(p.Get("api-key"))
	if !ok {
		// The real CLI writes its error to stderr and emits no stream.
		fakecli.Fail(1, "Error: Authentication required. Please run 'agent login' first, or set CURSOR_API_KEY environment variable.")
	}
	scen := fakecli.Scenarios("fakecursor", func(n string) bool { return n != "call_api" })
	endpoint := p.Get("endpoint")
	if endpoint == "" {
		endpoint = os.Getenv("CURSOR_API_ENDPOINT")
	}
	run(format, keySource, p.Has("force"), p.Has("partial"), prompt, endpoint, scen)
}

func loggedIn(flagKey string) (string, bool) {
	if flagKey != "" {
		return "flag", true
	}
	if os.Getenv("CURSOR_API_KEY") != "" {
		return "env", true
	}
	var dirs []string
	if d := os.Getenv("CURSOR_CONFIG_DIR"); d != "" {
		dirs = append(dirs, d)
	} else {
		home, _ := os.UserHomeDir()
		x := os.Getenv("XDG_CONFIG_HOME")
		if x == "" {
			x = filepath.Join(home, ".config")
		}
		dirs = append(dirs, filepath.Join(x, "cursor"), filepath.Join(home, ".cursor"))
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "auth.json")); err == nil {
			return "login", true
		}
	}
	return "", false
}

type session struct {
	out           fakecli.Emitter
	id            string
	format        string
	partial       bool
	texts         []string
	started       time.Time
	inTok, outTok int // tokens used so far
}

func (s *session) emit(v map[string]any) {
	if s.format == "stream-json" {
		v["session_id"] = s.id
		s.out.Emit(v)
	}
}

func (s *session) text(t string) {
	s.texts = append(s.texts, t)
	s.inTok += fakecli.Tokens(40)
	s.outTok += len(strings.Fields(t)) + 1
	if s.partial {
		// With --stream-partial-output each chunk is its own event.
		for _, w := range strings.SplitAfter(t, " ") {
			s.emit(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": w}}}, "timestamp_ms": time.Now().UnixMilli()})
		}
	}
	s.emit(map[string]any{"type": "assistant", "message": map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "text", "text": t}}}})
}

// think emits a thinking phase as the real CLI does: deltas, then
// completed.
func (s *session) think(t string) {
	for _, w := range strings.SplitAfter(t, " ") {
		s.emit(map[string]any{"type": "thinking", "subtype": "delta", "text": w, "timestamp_ms": time.Now().UnixMilli()})
	}
	s.emit(map[string]any{"type": "thinking", "subtype": "completed", "timestamp_ms": time.Now().UnixMilli()})
}

// tool emits a tool call's started and completed events with the keys
// today's CLI adds: toolCallId in the args, and the call's own
// bookkeeping beside it.
func (s *session) tool(kind string, args map[string]any, result map[string]any) {
	id := fakecli.ID("call_")
	args["toolCallId"] = id
	started := time.Now().UnixMilli()
	s.emit(map[string]any{"type": "tool_call", "subtype": "started", "call_id": id, "model_call_id": s.id + "-1", "timestamp_ms": started,
		"tool_call": map[string]any{kind: map[string]any{"args": args}, "startedAtMs": started, "toolCallId": id}})
	s.emit(map[string]any{"type": "tool_call", "subtype": "completed", "call_id": id, "model_call_id": s.id + "-1", "timestamp_ms": time.Now().UnixMilli(),
		"tool_call": map[string]any{kind: map[string]any{"args": args, "result": result}, "startedAtMs": started, "toolCallId": id}})
}

func (s *session) result(isErr bool, text string) {
	d := time.Since(s.started).Milliseconds() + 1
	r := map[string]any{"type": "result", "subtype": "success", "duration_ms": d, "duration_api_ms": d,
		"is_error": isErr, "result": text, "request_id": fakecli.UUID(),
		"usage": map[string]any{"inputTokens": s.inTok, "outputTokens": s.outTok, "cacheReadTokens": 0, "cacheWriteTokens": 0}}
	switch s.format {
	case "stream-json":
		s.emit(r)
	case "json":
		r["session_id"] = s.id
		s.out.Emit(r)
	default:
		fmt.Println(text)
	}
}

func run(format, keySource string, force, partial bool, prompt, endpoint string, scen map[string]bool) {
	s := &session{out: fakecli.Emitter{W: os.Stdout}, id: fakecli.UUID(), format: format, partial: partial, started: time.Now()}
	wd, _ := os.Getwd()
	s.emit(map[string]any{"type": "system", "subtype": "init", "apiKeySource": keySource, "cwd": wd, "model": "Fake 1", "permissionMode": "default"})
	s.emit(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": prompt}}}})
	if scen["api_error"] {
		// The real CLI fails this way: no result, the error on stderr.
		fakecli.Fail(1, "Error: [unavailable] The service is temporarily unavailable")
	}
	if endpoint != "" {
		if err := agentStream(endpoint); err != nil {
			fakecli.Fail(1, "Error: [unavailable] %v", err)
		}
	}
	if scen["crash"] {
		fmt.Println(`{"type":"tool_call","subtype":"started",`)
		fmt.Fprintln(os.Stderr, "fakecursor: crashed")
		os.Exit(2)
	}
	s.think("The user wants a change. I will look first.")
	s.text("Working on it.")
	if scen["mcp"] {
		s.tool("mcpToolCall", map[string]any{"name": "docs-search", "toolName": "search", "providerIdentifier": "docs", "args": map[string]any{"q": "limits"}},
			map[string]any{"success": map[string]any{"content": []any{map[string]any{"text": map[string]any{"text": "3 hits"}}}, "isError": false}})
	}
	if scen["edit_file"] {
		path, content := fakecli.EditTarget("fakecursor")
		args := map[string]any{"path": path, "fileText": content}
		switch err := fakecli.WriteFile(path, content); {
		case err != nil:
			s.tool("writeToolCall", args, map[string]any{"error": map[string]any{"message": err.Error()}})
		default:
			s.tool("writeToolCall", args, map[string]any{"success": map[string]any{"path": path, "linesCreated": strings.Count(content, "\n"), "fileSize": len(content)}})
		}
	}
	if scen["fetch"] {
		url := os.Getenv(fakecli.EnvURL)
		args := map[string]any{"command": "curl -sS " + url}
		if !force {
			// Without --force a shell command needs an approval nobody can give.
			s.tool("shellToolCall", args, map[string]any{"rejected": map[string]any{"reason": "approval required (use --force)"}})
		} else if report, ok := fakecli.Fetch(url); ok {
			s.tool("shellToolCall", args, map[string]any{"success": map[string]any{"stdout": report, "exitCode": 0}})
		} else {
			s.tool("shellToolCall", args, map[string]any{"failure": map[string]any{"stderr": report, "exitCode": 7}})
		}
	}
	if scen["sleep"] {
		fakecli.Sleep()
	}
	final := os.Getenv(fakecli.EnvText)
	if final == "" {
		final = "Done."
	}
	s.text(final)
	switch {
	case scen["no_result"]:
		os.Exit(0)
	case scen["is_error_exit0"]:
		s.result(true, "Error: rate limited, try again later")
		os.Exit(0)
	case scen["success_then_exit1"]:
		s.result(false, final)
		fmt.Fprintln(os.Stderr, "fakecursor: failed after the result")
		os.Exit(1)
	case scen["hang_after_result"]:
		// Cursor's print mode is known to do this.
		s.result(false, strings.Join(s.texts, ""))
		fakecli.Hang()
		os.Exit(0)
	case scen["error_then_hang"]:
		s.result(true, "Error: usage limit reached")
		fakecli.Hang()
		os.Exit(1)
	case scen["two_results"]:
		s.result(false, final)
		s.result(false, final)
		os.Exit(0)
	}
	s.result(false, strings.Join(s.texts, ""))
}

// agentStream stands for the CLI's agent connection to the endpoint. Like
// the real CLI's HTTP/2 stream, it ignores HTTPS_PROXY unless its config
// says network.useHttp1ForAgent; then it goes through the proxy (even to
// a loopback name, since the proxy is the only way out of a sandbox).
func agentStream(endpoint string) error {
	tr := &http.Transport{Proxy: nil}
	if http1ForAgent() {
		for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
			if v := os.Getenv(k); v != "" {
				u, err := url.Parse(v)
				if err != nil {
					return err
				}
				tr.Proxy = http.ProxyURL(u)
				break
			}
		}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	resp, err := c.Post(strings.TrimRight(endpoint, "/")+"/agent.v1.AgentService/Run", "application/json", strings.NewReader("{}"))
	if err != nil {
		return fmt.Errorf("agent stream: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("agent stream: %s", resp.Status)
	}
	return nil
}

// http1ForAgent reads network.useHttp1ForAgent from cli-config.json where
// the CLI looks for it: CURSOR_CONFIG_DIR, XDG_CONFIG_HOME/cursor, ~/.cursor.
func http1ForAgent() bool {
	var dirs []string
	if d := os.Getenv("CURSOR_CONFIG_DIR"); d != "" {
		dirs = append(dirs, d)
	} else {
		if x := os.Getenv("XDG_CONFIG_HOME"); x != "" {
			dirs = append(dirs, filepath.Join(x, "cursor"))
		}
		home, _ := os.UserHomeDir()
		dirs = append(dirs, filepath.Join(home, ".cursor"))
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cli-config.json"))
		if err != nil {
			continue
		}
		var cfg struct {
			Network struct {
				UseHTTP1ForAgent bool `json:"useHttp1ForAgent"`
			} `json:"network"`
		}
		_ = json.Unmarshal(b, &cfg)
		return cfg.Network.UseHTTP1ForAgent
	}
	return false
}
