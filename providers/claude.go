package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// claudeCode is Anthropic's Claude Code CLI, the default provider.
type claudeCode struct{}

func init() { register(claudeCode{}) }

func (claudeCode) Name() string { return "claude-code" }

var claudeSpec = Spec{
	Name:           "claude-code",
	DefaultCommand: "claude",
	Env: EnvNames{
		APIKey:     "ANTHROPIC_API_KEY",
		LoginToken: []string{"CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_API_KEY"},
		BaseURL:    "ANTHROPIC_BASE_URL",
		ConfigDir:  "CLAUDE_CONFIG_DIR",
	},
	LoginPaths: func(home string, getenv func(string) string) []string {
		if dir := getenv("CLAUDE_CONFIG_DIR"); dir != "" {
			return []string{filepath.Clean(dir)}
		}
		if home == "" {
			return nil
		}
		return []string{filepath.Join(home, ".claude"), filepath.Join(home, ".claude.json")}
	},
	// The Messages API is all a headless run needs.
	EgressHosts: []string{"api.anthropic.com"},
	// Browser and console login, telemetry (Datadog intake; Statsig and
	// Sentry in older releases) and the native installer's downloads.
	HandshakeHosts: []string{
		"claude.ai",
		"platform.claude.com",
		"console.anthropic.com",
		"http-intake.logs.us5.datadoghq.com",
		"statsig.anthropic.com",
		"sentry.io",
		"downloads.claude.ai",
	},
	Inject: &InjectSpec{
		Host:         "api.anthropic.com",
		Header:       "x-api-key",
		BaseURLEnv:   "ANTHROPIC_BASE_URL",
		KeyEnv:       "ANTHROPIC_API_KEY",
		Upstream:     "https://api.anthropic.com",
		SecretKey:    "providers.claude-code.api_key",
		StripHeaders: []string{"x-api-key", "authorization"},
	},
	ExtraDirsFlag:  "--add-dir",
	CheckedAgainst: "Claude Code 2.1.332 (npm): a captured stream against a local Messages API; flags from `claude --help`",
	SandboxOffArgs: []string{"--settings", `{"sandbox":{"enabled":false}}`},
	Install:        "npm install -g @anthropic-ai/claude-code (or Anthropic's native installer), then `claude` once to sign in",
	Recognize:      func(line string) bool { return strings.Contains(line, "Claude Code") },
	Stream:         "init, tool_use/tool_result, text, per-message usage, API retries and result (turns, duration, usage, cost)",
	Cost:           Supported,
	CostNote:       "total_cost_usd, usage and modelUsage (per model) from the result; per-message usage while it runs",
	Resume:         "--resume SESSION_ID (the previous attempt's session)",
	// --resume ID finds a session in any project folder (checked with
	// 2.1.332), so one made in the previous attempt's worktree resumes.
	SessionByID:      true,
	LoginSessionDirs: []string{"projects"},
	// 2.1.332's TOKEN_URL is platform.claude.com/v1/oauth/token; earlier
	// releases used console.anthropic.com. Account and organisation ids,
	// scopes and the subscription sit beside the tokens and stay.
	Credentials: []CredentialRefresh{{File: ".credentials.json", TokenHosts: []string{"platform.claude.com", "console.anthropic.com"},
		Tokens: []string{"/claudeAiOauth/accessToken", "/claudeAiOauth/refreshToken"}, Expiry: []string{"/claudeAiOauth/expiresAt"}}},
}

func (claudeCode) Spec() Spec { return claudeSpec }

func (c claudeCode) Probe(ctx context.Context, command string) (Probe, error) {
	return probe(ctx, claudeSpec, command)
}

// Flags kusaw sets itself; providers.claude-code.args may not change them
// because the stream could no longer be parsed.
var claudeManaged = map[string]string{
	"-p": "", "--print": "", "--output-format": "", "--input-format": "",
	"--resume": "", "-r": "", "--continue": "", "-c": "",
}

// Claude Code's permission modes (claude --help, 2.1.x).
var claudePermissionModes = map[string]bool{
	"acceptEdits": true, "auto": true, "bypassPermissions": true,
	"default": true, "dontAsk": true, "plan": true, "manual": true,
}

// Argv builds `claude -p --output-format stream-json --verbose ...`.
//
// Permission mode: inside kusaw's sandbox the agent runs with
// bypassPermissions, because the sandbox (writable worktrees only, optional
// allowlist) is the boundary and an unattended run has nobody to answer a
// prompt. Without kusaw's sandbox it gets acceptEdits: edits in its working
// directories go through, other commands not pre-approved are denied (and
// counted in the result's permission_denials) instead of running unchecked
// on the host. A permission flag in providers.claude-code.args wins.
//
// The prompt comes last, after `--`, so a prompt that starts with "-" is
// never read as a flag and --add-dir's list ends before it.
func (claudeCode) Argv(req RunRequest) ([]string, error) {
	if err := checkPrompt("claude-code", req.Prompt); err != nil {
		return nil, err
	}
	user, userSettings, err := splitClaudeArgs(req.Args)
	if err != nil {
		return nil, err
	}
	cmd := req.Command
	if cmd == "" {
		cmd = claudeSpec.DefaultCommand
	}
	argv := []string{cmd, "-p", "--output-format", "stream-json", "--verbose"}
	if !hasPermissionFlag(user) {
		mode := "acceptEdits"
		if req.Sandboxed {
			mode = "bypassPermissions"
		}
		argv = append(argv, "--permission-mode", mode)
	}
	for _, d := range req.ExtraDirs {
		if d == "" {
			continue
		}
		argv = append(argv, "--add-dir", d)
	}
	// The step's limits, where the user's args do not set their own: the
	// CLI then ends with an error_max_* result before kusaw must stop it.
	if req.MaxTurns > 0 && !hasFlag(user, "--max-turns") {
		argv = append(argv, "--max-turns", strconv.Itoa(req.MaxTurns))
	}
	if req.MaxBudgetUSD > 0 && !hasFlag(user, "--max-budget-usd") {
		argv = append(argv, "--max-budget-usd", strconv.FormatFloat(req.MaxBudgetUSD, 'f', -1, 64))
	}
	settings, err := claudeSettings(req.Sandboxed, userSettings, req.UserSettings)
	if err != nil {
		return nil, err
	}
	if settings != "" {
		argv = append(argv, "--settings", settings)
	}
	if req.Model != "" && !hasFlag(user, "--model") {
		argv = append(argv, "--model", req.Model)
	}
	if req.Resume != "" {
		argv = append(argv, "--resume", req.Resume)
	}
	argv = append(argv, user...)
	argv = append(argv, "--", req.Prompt)
	return argv, nil
}

// splitClaudeArgs checks the user's args and takes out any --settings
// values, which are merged into kusaw's own.
func splitClaudeArgs(args []string) (rest, settings []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		if _, managed := claudeManaged[name]; managed {
			return nil, nil, fmt.Errorf("providers.claude-code.args: %s is set by kusaw (it reads the stream-json output); remove it", name)
		}
		if a == "--" {
			return nil, nil, fmt.Errorf("providers.claude-code.args: `--` is not allowed; kusaw passes the prompt after it")
		}
		if name == "--settings" {
			if !hasVal {
				if i+1 >= len(args) {
					return nil, nil, fmt.Errorf("providers.claude-code.args: --settings needs a value (a JSON object or a file)")
				}
				i++
				val = args[i]
			}
			settings = append(settings, val)
			continue
		}
		if name == "--permission-mode" {
			v := val
			if !hasVal && i+1 < len(args) {
				v = args[i+1]
			}
			if !claudePermissionModes[v] {
				return nil, nil, fmt.Errorf("providers.claude-code.args: --permission-mode %q is not one of acceptEdits, auto, bypassPermissions, default, dontAsk, plan", v)
			}
		}
		if a == "--verbose" {
			continue // kusaw passes it already
		}
		rest = append(rest, a)
	}
	return rest, settings, nil
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if name, _, _ := strings.Cut(a, "="); name == flag {
			return true
		}
	}
	return false
}

func hasPermissionFlag(args []string) bool {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if name == "--permission-mode" || name == "--dangerously-skip-permissions" {
			return true
		}
	}
	return false
}

// claudeSettings merges the user's settings (JSON objects or files) into
// one object; when kusaw's sandbox wraps the step, sandbox.enabled is
// forced to false because the agent's own sandbox cannot nest in ours.
func claudeSettings(sandboxed bool, fromArgs []string, extra string) (string, error) {
	var sources []string
	sources = append(sources, fromArgs...)
	if strings.TrimSpace(extra) != "" {
		sources = append(sources, extra)
	}
	merged := map[string]any{}
	for _, src := range sources {
		m, err := loadSettings(src)
		if err != nil {
			return "", err
		}
		mergeInto(merged, m)
	}
	if sandboxed {
		sb, _ := merged["sandbox"].(map[string]any)
		if sb == nil {
			sb = map[string]any{}
		}
		sb["enabled"] = false
		merged["sandbox"] = sb
	}
	if len(merged) == 0 {
		return "", nil
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return "", fmt.Errorf("claude-code settings: %v", err)
	}
	return string(b), nil
}

func loadSettings(src string) (map[string]any, error) {
	text := strings.TrimSpace(src)
	from := "the settings JSON"
	if !strings.HasPrefix(text, "{") {
		b, err := os.ReadFile(text)
		if err != nil {
			return nil, fmt.Errorf("claude-code settings: cannot read settings file %q: %v; give a JSON object or a readable file", text, err)
		}
		text, from = string(b), "settings file "+src
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil || m == nil {
		return nil, fmt.Errorf("claude-code settings: %s is not a JSON object: fix it (e.g. {\"model\":\"sonnet\"})", from)
	}
	return m, nil
}

// mergeInto merges src into dst; nested objects merge, other values are
// replaced by src's.
func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		if sv, ok := v.(map[string]any); ok {
			if dv, ok := dst[k].(map[string]any); ok {
				mergeInto(dv, sv)
				continue
			}
		}
		dst[k] = v
	}
}

// Env turns off the self-updater (an unattended run must not replace its
// own binary), tells Claude Code it is inside a sandbox when kusaw's wraps
// it (bypassPermissions is refused for uid 0 otherwise, and the sandbox's
// user namespace maps root to root), and with an allowlist drops the
// non-essential traffic the proxy would refuse anyway.
func (claudeCode) Env(req RunRequest) []string {
	env := []string{"DISABLE_AUTOUPDATER=1"}
	if req.Sandboxed {
		env = append(env, "IS_SANDBOX=1")
		if req.Network == "allowlist" {
			env = append(env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1")
		}
	}
	return env
}

func (claudeCode) Outcome(res Result, exitCode int) (status.Outcome, status.Reason) {
	return outcome(res, exitCode)
}

// ParseStream reads Claude Code's stream-json: system/init, assistant
// messages (text and tool_use blocks), user messages (tool_result blocks)
// and the final result.
func (claudeCode) ParseStream(r io.Reader, emit func(Event)) Result {
	var res Result
	var live tally
	tools := map[string]string{} // tool_use id -> name
	eachLine(r, func(line []byte) {
		res.Lines++
		m := obj(line)
		if m == nil {
			res.Malformed++
			return
		}
		switch str(m, "type") {
		case "system":
			switch str(m, "subtype") {
			case "api_retry":
				// The CLI retries failed API calls with backoff (ten
				// times for a refused key): say so, or the attempt looks hung.
				res.Retries++
				d := map[string]any{"error": str(m, "error")}
				for k, dk := range map[string]string{"attempt": "attempt", "max_retries": "max_retries", "retry_delay_ms": "delay_ms", "error_status": "status"} {
					if n, ok := integer(m, k); ok {
						d[dk] = n
					}
				}
				emit(Event{Type: EventRetry, Data: d})
				return
			case "init":
			default:
				return
			}
			res.SessionID = str(m, "session_id")
			res.Model = str(m, "model")
			d := map[string]any{"session_id": res.SessionID, "model": res.Model}
			for k, dk := range map[string]string{"cwd": "cwd", "permissionMode": "permission_mode", "apiKeySource": "api_key_source", "claude_code_version": "version"} {
				if v := str(m, k); v != "" {
					d[dk] = v
				}
			}
			if t, ok := m["tools"].([]any); ok {
				d["tools"] = len(t)
			}
			emit(Event{Type: EventInit, Data: d})
		case "assistant":
			msg := sub(m, "message")
			if u, ok := tokens(sub(msg, "usage"), "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"); ok && !res.Seen {
				if live.message(str(msg, "id"), u) {
					lu := live.usage()
					emit(Event{Type: EventUsage, Data: usageData(lu), Usage: lu})
				}
			}
			if res.Model == "" {
				if mod := str(msg, "model"); mod != "" && !strings.HasPrefix(mod, "<") {
					res.Model = mod
				}
			}
			blocks, _ := msg["content"].([]any)
			for _, b := range blocks {
				blk, _ := b.(map[string]any)
				switch str(blk, "type") {
				case "text":
					if t := str(blk, "text"); t != "" {
						emit(Event{Type: EventText, Data: textData(t)})
					}
				case "tool_use":
					id, name := str(blk, "id"), str(blk, "name")
					tools[id] = name
					res.Tools++
					d := map[string]any{"phase": "started", "id": id, "name": name}
					if in, cut := brief(blk["input"]); in != "" {
						d["input"] = in
						if cut {
							d["truncated"] = true
						}
					}
					emit(Event{Type: EventTool, Data: d})
				}
			}
		case "user":
			blocks, _ := sub(m, "message")["content"].([]any)
			for _, b := range blocks {
				blk, _ := b.(map[string]any)
				if str(blk, "type") != "tool_result" {
					continue
				}
				id := str(blk, "tool_use_id")
				d := map[string]any{"phase": "completed", "id": id, "name": tools[id], "is_error": boolean(blk, "is_error")}
				if out, cut := brief(toolResultText(blk["content"])); out != "" {
					d["output"] = out
					if cut {
						d["truncated"] = true
					}
				}
				emit(Event{Type: EventTool, Data: d})
			}
		case "result":
			res.Seen = true
			res.Results++
			res.Subtype = str(m, "subtype")
			// An error subtype (error_max_turns, error_during_execution)
			// fails the run even if is_error is missing.
			res.IsError = boolean(m, "is_error") || strings.HasPrefix(res.Subtype, "error")
			if n, ok := integer(m, "num_turns"); ok {
				res.Turns = int(n)
			}
			res.DurationMS, _ = integer(m, "duration_ms")
			res.DurationAPIMS, _ = integer(m, "duration_api_ms")
			if c, ok := float(m, "total_cost_usd"); ok {
				res.CostUSD = &c
			}
			res.Usage = claudeUsage(m, res)
			if s := str(m, "session_id"); s != "" {
				res.SessionID = s
			}
			if d, ok := m["permission_denials"].([]any); ok {
				res.PermissionDenials = len(d)
			}
			res.Text = resultText(str(m, "result"))
			d := resultData(res)
			if tr := str(m, "terminal_reason"); tr != "" {
				d["terminal_reason"] = tr
			}
			emit(Event{Type: EventResult, Data: d, Usage: res.Usage})
		}
	}, func() { res.Lines++; res.Malformed++ })
	if res.Usage == nil {
		res.Usage = live.usage()
	}
	return res
}

// claudeUsage is a result's usage: tokens by kind, cost, turns and
// modelUsage per model. Nil when the result reports none of them.
func claudeUsage(m map[string]any, res Result) *record.Usage {
	u, ok := tokens(sub(m, "usage"), "input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
	if !ok && res.CostUSD == nil {
		return nil
	}
	u.CostUSD, u.Turns = res.CostUSD, res.Turns
	for name, v := range sub(m, "modelUsage") {
		mm, _ := v.(map[string]any)
		t, ok := tokens(mm, "inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens")
		c, hasCost := float(mm, "costUSD")
		if !ok && !hasCost {
			continue
		}
		mu := &record.ModelUsage{InputTokens: t.InputTokens, OutputTokens: t.OutputTokens, CacheReadTokens: t.CacheReadTokens, CacheWriteTokens: t.CacheWriteTokens}
		if hasCost {
			mu.CostUSD = &c
		}
		if u.Models == nil {
			u.Models = map[string]*record.ModelUsage{}
		}
		u.Models[name] = mu
	}
	return &u
}

// toolResultText flattens a tool_result's content (a string or text blocks).
func toolResultText(v any) any {
	blocks, ok := v.([]any)
	if !ok {
		return v
	}
	var sb strings.Builder
	for _, b := range blocks {
		blk, _ := b.(map[string]any)
		if t := str(blk, "text"); t != "" {
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(t)
		}
	}
	return sb.String()
}

// resultData is the data of a provider.result event.
func resultData(res Result) map[string]any {
	d := map[string]any{"is_error": res.IsError, "subtype": res.Subtype, "session_id": res.SessionID}
	if res.Turns > 0 {
		d["turns"] = res.Turns
	}
	if res.DurationMS > 0 {
		d["duration_ms"] = res.DurationMS
	}
	if res.DurationAPIMS > 0 {
		d["duration_api_ms"] = res.DurationAPIMS
	}
	if res.CostUSD != nil {
		d["cost_usd"] = *res.CostUSD
	}
	if res.Usage != nil {
		d["usage"] = *res.Usage
	}
	if res.PermissionDenials > 0 {
		d["permission_denials"] = res.PermissionDenials
	}
	t, cut := truncate(res.Text, EventTextLimit)
	d["text"] = t
	if cut {
		d["truncated"] = true
	}
	return d
}

func checkPrompt(provider, prompt string) error {
	if strings.TrimSpace(prompt) == "" {
		return fmt.Errorf("%s: the step has an empty prompt; set steps.<id>.prompt or prompt_file", provider)
	}
	if strings.IndexByte(prompt, 0) >= 0 {
		return fmt.Errorf("%s: the prompt contains a NUL byte, which cannot be passed as an argument; fix the prompt_file", provider)
	}
	if len(prompt) > MaxPromptBytes {
		return fmt.Errorf("%s: the prompt is %d KiB; one argument may be at most %d KiB: shorten it or have the prompt point the agent at a file in the worktree", provider, len(prompt)>>10, MaxPromptBytes>>10)
	}
	return nil
}
