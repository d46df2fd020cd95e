package providers

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
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
		if dir := getenv("CURSOR_CONFIG_DIR"); dir != "" {
			return []string{filepath.Clean(dir)}
		}
		var out []string
		if home != "" {
			out = append(out, filepath.Join(home, ".cursor"))
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
	// Browser login, the website, the installer/updater CDN and the
	// extension marketplace.
	HandshakeHosts: []string{"cursor.com", "www.cursor.com", "*.cursor-cdn.com", "*.cursorapi.com"},
	// No inject: the CLI has no setting for another API endpoint, so a
	// proxy cannot stand in for Cursor's servers; the key must be in the
	// step's env (CURSOR_API_KEY) or the login folder.
	Inject:         nil,
	SandboxOffArgs: []string{"--sandbox", "disabled"},
	Install:        "install Cursor's CLI (`agent`; older releases call it cursor-agent) and run `agent login`, or create a Cursor API key",
	// Cursor's CLI versions are dated builds: 2025.11.25-abc1234.
	Recognize: func(s string) bool { return cursorVersionRE().MatchString(s) },
}

var cursorVersionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\d{4}\.\d{1,2}\.\d{1,2}-[0-9a-zA-Z]+`) })

func (cursor) Spec() Spec { return cursorSpec }

func (cursor) Probe(ctx context.Context, command string) (Probe, error) {
	return probe(ctx, cursorSpec, command)
}

var cursorManaged = map[string]bool{
	"-p": true, "--print": true, "--output-format": true, "--sandbox": true,
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
	for _, a := range req.Args {
		name, _, _ := strings.Cut(a, "=")
		if cursorManaged[name] {
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
	return append(argv, "--", req.Prompt), nil
}

func (cursor) Env(RunRequest) []string { return nil }

func (cursor) Outcome(res Result, exitCode int) (status.Outcome, status.Reason) {
	return outcome(res, exitCode)
}

// ParseStream reads Cursor's stream-json: system/init, assistant messages,
// tool_call started/completed, and the final result (which carries no
// turns, usage or cost).
func (cursor) ParseStream(r io.Reader, emit func(Event)) Result {
	var res Result
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
			name, call := cursorTool(sub(m, "tool_call"))
			d := map[string]any{"phase": phase, "id": str(m, "call_id"), "name": name}
			if phase == "started" {
				res.Tools++
				args := call["args"]
				if args == nil {
					args = call["arguments"] // function (MCP) tools
				}
				if in, cut := brief(args); in != "" {
					d["input"] = in
					if cut {
						d["truncated"] = true
					}
				}
			} else {
				result := sub(call, "result")
				_, ok := result["success"]
				d["is_error"] = result != nil && !ok
				if out, cut := brief(result); out != "" {
					d["output"] = out
					if cut {
						d["truncated"] = true
					}
				}
			}
			emit(Event{Type: EventTool, Data: d})
		case "result":
			res.Seen = true
			res.Subtype = str(m, "subtype")
			res.IsError = boolean(m, "is_error") || (res.Subtype != "" && res.Subtype != "success")
			res.DurationMS, _ = integer(m, "duration_ms")
			res.DurationAPIMS, _ = integer(m, "duration_api_ms")
			if s := str(m, "session_id"); s != "" {
				res.SessionID = s
			}
			res.Text = resultText(str(m, "result"))
			emit(Event{Type: EventResult, Data: resultData(res)})
		}
	}, func() { res.Lines++; res.Malformed++ })
	return res
}

// cursorTool names a tool call: {"readToolCall": {...}} is "read";
// {"function": {"name": "x"}} is "x".
func cursorTool(tc map[string]any) (string, map[string]any) {
	keys := make([]string, 0, len(tc))
	for k := range tc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		call, ok := tc[k].(map[string]any)
		if !ok {
			continue
		}
		if k == "function" {
			if n := str(call, "name"); n != "" {
				return n, call
			}
		}
		return strings.TrimSuffix(k, "ToolCall"), call
	}
	return "", nil
}
