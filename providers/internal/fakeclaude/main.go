// Command fakeclaude behaves like Claude Code's CLI in print mode for
// kusaw's tests: it checks argv as the real one does (unknown options,
// stream-json needs --verbose, bypassPermissions refused for root outside
// a sandbox, login required), prints a stream-json session in the real
// shape, and does what FAKE_AGENT_SCENARIO asks (see fakecli.Known).
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/providers/internal/fakecli"
)

const defaultVersion = "2.1.332"

var spec = fakecli.Spec{
	"-p": {"print", fakecli.Bool}, "--print": {"print", fakecli.Bool},
	"--verbose":                            {"verbose", fakecli.Bool},
	"--output-format":                      {"output-format", fakecli.Value},
	"--input-format":                       {"input-format", fakecli.Value},
	"--permission-mode":                    {"permission-mode", fakecli.Value},
	"--dangerously-skip-permissions":       {"skip-permissions", fakecli.Bool},
	"--allow-dangerously-skip-permissions": {"allow-skip-permissions", fakecli.Bool},
	"--add-dir":                            {"add-dir", fakecli.Variadic},
	"--settings":                           {"settings", fakecli.Value},
	"--setting-sources":                    {"setting-sources", fakecli.Value},
	"--model":                              {"model", fakecli.Value},
	"--fallback-model":                     {"fallback-model", fakecli.Value},
	"--append-system-prompt":               {"append-system-prompt", fakecli.Value},
	"--system-prompt":                      {"system-prompt", fakecli.Value},
	"--allowedTools":                       {"allowed-tools", fakecli.Variadic},
	"--allowed-tools":                      {"allowed-tools", fakecli.Variadic},
	"--disallowedTools":                    {"disallowed-tools", fakecli.Variadic},
	"--disallowed-tools":                   {"disallowed-tools", fakecli.Variadic},
	"--tools":                              {"tools", fakecli.Variadic},
	"--mcp-config":                         {"mcp-config", fakecli.Variadic},
	"--strict-mcp-config":                  {"strict-mcp-config", fakecli.Bool},
	"--session-id":                         {"session-id", fakecli.Value},
	"-r":                                   {"resume", fakecli.Optional}, "--resume": {"resume", fakecli.Optional},
	"-c": {"continue", fakecli.Bool}, "--continue": {"continue", fakecli.Bool},
	"--max-turns":                {"max-turns", fakecli.Value},
	"--max-budget-usd":           {"max-budget-usd", fakecli.Value},
	"--effort":                   {"effort", fakecli.Value},
	"--include-partial-messages": {"partial", fakecli.Bool},
	"--no-session-persistence":   {"no-session-persistence", fakecli.Bool},
	"-d":                         {"debug", fakecli.Optional}, "--debug": {"debug", fakecli.Optional},
	"-v": {"version", fakecli.Bool}, "--version": {"version", fakecli.Bool},
	"-h": {"help", fakecli.Bool}, "--help": {"help", fakecli.Bool},
}

var permissionModes = map[string]bool{"acceptEdits": true, "auto": true, "bypassPermissions": true, "default": true, "dontAsk": true, "plan": true, "manual": true}

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
		fmt.Printf("%s (Claude Code)\n", v)
		return
	}
	if p.Has("help") {
		fmt.Println("Usage: claude [options] [command] [prompt]  (kusaw's fake)")
		return
	}
	if !p.Has("print") {
		fakecli.Fail(1, "fakeclaude: only print mode (-p) is implemented")
	}
	format := p.Get("output-format")
	if format == "" {
		format = "text"
	}
	if format != "text" && format != "json" && format != "stream-json" {
		fakecli.Fail(1, "error: option '--output-format <format>' argument '%s' is invalid. Allowed choices are text, json, stream-json.", format)
	}
	if format == "stream-json" && !p.Has("verbose") {
		fakecli.Fail(1, "Error: When using --print, --output-format=stream-json requires --verbose")
	}
	mode := p.Get("permission-mode")
	if mode == "" {
		mode = "default"
	}
	if !permissionModes[mode] {
		fakecli.Fail(1, "error: option '--permission-mode <mode>' argument '%s' is invalid. Allowed choices are acceptEdits, auto, bypassPermissions, default, dontAsk, plan.", mode)
	}
	if p.Has("skip-permissions") {
		mode = "bypassPermissions"
	}
	if mode == "bypassPermissions" && os.Geteuid() == 0 && os.Getenv("IS_SANDBOX") != "1" {
		fakecli.Fail(1, "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons")
	}
	for _, s := range p.Flags["settings"] {
		if err := checkSettings(s); err != nil {
			fakecli.Fail(1, "Error: %v", err)
		}
	}
	for _, d := range p.Flags["add-dir"] {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			fakecli.Fail(1, "Error: --add-dir %s is not a directory", d)
		}
	}
	prompt := strings.Join(p.Args, " ")
	if prompt == "" {
		if fi, _ := os.Stdin.Stat(); fi != nil && fi.Mode()&os.ModeCharDevice == 0 {
			b, _ := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
			prompt = strings.TrimSpace(string(b))
		}
	}
	if prompt == "" {
		fakecli.Fail(1, "Error: Input must be provided either through stdin or as a prompt argument when using --print")
	}
	if v := p.Get("max-turns"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fakecli.Fail(1, "Error: --max-turns must be a positive number")
		}
		maxTurns = n
	}
	if v := p.Get("max-budget-usd"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f <= 0 {
			fakecli.Fail(1, "Error: --max-budget-usd must be a positive number")
		}
		maxBudget = f
	}
	scen := fakecli.Scenarios("fakeclaude", func(n string) bool { return n != "api_error" && n != "mcp" })
	run(format, mode, prompt, scen)
}

// checkSettings accepts a JSON object or a readable file holding one.
func checkSettings(s string) error {
	text := strings.TrimSpace(s)
	if !strings.HasPrefix(text, "{") {
		b, err := os.ReadFile(text)
		if err != nil {
			return fmt.Errorf("settings file not found: %s", s)
		}
		text = string(b)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return fmt.Errorf("invalid settings JSON: %v", err)
	}
	return nil
}

func loggedIn() (string, bool) {
	for _, k := range []string{"ANTHROPIC_API_KEY", "CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"} {
		if os.Getenv(k) != "" {
			return k, true
		}
	}
	dir := os.Getenv("CLAUDE_CONFIG_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".claude")
	}
	if _, err := os.Stat(filepath.Join(dir, ".credentials.json")); err == nil {
		return "/login managed key", true
	}
	return "none", false
}

type session struct {
	out           fakecli.Emitter
	id            string
	model         string
	turns         int
	texts         []string
	started       time.Time
	format        string
	inTok, outTok int // tokens used so far
}

// The limits the CLI stops itself at (--max-turns, --max-budget-usd).
var (
	maxTurns  int
	maxBudget float64
)

// checkLimits ends the run as the real CLI does at a limit: an error
// result with the limit's subtype.
func (s *session) checkLimits() {
	subtype := ""
	switch {
	case maxTurns > 0 && s.turns >= maxTurns:
		subtype = "error_max_turns"
	case maxBudget > 0 && s.cost() > maxBudget:
		subtype = "error_max_budget_usd"
	default:
		return
	}
	s.emit(map[string]any{"type": "result", "subtype": subtype, "is_error": true, "num_turns": s.turns,
		"duration_ms": time.Since(s.started).Milliseconds() + 1, "total_cost_usd": s.cost(),
		"usage": map[string]any{"input_tokens": s.inTok, "output_tokens": s.outTok}})
	os.Exit(1)
}

// usage counts one API message's tokens and returns its usage object.
func (s *session) usage(out int) map[string]any {
	in := fakecli.Tokens(12)
	s.inTok += in
	s.outTok += out
	return map[string]any{"input_tokens": in, "output_tokens": out}
}

func (s *session) emit(v map[string]any) {
	if s.format == "stream-json" {
		v["session_id"] = s.id
		v["uuid"] = fakecli.UUID()
		s.out.Emit(v)
	}
}

// Each assistant message is one API call, one turn; like the real CLI,
// the fake checks its limits before it makes the next call.
func (s *session) text(t string) {
	s.checkLimits()
	s.turns++
	s.texts = append(s.texts, t)
	s.emit(map[string]any{"type": "assistant", "parent_tool_use_id": nil, "message": map[string]any{
		"id": fakecli.ID("msg_"), "type": "message", "role": "assistant", "model": s.model,
		"content": []any{map[string]any{"type": "text", "text": t}}, "stop_reason": nil,
		"usage": s.usage(4)}})
}

func (s *session) tool(name string, input map[string]any, result string, isErr bool) {
	s.checkLimits()
	id := fakecli.ID("toolu_")
	s.turns++
	s.emit(map[string]any{"type": "assistant", "parent_tool_use_id": nil, "message": map[string]any{
		"id": fakecli.ID("msg_"), "type": "message", "role": "assistant", "model": s.model,
		"content":     []any{map[string]any{"type": "tool_use", "id": id, "name": name, "input": input}},
		"stop_reason": "tool_use", "usage": s.usage(9)}})
	blk := map[string]any{"tool_use_id": id, "type": "tool_result", "content": result}
	if isErr {
		blk["is_error"] = true
	}
	s.emit(map[string]any{"type": "user", "parent_tool_use_id": nil, "message": map[string]any{"role": "user", "content": []any{blk}}})
}

func (s *session) result(isErr bool, text string) {
	r := map[string]any{
		"type": "result", "subtype": "success", "is_error": isErr,
		"duration_ms": time.Since(s.started).Milliseconds() + 1, "duration_api_ms": 1,
		"num_turns": s.turns, "result": text, "stop_reason": "end_turn",
		"total_cost_usd": s.cost(),
		"usage": map[string]any{"input_tokens": s.inTok, "cache_creation_input_tokens": 0,
			"cache_read_input_tokens": 0, "output_tokens": s.outTok, "service_tier": "standard"},
		"modelUsage": map[string]any{s.model: map[string]any{"inputTokens": s.inTok, "outputTokens": s.outTok,
			"cacheReadInputTokens": 0, "cacheCreationInputTokens": 0, "webSearchRequests": 0, "costUSD": s.cost(),
			"contextWindow": 200000, "maxOutputTokens": 32000}},
		"permission_denials": []any{},
	}
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

// cost prices the fake model at $3 per million input and $15 per
// million output tokens.
func (s *session) cost() float64 {
	return (3*float64(s.inTok) + 15*float64(s.outTok)) / 1e6
}

func run(format, mode, prompt string, scen map[string]bool) {
	s := &session{out: fakecli.Emitter{W: os.Stdout}, id: fakecli.UUID(), model: "claude-fake-1", started: time.Now(), format: format}
	wd, _ := os.Getwd()
	keySource, ok := loggedIn()
	s.emit(map[string]any{"type": "system", "subtype": "init", "cwd": wd, "tools": []string{"Bash", "Edit", "Read", "Write"},
		"mcp_servers": []any{}, "model": s.model, "permissionMode": mode, "apiKeySource": keySource,
		"claude_code_version": defaultVersion, "output_style": "default"})
	if !ok {
		s.result(true, "Not logged in · Please run /login")
		os.Exit(1)
	}
	if scen["crash"] {
		fmt.Println(`{"type":"assistant","message":{"content":[{"type":"text","text":"trunc`)
		fmt.Println("panic: fake crash")
		os.Exit(2)
	}
	s.text("Working on: " + firstLine(prompt))
	if scen["edit_file"] {
		path, content := fakecli.EditTarget("fakeclaude")
		if mode == "default" || mode == "plan" || mode == "dontAsk" {
			s.tool("Write", map[string]any{"file_path": path, "content": content}, "Permission to use Write has been denied.", true)
		} else if err := fakecli.WriteFile(path, content); err != nil {
			s.tool("Write", map[string]any{"file_path": path, "content": content}, err.Error(), true)
		} else {
			s.tool("Write", map[string]any{"file_path": path, "content": content}, "File created successfully at: "+path, false)
		}
	}
	if scen["fetch"] {
		url := os.Getenv(fakecli.EnvURL)
		report, good := fakecli.Fetch(url)
		s.tool("Bash", map[string]any{"command": "curl -sS " + url}, report, !good)
	}
	final := os.Getenv(fakecli.EnvText)
	if final == "" {
		final = "Done."
	}
	if scen["call_api"] {
		text, err := fakecli.CallMessages(prompt)
		if err != nil {
			s.result(true, "API Error: "+err.Error())
			os.Exit(1)
		}
		final = text
	}
	if scen["sleep"] {
		fakecli.Sleep()
	}
	s.text(final)
	switch {
	case scen["no_result"]:
		os.Exit(0)
	case scen["is_error_exit0"]:
		msg := "API Error: 429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"rate limited\"}}"
		if v := os.Getenv(fakecli.EnvErrorText); v != "" {
			msg = v
		}
		s.result(true, msg)
		os.Exit(0)
	case scen["success_then_exit1"]:
		s.result(false, final)
		fmt.Fprintln(os.Stderr, "fakeclaude: failed after the result")
		os.Exit(1)
	case scen["hang_after_result"]:
		s.result(false, final)
		fakecli.Hang()
		os.Exit(0)
	case scen["error_then_hang"]:
		s.result(true, "API Error: 529 {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}")
		fakecli.Hang()
		os.Exit(1)
	case scen["two_results"]:
		s.result(false, final)
		s.result(false, final)
		os.Exit(0)
	}
	s.result(false, final)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	if len(l) > 200 {
		l = l[:200]
	}
	return l
}
