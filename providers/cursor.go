package providers

import (
	"context"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/kusaw/kusaw/status"
)

// cursor is Cursor's agent CLI (`agent`, formerly `cursor-agent`).
type cursor struct{}

func init() { register(cursor{}) }

func (cursor) Name() string { return "cursor" }

var cursorSpec = Spec{
	Name:           "cursor",
	DefaultCommand: "agent",
	AltCommands:    []string{"cursor-agent"},
	Env: EnvNames{
		APIKey:     "CURSOR_API_KEY",
		LoginToken: []string{"CURSOR_API_KEY"},
		ConfigDir:  "CURSOR_CONFIG_DIR",
	},
	LoginPaths: func(home string, getenv func(string) string) []string {
		var out []string
		if dir := getenv("CURSOR_CONFIG_DIR"); dir != "" {
			out = append(out, filepath.Clean(dir))
		} else if home != "" {
			out = append(out, filepath.Join(home, ".cursor"))
		}
		// Project state (trust markers, transcripts) stays under ~/.cursor
		// unless CURSOR_DATA_DIR moves it: mounted as well, or a trusted
		// worktree is forgotten and a session cannot be resumed.
		if dir := cursorDataDir(home, getenv); dir != "" && !slices.Contains(out, dir) {
			out = append(out, dir)
		}
		// Linux keeps the login under the XDG config folder.
		if x := getenv("XDG_CONFIG_HOME"); x != "" {
			out = append(out, filepath.Join(x, "cursor"))
		} else if home != "" {
			out = append(out, filepath.Join(home, ".config", "cursor"))
		}
		return out
	},
	// Cursor's agent talks to several api*.cursor.sh hosts and its network
	// guide allows the domain, not single names.
	EgressHosts: []string{"*.cursor.sh"},
	// Browser login, the website, the installer and updater's downloads
	// (downloads.cursor.com), the CDN and the extension marketplace.
	HandshakeHosts: []string{"cursor.com", "www.cursor.com", "downloads.cursor.com", "*.cursor-cdn.com", "*.cursorapi.com"},
	// No inject: -e/--endpoint (CURSOR_API_ENDPOINT) moves the API, but
	// the CLI exchanges the key for a session token at Cursor's API and
	// the agent stream then goes to a host the server picks, so a proxy
	// holding the key cannot stand in for it. The key stays in the step's
	// env (CURSOR_API_KEY) or the login folder.
	Inject:         nil,
	ExtraDirsFlag:  "--add-dir",
	CheckedAgainst: "Cursor's agent CLI 2026.07–2026.09 (its documented flags, stream-json events and cli-config.json); no real binary in kusaw's tests",
	SandboxOffArgs: []string{"--sandbox", "disabled"},
	Install:        "install Cursor's CLI (`agent`; older releases call it cursor-agent) and run `agent login`, or create a Cursor API key",
	// Cursor's CLI versions are dated builds: 2025.11.25-abc1234.
	Recognize: func(s string) bool { return cursorVersionRE().MatchString(s) },
	Stream:    "init, thinking (one event per phase), tool_call started/completed (MCP calls by their tool's name), text and result (duration, token usage); --stream-partial-output is refused",
	Cost:      Partial,
	CostNote:  "token usage (input, output, cache read and write) from the result; no cost in USD and nothing while it runs, so limits.cost_usd is refused",
	Resume:    "--resume CHAT_ID",
	// ~/.config/cursor/auth.json holds the two tokens, refreshed at its
	// API host (so a session always shows that host; only the shape
	// check holds there). Not checked against a real refresh: one that
	// changes more is refused, and the attempt says what changed.
	Credentials: []CredentialRefresh{{File: "auth.json", TokenHosts: []string{"api2.cursor.sh"},
		Tokens: []string{"/accessToken", "/refreshToken"}}},
}

// cursorDataDir is where the CLI keeps project state: CURSOR_DATA_DIR,
// else ~/.cursor.
func cursorDataDir(home string, getenv func(string) string) string {
	if d := getenv("CURSOR_DATA_DIR"); d != "" {
		return filepath.Clean(d)
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".cursor")
}

var cursorVersionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\d{4}\.\d{1,2}\.\d{1,2}-[0-9a-zA-Z]+`) })

func (cursor) Spec() Spec { return cursorSpec }

func (cursor) Probe(ctx context.Context, command string) (Probe, error) {
	return probe(ctx, cursorSpec, command)
}

var cursorManaged = map[string]bool{
	"-p": true, "--print": true, "--output-format": true, "--sandbox": true,
	// Each chunk would become its own event and the text would be
	// recorded twice (chunks, then the whole message).
	"--stream-partial-output": true,
	"--resume":                true, // continue_session decides
}

// Argv builds `agent -p --output-format stream-json --force --trust ...`.
// --force lets the agent run commands without asking (nobody can answer in
// a headless run); --trust accepts the worktree, which kusaw created. The
// agent's own sandbox is turned off only when kusaw's wraps the step; a
// --sandbox in providers.cursor.args is refused because kusaw decides it.
func (cursor) Argv(req RunRequest) ([]string, error) {
	if err := checkPrompt("cursor", req.Prompt); err != nil {
		return nil, err
	}
	cmd := req.Command
	if cmd == "" {
		cmd = cursorSpec.DefaultCommand
	}
	argv := []string{cmd, "-p", "--output-format", "stream-json", "--force", "--trust"}
	if req.Sandboxed {
		argv = append(argv, cursorSpec.SandboxOffArgs...)
	}
	for _, d := range req.ExtraDirs {
		if d != "" {
			argv = append(argv, "--add-dir", d)
		}
	}
	for _, a := range req.Args {
		name, _, _ := strings.Cut(a, "=")
		if cursorManaged[name] {
			if name == "--stream-partial-output" {
				return nil, fmt.Errorf("providers.cursor.args: --stream-partial-output makes every chunk of text its own event; remove it (kusaw records whole messages)")
			}
			return nil, fmt.Errorf("providers.cursor.args: %s is set by kusaw; remove it", name)
		}
		if a == "--" {
			return nil, fmt.Errorf("providers.cursor.args: `--` is not allowed; kusaw passes the prompt after it")
		}
		if name == "--api-key" {
			return nil, fmt.Errorf("providers.cursor.args: --api-key would put the key in argv and attempt records; use `kusaw config set steps.<id>.env.CURSOR_API_KEY --secret`")
		}
		if a == "--force" || a == "-f" || a == "--yolo" || a == "--trust" {
			continue
		}
		argv = append(argv, a)
	}
	if req.Resume != "" {
		argv = append(argv, "--resume", req.Resume)
	}
	return append(argv, "--", req.Prompt), nil
}

func (cursor) Env(RunRequest) []string { return nil }

func (cursor) Outcome(res Result, exitCode int) (status.Outcome, status.Reason) {
	return outcome(res, exitCode)
}

// ParseStream reads Cursor's stream-json: system/init, assistant messages,
// thinking deltas (folded into one provider.thinking per phase),
// tool_call started/completed, and the final result (duration and token
// usage; no turns or cost).
func (cursor) ParseStream(r io.Reader, emit func(Event)) Result {
	var res Result
	var thinking strings.Builder
	eachLine(r, func(line []byte) {
		res.Lines++
		m := obj(line)
		if m == nil {
			res.Malformed++
			return
		}
		switch str(m, "type") {
		case "system":
			if str(m, "subtype") != "init" {
				return
			}
			res.SessionID = str(m, "session_id")
			res.Model = str(m, "model")
			d := map[string]any{"session_id": res.SessionID, "model": res.Model}
			for k, dk := range map[string]string{"cwd": "cwd", "permissionMode": "permission_mode", "apiKeySource": "api_key_source"} {
				if v := str(m, k); v != "" {
					d[dk] = v
				}
			}
			emit(Event{Type: EventInit, Data: d})
		case "thinking":
			switch str(m, "subtype") {
			case "delta":
				if thinking.Len() < EventTextLimit*2 {
					thinking.WriteString(str(m, "text"))
				}
			case "completed":
				if thinking.Len() > 0 {
					emit(Event{Type: EventThinking, Data: textData(thinking.String())})
					thinking.Reset()
				}
			}
		case "assistant":
			blocks, _ := sub(m, "message")["content"].([]any)
			var sb strings.Builder
			for _, b := range blocks {
				blk, _ := b.(map[string]any)
				if str(blk, "type") == "text" {
					sb.WriteString(str(blk, "text"))
				}
			}
			if sb.Len() > 0 {
				emit(Event{Type: EventText, Data: textData(sb.String())})
			}
		case "tool_call":
			phase := str(m, "subtype")
			if phase != "started" && phase != "completed" {
				return
			}
			emit(Event{Type: EventTool, Data: cursorToolData(m, phase, &res)})
		case "result":
			res.Seen = true
			res.Results++
			res.Subtype = str(m, "subtype")
			res.IsError = boolean(m, "is_error") || (res.Subtype != "" && res.Subtype != "success")
			res.DurationMS, _ = integer(m, "duration_ms")
			res.DurationAPIMS, _ = integer(m, "duration_api_ms")
			if s := str(m, "session_id"); s != "" {
				res.SessionID = s
			}
			res.Usage = nil
			if u, ok := tokens(sub(m, "usage"), "inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"); ok {
				res.Usage = &u
			}
			res.Text = resultText(str(m, "result"))
			emit(Event{Type: EventResult, Data: resultData(res), Usage: res.Usage})
		}
	}, func() { res.Lines++; res.Malformed++ })
	return res
}

// cursorToolData is a provider.tool event's data. The call's id is
// call_id (older releases) or the args' toolCallId.
func cursorToolData(m map[string]any, phase string, res *Result) map[string]any {
	name, call := cursorTool(sub(m, "tool_call"))
	args := sub(call, "args")
	id := str(m, "call_id")
	if id == "" {
		id = str(args, "toolCallId")
	}
	d := map[string]any{"phase": phase, "id": id, "name": name}
	if server := str(args, "providerIdentifier"); server != "" {
		d["mcp_server"] = server
	}
	if phase == "started" {
		res.Tools++
		var in any = call["args"]
		if in == nil {
			in = call["arguments"] // function tools
		}
		if a, ok := in.(map[string]any); ok {
			// Bookkeeping keys say nothing about what the tool does.
			a = maps.Clone(a)
			delete(a, "toolCallId")
			in = a
		}
		if s, cut := brief(in); s != "" {
			d["input"] = s
			if cut {
				d["truncated"] = true
			}
		}
		return d
	}
	result := sub(call, "result")
	_, ok := result["success"]
	d["is_error"] = result != nil && !ok
	if out, cut := brief(result); out != "" {
		d["output"] = out
		if cut {
			d["truncated"] = true
		}
	}
	return d
}

// cursorTool names a tool call: {"readToolCall": {...}} is "read";
// {"function": {"name": "x"}} is "x"; an MCP call ({"mcpToolCall": {"args":
// {"toolName": "x", "providerIdentifier": "server"}}}) is "x". Other keys
// beside the call (toolCallId, startedAtMs, ...) are not tools.
func cursorTool(tc map[string]any) (string, map[string]any) {
	keys := make([]string, 0, len(tc))
	for k := range tc {
		if k == "function" || strings.HasSuffix(k, "ToolCall") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		call, ok := tc[k].(map[string]any)
		if !ok {
			continue
		}
		switch k {
		case "function":
			if n := str(call, "name"); n != "" {
				return n, call
			}
		case "mcpToolCall":
			args := sub(call, "args")
			for _, nk := range []string{"toolName", "name"} {
				if n := str(args, nk); n != "" {
					return n, call
				}
			}
		}
		return strings.TrimSuffix(k, "ToolCall"), call
	}
	return "", nil
}
