package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// gemini is Google's Gemini CLI in its non-interactive mode.
type gemini struct{}

func init() { register(gemini{}) }

func (gemini) Name() string { return "gemini" }

var geminiSpec = Spec{
	Name:           "gemini",
	DefaultCommand: "gemini",
	Env: EnvNames{
		APIKey:     "GEMINI_API_KEY",
		LoginToken: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"},
		BaseURL:    "GOOGLE_GEMINI_BASE_URL",
		ConfigDir:  "GEMINI_CLI_HOME",
	},
	LoginPaths: func(home string, getenv func(string) string) []string {
		// GEMINI_CLI_HOME replaces the home folder the CLI puts .gemini in.
		if dir := getenv("GEMINI_CLI_HOME"); dir != "" {
			return []string{filepath.Join(filepath.Clean(dir), ".gemini")}
		}
		if home == "" {
			return nil
		}
		return []string{filepath.Join(home, ".gemini")}
	},
	// The Gemini API with an API key.
	EgressHosts: []string{"generativelanguage.googleapis.com"},
	// Google sign-in and Code Assist (a Google account login), usage
	// statistics (play.googleapis.com; kusaw turns them off) and
	// Vertex AI.
	HandshakeHosts: []string{"accounts.google.com", "oauth2.googleapis.com", "www.googleapis.com", "cloudcode-pa.googleapis.com", "play.googleapis.com", "aiplatform.googleapis.com"},
	Inject: &InjectSpec{
		Host:         "generativelanguage.googleapis.com",
		Header:       "x-goog-api-key",
		BaseURLEnv:   "GOOGLE_GEMINI_BASE_URL",
		KeyEnv:       "GEMINI_API_KEY",
		Upstream:     "https://generativelanguage.googleapis.com",
		SecretKey:    "providers.gemini.api_key",
		StripHeaders: []string{"x-goog-api-key", "authorization"},
	},
	ExtraDirsFlag: "--include-directories",
	// Gemini CLI's own sandbox (-s, docker or Seatbelt) is off unless
	// asked for; kusaw refuses --sandbox in its args inside its own.
	SandboxOffArgs: []string{"--yolo"},
	CheckedAgainst: "Gemini CLI 0.61.0 (npm @google/gemini-cli): `--output-format stream-json` and `--resume` against a local Gemini API; flags from `gemini --help`",
	Install:        "npm install -g @google/gemini-cli, then `gemini` once to sign in (or a Gemini API key in GEMINI_API_KEY)",
	// `gemini --version` prints the bare version.
	Recognize: func(line string) bool { return versionRE().MatchString(strings.TrimSpace(line)) },
	Stream:    "init (session, model), assistant text (deltas folded per reply), tool_use/tool_result, warnings and the result (status, duration, token stats per model)",
	Cost:      Partial,
	CostNote:  "token usage (input, cached, output; per model) from the result's stats; no cost in USD, so limits.cost_usd is refused",
	Resume:    "--session-file (the previous attempt's session, imported)",
	// --resume looks only among the working folder's sessions and each
	// attempt has a worktree of its own: kusaw hands the CLI the previous
	// attempt's session file instead (GeminiResumeFile).
	SessionByID: true,
}

func (gemini) Spec() Spec { return geminiSpec }

func (gemini) Probe(ctx context.Context, command string) (Probe, error) {
	return probe(ctx, geminiSpec, command)
}

var geminiManaged = map[string]string{
	"-p": "kusaw passes the prompt", "--prompt": "kusaw passes the prompt",
	"-i": "an unattended run has no interactive session", "--prompt-interactive": "an unattended run has no interactive session",
	"-o": "kusaw reads its stream-json", "--output-format": "kusaw reads its stream-json",
	"-y": "kusaw passes --yolo only inside its own sandbox", "--yolo": "kusaw passes --yolo only inside its own sandbox",
	"--approval-mode": "kusaw sets it (yolo inside its sandbox, auto_edit outside)",
	"-s":              "kusaw's sandbox wraps the step", "--sandbox": "kusaw's sandbox wraps the step",
	"-r": "kusaw resumes with continue_session", "--resume": "kusaw resumes with continue_session",
	"--session-file": "kusaw resumes with continue_session",
}

// Argv builds `gemini --output-format stream-json --skip-trust
// --approval-mode MODE ... -p PROMPT`. Inside kusaw's sandbox every tool
// call is approved (--yolo: nobody can answer, the sandbox is the
// boundary); outside it only edits are (auto_edit), so a shell command
// the agent wants is refused instead of run on the host unchecked.
// --skip-trust: kusaw made the worktree (without it the CLI exits 55).
func (gemini) Argv(req RunRequest) ([]string, error) {
	if err := checkPrompt("gemini", req.Prompt); err != nil {
		return nil, err
	}
	if err := checkArgs("gemini", req.Args, geminiManaged); err != nil {
		return nil, err
	}
	cmd := req.Command
	if cmd == "" {
		cmd = geminiSpec.DefaultCommand
	}
	argv := []string{cmd, "--output-format", "stream-json", "--skip-trust"}
	if req.Sandboxed {
		argv = append(argv, geminiSpec.SandboxOffArgs...)
	} else {
		argv = append(argv, "--approval-mode", "auto_edit")
	}
	for _, d := range req.ExtraDirs {
		if d != "" {
			argv = append(argv, "--include-directories", d)
		}
	}
	if req.Model != "" && !hasFlag(req.Args, "-m") && !hasFlag(req.Args, "--model") {
		argv = append(argv, "--model", req.Model)
	}
	switch {
	case req.Resume != "" && req.ConfigDir != "":
		// CarrySession copies the session there; the CLI imports it
		// into a new session of this worktree.
		argv = append(argv, "--session-file", filepath.Join(req.ConfigDir, GeminiHomeDir, GeminiResumeFile))
	case req.Resume != "":
		argv = append(argv, "--resume", req.Resume)
	}
	argv = append(argv, req.Args...)
	// -p takes the prompt as its value: a prompt starting with "-" is
	// still the value, not a flag.
	return append(argv, "--prompt="+req.Prompt), nil
}

func (gemini) Env(req RunRequest) []string { return nil }

func (gemini) Outcome(res Result, exitCode int) (status.Outcome, status.Reason) {
	return outcome(res, exitCode)
}

// GeminiHomeDir is the folder under the attempt's config folder that
// GEMINI_CLI_HOME points at: the CLI keeps its .gemini there.
const GeminiHomeDir = "gemini-home"

// attemptConfig gives each attempt a Gemini CLI home of its own
// (GEMINI_CLI_HOME): a .gemini whose settings.json is the user's with
// usage statistics off and, when the key comes from the env (inject or the
// step's GEMINI_API_KEY), the gemini-api-key auth type (without it the
// CLI picks another and exits 41), and links to the user's sign-in files.
// Sessions, history and the project registry stay the attempt's own, so
// one attempt cannot read another's conversation; continue_session copies
// the previous attempt's on purpose. (A system settings file would be
// simpler, but the CLI skips one under a world-writable folder such as
// /tmp.)
func (gemini) attemptConfig(dir string, in PrepareInput, home string, getenv func(string) string) ([]string, error) {
	gh := filepath.Join(dir, GeminiHomeDir)
	state := filepath.Join(gh, ".gemini")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	var user string
	if !in.FreshHome {
		if paths := geminiSpec.LoginPaths(home, getenv); len(paths) > 0 {
			user = paths[0]
		}
	}
	cfg := map[string]any{}
	if user != "" {
		if b, err := os.ReadFile(filepath.Join(user, "settings.json")); err == nil {
			// A file the CLI could not read either is not carried over.
			_ = json.Unmarshal(b, &cfg)
			if cfg == nil {
				cfg = map[string]any{}
			}
		}
		entries, _ := os.ReadDir(user)
		for _, e := range entries {
			if geminiPrivate[e.Name()] {
				continue
			}
			link := filepath.Join(state, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join(user, e.Name()), link); err != nil {
				return nil, err
			}
		}
	}
	set := func(v any, keys ...string) {
		m := cfg
		for _, k := range keys[:len(keys)-1] {
			next, _ := m[k].(map[string]any)
			if next == nil {
				next = map[string]any{}
				m[k] = next
			}
			m = next
		}
		m[keys[len(keys)-1]] = v
	}
	set(false, "privacy", "usageStatisticsEnabled")
	if in.Inject || setsEnv(in.StepEnv, "GEMINI_API_KEY") || setsEnv(in.StepEnv, "GOOGLE_API_KEY") {
		set("gemini-api-key", "security", "auth", "selectedType")
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(state, "settings.json"), append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("cannot write the attempt's Gemini settings.json: %v", err)
	}
	return []string{"GEMINI_CLI_HOME=" + gh}, nil
}

// geminiPrivate are the entries of ~/.gemini an attempt gets its own of:
// settings (kusaw's copy), sessions and logs (tmp), history, and the
// project and trust registries.
var geminiPrivate = map[string]bool{"settings.json": true, "tmp": true, "history": true, "projects.json": true, "trustedFolders.json": true}

// ParseStream reads Gemini CLI's stream-json: init (session and model),
// messages (the assistant's arrive as deltas, folded into one
// provider.text per reply), tool_use/tool_result, error lines and the
// final result with its stats.
func (gemini) ParseStream(r io.Reader, emit func(Event)) Result {
	var res Result
	var text, all strings.Builder
	flush := func() {
		if text.Len() > 0 {
			emit(Event{Type: EventText, Data: textData(text.String())})
			text.Reset()
		}
	}
	tools := map[string]string{}
	eachLine(r, func(line []byte) {
		res.Lines++
		m := obj(line)
		if m == nil {
			res.Malformed++
			return
		}
		typ := str(m, "type")
		if typ != "message" {
			flush()
		}
		switch typ {
		case "init":
			res.SessionID = str(m, "session_id")
			res.Model = str(m, "model")
			emit(Event{Type: EventInit, Data: map[string]any{"session_id": res.SessionID, "model": res.Model}})
		case "message":
			if str(m, "role") != "assistant" {
				flush()
				return
			}
			if !boolean(m, "delta") {
				flush()
			}
			if text.Len() < ResultTextLimit*2 {
				text.WriteString(str(m, "content"))
			}
			if all.Len() < ResultTextLimit*2 {
				all.WriteString(str(m, "content"))
			}
		case "tool_use":
			res.Tools++
			id := str(m, "tool_id")
			tools[id] = str(m, "tool_name")
			d := map[string]any{"phase": "started", "id": id, "name": str(m, "tool_name")}
			if s, cut := brief(m["parameters"]); s != "" {
				d["input"] = s
				if cut {
					d["truncated"] = true
				}
			}
			emit(Event{Type: EventTool, Data: d})
		case "tool_result":
			id := str(m, "tool_id")
			d := map[string]any{"phase": "completed", "id": id, "name": tools[id], "is_error": str(m, "status") != "success"}
			out := m["output"]
			if e := m["error"]; e != nil {
				out = e
			}
			if s, cut := brief(out); s != "" {
				d["output"] = s
				if cut {
					d["truncated"] = true
				}
			}
			emit(Event{Type: EventTool, Data: d})
		case "error":
			// A warning or a recoverable error the CLI reports and goes on.
			d := textData(str(m, "message"))
			d["warning"] = true
			d["severity"] = str(m, "severity")
			emit(Event{Type: EventText, Data: d})
		case "result":
			res.Seen = true
			res.Results++
			res.Subtype = str(m, "status")
			res.IsError = res.Subtype != "success"
			stats := sub(m, "stats")
			res.DurationMS, _ = integer(stats, "duration_ms")
			if u, ok := geminiUsage(stats); ok {
				res.Usage = &u
			}
			if res.IsError {
				res.Text = resultText(str(sub(m, "error"), "message"))
				if res.Text == "" {
					res.Text = resultText(str(m, "error"))
				}
			} else {
				res.Text = resultText(all.String())
			}
			emit(Event{Type: EventResult, Data: resultData(res), Usage: res.Usage})
		}
	}, func() { res.Lines++; res.Malformed++ })
	flush()
	return res
}

// geminiUsage maps the result's stats: input_tokens counts cached tokens
// too, "input" is the rest; per model under models.
func geminiUsage(stats map[string]any) (record.Usage, bool) {
	one := func(m map[string]any) (record.Usage, bool) {
		u, ok := tokens(m, "input", "output_tokens", "cached", "")
		if _, has := m["input"]; !has {
			if in, ok2 := integer(m, "input_tokens"); ok2 {
				u.InputTokens = in - u.CacheReadTokens
				ok = true
			}
		}
		return u, ok
	}
	u, ok := one(stats)
	if !ok {
		return u, false
	}
	for name, v := range sub(stats, "models") {
		mm, _ := v.(map[string]any)
		if mu, ok := one(mm); ok {
			if u.Models == nil {
				u.Models = map[string]*record.ModelUsage{}
			}
			u.Models[name] = &record.ModelUsage{InputTokens: mu.InputTokens, OutputTokens: mu.OutputTokens, CacheReadTokens: mu.CacheReadTokens}
		}
	}
	return u, true
}
