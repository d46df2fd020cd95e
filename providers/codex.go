package providers

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// codex is OpenAI's Codex CLI (`codex exec`, its headless mode).
type codex struct{}

func init() { register(codex{}) }

func (codex) Name() string { return "codex" }

// CodexModelProvider is the name of the model provider kusaw defines with
// -c model_providers.kusaw.* when Codex must talk to another base URL: the
// built-in openai provider ignores OPENAI_BASE_URL for its Responses API
// (0.169 went to the real host over WebSocket), a custom one does not.
const CodexModelProvider = "kusaw"

var codexSpec = Spec{
	Name:           "codex",
	DefaultCommand: "codex",
	Env: EnvNames{
		APIKey:     "OPENAI_API_KEY",
		LoginToken: []string{"OPENAI_API_KEY", "CODEX_API_KEY"},
		BaseURL:    "OPENAI_BASE_URL",
		ConfigDir:  "CODEX_HOME",
	},
	LoginPaths: func(home string, getenv func(string) string) []string {
		if dir := getenv("CODEX_HOME"); dir != "" {
			return []string{filepath.Clean(dir)}
		}
		if home == "" {
			return nil
		}
		return []string{filepath.Join(home, ".codex")}
	},
	// The Responses API is all `codex exec` needs with an API key.
	EgressHosts: []string{"api.openai.com"},
	// ChatGPT sign-in and its backend (a subscription login talks to
	// chatgpt.com, not the API), analytics (ab.chatgpt.com) and the
	// plugins' GitHub look-ups; kusaw turns analytics and plugins off.
	HandshakeHosts: []string{"auth.openai.com", "chatgpt.com", "ab.chatgpt.com", "github.com", "api.github.com"},
	Inject: &InjectSpec{
		Host:         "api.openai.com",
		Header:       "authorization",
		BaseURLEnv:   "OPENAI_BASE_URL",
		KeyEnv:       "OPENAI_API_KEY",
		Upstream:     "https://api.openai.com/v1",
		SecretKey:    "providers.codex.api_key",
		StripHeaders: []string{"authorization"},
	},
	ExtraDirsFlag:  "--add-dir",
	SandboxOffArgs: []string{"--dangerously-bypass-approvals-and-sandbox"},
	CheckedAgainst: "Codex CLI 0.171.0 (npm @openai/codex): `codex exec --json` and `exec resume` against a local Responses API; flags from `codex exec --help`",
	Install:        "npm install -g @openai/codex, then `codex login` (or an OpenAI API key in OPENAI_API_KEY)",
	Recognize:      func(line string) bool { return strings.Contains(line, "codex") },
	Stream:         "thread.started (session), agent messages, reasoning, command/file/MCP/web-search items as tool events, reconnects as retries, and turn.completed (usage) or turn.failed (the error)",
	Cost:           Partial,
	CostNote:       "token usage (input, cached input, output) from turn.completed; no cost in USD, so limits.cost_usd is refused; a resumed session reports the session's running total",
	Resume:         "codex exec resume SESSION_ID",
	SessionByID:    true,
	// A ChatGPT login's refresh (auth.openai.com/oauth/token) replaces
	// the three tokens and last_refresh; account_id and the API key stay.
	Credentials: []CredentialRefresh{{File: "auth.json", TokenHosts: []string{"auth.openai.com"},
		Tokens: []string{"/tokens/id_token", "/tokens/access_token", "/tokens/refresh_token"}, Expiry: []string{"/last_refresh"}}},
}

func (codex) Spec() Spec { return codexSpec }

func (codex) Probe(ctx context.Context, command string) (Probe, error) {
	return probe(ctx, codexSpec, command)
}

// Flags kusaw sets itself in providers.codex.args.
var codexManaged = map[string]string{
	"--json":    "kusaw reads its JSON events",
	"-s":        "kusaw decides the sandbox (its own inside kusaw's is off, workspace-write outside)",
	"--sandbox": "kusaw decides the sandbox (its own inside kusaw's is off, workspace-write outside)",
	"--dangerously-bypass-approvals-and-sandbox": "kusaw passes it only inside its own sandbox",
	"--yolo":   "kusaw passes --dangerously-bypass-approvals-and-sandbox only inside its own sandbox",
	"-o":       "the last message is in the stream",
	"--remote": "kusaw runs the CLI in the attempt",
	"--cd":     "kusaw sets the working directory",
	"-C":       "kusaw sets the working directory",
}

// codexQuiet turns off what an unattended run must not do: plugins (they
// look up GitHub), analytics and metrics export.
// CodexMaxRetries caps Codex's request and stream retries against kusaw's
// model provider.
const CodexMaxRetries = 2

var codexQuiet = []string{"--disable", "plugins", "-c", "analytics.enabled=false", "-c", "otel.metrics_exporter=none"}

// Argv builds `codex exec --json ... [resume SESSION] -- PROMPT`.
//
// Inside kusaw's sandbox Codex's own sandbox and approvals are off
// (--dangerously-bypass-approvals-and-sandbox: its sandbox cannot nest in
// kusaw's, and nobody can answer an approval); outside it keeps its own
// workspace-write sandbox, so the agent's commands stay confined to the
// worktrees. A base URL (an API gateway, or the egress proxy's inject
// endpoint) becomes the model provider "kusaw" with wire_api responses,
// its key read from OPENAI_API_KEY.
func (codex) Argv(req RunRequest) ([]string, error) {
	if err := checkPrompt("codex", req.Prompt); err != nil {
		return nil, err
	}
	if err := checkArgs("codex", req.Args, codexManaged); err != nil {
		return nil, err
	}
	cmd := req.Command
	if cmd == "" {
		cmd = codexSpec.DefaultCommand
	}
	argv := []string{cmd, "exec", "--json", "--skip-git-repo-check"}
	if req.Sandboxed {
		argv = append(argv, codexSpec.SandboxOffArgs...)
	} else {
		argv = append(argv, "--sandbox", "workspace-write")
		for _, d := range req.ExtraDirs {
			if d != "" {
				argv = append(argv, "--add-dir", d)
			}
		}
	}
	argv = append(argv, codexQuiet...)
	if req.Model != "" && !hasFlag(req.Args, "-m") && !hasFlag(req.Args, "--model") {
		argv = append(argv, "--model", req.Model)
	}
	if base := req.baseURL(codexSpec.Env.BaseURL); base != "" {
		argv = append(argv,
			"-c", "model_provider="+CodexModelProvider,
			"-c", "model_providers."+CodexModelProvider+`.name="kusaw"`,
			"-c", "model_providers."+CodexModelProvider+".base_url="+tomlString(base),
			"-c", "model_providers."+CodexModelProvider+`.env_key="OPENAI_API_KEY"`,
			"-c", "model_providers."+CodexModelProvider+`.wire_api="responses"`,
			// Its defaults (4 request and 5 stream retries with backoff) keep
			// a refused upstream (the proxy's 502 for a TLS failure) busy for
			// half a minute per turn; kusaw retries attempts itself.
			"-c", "model_providers."+CodexModelProvider+".request_max_retries="+strconv.Itoa(CodexMaxRetries),
			"-c", "model_providers."+CodexModelProvider+".stream_max_retries="+strconv.Itoa(CodexMaxRetries))
	}
	argv = append(argv, req.Args...)
	if req.Resume != "" {
		// exec resume takes the exec options before it and the session
		// id first; --add-dir is not one of resume's options.
		argv = append(argv, "resume", req.Resume)
	}
	return append(argv, "--", req.Prompt), nil
}

// tomlString quotes s as a TOML basic string: -c parses its value as TOML.
// The value filled in for an EnvRef is the lease's URL, which needs no
// escaping.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == 0:
			b.WriteRune(r) // an EnvRef marker, filled in at start
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// checkArgs refuses providers.<name>.args that would break what kusaw
// relies on: flags it manages, `--`, a NUL byte.
func checkArgs(provider string, args []string, managed map[string]string) error {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if why, ok := managed[name]; ok {
			return fmt.Errorf("providers.%s.args: %s is set by kusaw (%s); remove it", provider, name, why)
		}
		if a == "--" {
			return fmt.Errorf("providers.%s.args: `--` is not allowed; kusaw passes the prompt after it", provider)
		}
		if strings.IndexByte(a, 0) >= 0 || strings.Contains(a, envRefOpen) {
			return fmt.Errorf("providers.%s.args: %q contains a NUL byte; remove it", provider, a)
		}
	}
	return nil
}

// Env: nothing beyond the base URL's key name; Codex reads
// CODEX_CA_CERTIFICATE or SSL_CERT_FILE for a gateway's CA from the
// step's own env.
func (codex) Env(RunRequest) []string { return nil }

func (codex) Outcome(res Result, exitCode int) (status.Outcome, status.Reason) {
	return outcome(res, exitCode)
}

// ParseStream reads `codex exec --json`: thread.started (the session id),
// item.started/item.completed (agent messages, reasoning, commands, file
// changes, MCP calls, web searches, warnings), error events (its
// reconnects), and the turn's end: turn.completed with usage, or
// turn.failed with the error.
func (codex) ParseStream(r io.Reader, emit func(Event)) Result {
	var res Result
	lastErr := ""
	eachLine(r, func(line []byte) {
		res.Lines++
		m := obj(line)
		if m == nil {
			res.Malformed++
			return
		}
		switch str(m, "type") {
		case "thread.started":
			res.SessionID = str(m, "thread_id")
			emit(Event{Type: EventInit, Data: map[string]any{"session_id": res.SessionID}})
		case "turn.started":
			res.Turns++
		case "item.started":
			it := sub(m, "item")
			if d := codexTool(it, "started"); d != nil {
				res.Tools++
				emit(Event{Type: EventTool, Data: d})
			}
		case "item.completed":
			it := sub(m, "item")
			switch str(it, "type") {
			case "agent_message":
				res.Text = resultText(str(it, "text"))
				emit(Event{Type: EventText, Data: textData(str(it, "text"))})
			case "reasoning":
				emit(Event{Type: EventThinking, Data: textData(str(it, "text"))})
			case "error":
				// A warning (an unknown model's metadata, a changed
				// model on resume); the turn goes on.
				d := textData(str(it, "message"))
				d["warning"] = true
				emit(Event{Type: EventText, Data: d})
			default:
				if d := codexTool(it, "completed"); d != nil {
					if str(it, "type") == "file_change" || str(it, "type") == "web_search" {
						res.Tools++ // no item.started for these
					}
					emit(Event{Type: EventTool, Data: d})
				}
			}
		case "error":
			msg := str(m, "message")
			if strings.HasPrefix(msg, "Reconnecting") {
				res.Retries++
				emit(Event{Type: EventRetry, Data: map[string]any{"error": msg}})
				return
			}
			lastErr = msg
		case "turn.completed":
			res.Seen = true
			res.Results++
			res.Subtype = "success"
			if u, ok := codexUsage(sub(m, "usage")); ok {
				u.Turns = res.Turns
				res.Usage = &u
			}
			emit(Event{Type: EventResult, Data: resultData(res), Usage: res.Usage})
		case "turn.failed":
			res.Seen = true
			res.Results++
			res.IsError = true
			res.Subtype = "error"
			res.Text = resultText(str(sub(m, "error"), "message"))
			if res.Text == "" {
				res.Text = resultText(lastErr)
			}
			emit(Event{Type: EventResult, Data: resultData(res)})
		}
	}, func() { res.Lines++; res.Malformed++ })
	if !res.Seen && lastErr != "" {
		res.Text = resultText(lastErr)
	}
	return res
}

// codexUsage maps turn.completed's usage: input_tokens counts the cached
// ones too, kusaw's input tokens do not.
func codexUsage(m map[string]any) (record.Usage, bool) {
	u, ok := tokens(m, "input_tokens", "output_tokens", "cached_input_tokens", "cache_write_input_tokens")
	if !ok {
		return u, false
	}
	u.InputTokens -= u.CacheReadTokens
	if u.InputTokens < 0 {
		u.InputTokens = 0
	}
	return u, true
}

// codexTool is a provider.tool event's data for an item that is a tool
// call; nil for other items.
func codexTool(it map[string]any, phase string) map[string]any {
	kind := str(it, "type")
	d := map[string]any{"phase": phase, "id": str(it, "id")}
	var in, out any
	switch kind {
	case "command_execution":
		d["name"] = "shell"
		in, out = str(it, "command"), str(it, "aggregated_output")
		if n, ok := integer(it, "exit_code"); ok {
			d["exit_code"] = n
			d["is_error"] = n != 0
		}
	case "file_change":
		d["name"] = "file_change"
		in = it["changes"]
		d["is_error"] = str(it, "status") == "failed"
	case "mcp_tool_call":
		d["name"] = str(it, "tool")
		d["mcp_server"] = str(it, "server")
		in, out = it["arguments"], it["result"]
		if e := it["error"]; e != nil {
			d["is_error"] = true
			out = e
		}
	case "web_search":
		d["name"] = "web_search"
		in = str(it, "query")
	default:
		return nil
	}
	if phase == "started" || kind == "file_change" || kind == "web_search" {
		if s, cut := brief(in); s != "" {
			d["input"] = s
			if cut {
				d["truncated"] = true
			}
		}
	}
	if phase == "completed" {
		if _, set := d["is_error"]; !set {
			d["is_error"] = str(it, "status") == "failed"
		}
		if s, cut := brief(out); s != "" {
			d["output"] = s
			if cut {
				d["truncated"] = true
			}
		}
	}
	return d
}

// CodexHomeDir is the folder under the attempt's config folder that
// CODEX_HOME points at.
const CodexHomeDir = "codex-home"

// codexShared are the entries of the user's CODEX_HOME an attempt's own
// links to: the sign-in, the user's settings and instructions. Sessions,
// logs and the CLI's databases are the attempt's own.
var codexShared = []string{"auth.json", "config.toml", "AGENTS.md", "prompts", "rules", "installation_id"}

// attemptConfig gives each attempt a CODEX_HOME of its own: Codex writes
// sessions, logs and databases there as it starts (a sandbox whose home
// is read-only would stop it: "Read-only file system"), and one attempt's
// session is not another's. The user's sign-in and settings are linked
// in (the Linux sandbox mounts their folder); continue_session copies the
// previous attempt's sessions in on purpose.
//
// Only inside kusaw's sandbox: outside it Codex's own sandbox needs helper
// binaries in CODEX_HOME, which it refuses to create under the process's
// temporary folder (the attempt's tmp), so there the user's CODEX_HOME
// stays.
func (codex) attemptConfig(dir string, in PrepareInput, home string, getenv func(string) string) ([]string, error) {
	if !in.Sandboxed {
		return nil, nil
	}
	ch := filepath.Join(dir, CodexHomeDir)
	if err := os.MkdirAll(ch, 0o700); err != nil {
		return nil, err
	}
	if !in.FreshHome {
		if paths := codexSpec.LoginPaths(home, getenv); len(paths) > 0 {
			for _, n := range codexShared {
				src := filepath.Join(paths[0], n)
				if _, err := os.Lstat(src); err != nil {
					continue
				}
				if err := os.Symlink(src, filepath.Join(ch, n)); err != nil && !os.IsExist(err) {
					return nil, err
				}
			}
		}
	}
	return []string{"CODEX_HOME=" + ch}, nil
}
