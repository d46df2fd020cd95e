package providers

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// Provider is one agent CLI kusaw can run as an agent step.
type Provider interface {
	// Name is the provider's name in factory.yaml (claude-code, cursor).
	Name() string
	// Spec is what kusaw knows about the CLI without running it.
	Spec() Spec
	// Probe runs `<command> --version` once per binary (path, size and
	// mtime) and reports what the engine and the sandbox need to know.
	// An empty command means Spec().DefaultCommand, then AltCommands.
	Probe(ctx context.Context, command string) (Probe, error)
	// Argv is the full argv (argv[0] is the command) of a headless run.
	Argv(req RunRequest) ([]string, error)
	// Env is what kusaw adds to the step's environment for this provider
	// ("NAME=value"); the step's own env is applied after it and wins.
	Env(req RunRequest) []string
	// ParseStream reads the CLI's stdout (stream-json) until EOF, calls emit
	// for each event worth recording and returns what the result said.
	// It never fails: malformed lines are counted and skipped.
	ParseStream(r io.Reader, emit func(Event)) Result
	// Outcome classifies a finished process from its result and exit code.
	// Timeouts and cancels are the engine's to classify before this.
	Outcome(res Result, exitCode int) (status.Outcome, status.Reason)
}

// Spec is the static knowledge of one provider.
type Spec struct {
	Name           string
	DefaultCommand string   // looked up on PATH when providers.<name>.command is unset
	AltCommands    []string // older or alternative names tried after DefaultCommand
	Env            EnvNames
	// LoginPaths lists the CLI's own state folders and files (login,
	// settings, sessions) for a home folder and an environment lookup.
	// The Linux sandbox mounts them read/write; nothing else of the home.
	LoginPaths func(home string, getenv func(string) string) []string
	// EgressHosts are what the CLI needs to work; added to an allowlist
	// when sandbox.egress.provider_hosts is true.
	EgressHosts []string
	// HandshakeHosts are login, telemetry and update hosts: listed for
	// warning W3, never allowed automatically.
	HandshakeHosts []string
	// Inject is how the egress proxy can hold the API key outside the
	// sandbox; nil when the CLI cannot be pointed at another endpoint.
	Inject *InjectSpec
	// ExtraDirsFlag is the flag that gives the agent more directories
	// (Claude Code's --add-dir); empty when the CLI has none.
	ExtraDirsFlag string
	// SandboxOffArgs is what turns the CLI's own sandbox off when kusaw's
	// sandbox wraps the step (nested sandboxes fail).
	SandboxOffArgs []string
	// CheckedAgainst names the CLI releases whose flags and stream this
	// provider was last checked against (shown on the capability page).
	CheckedAgainst string
	// Install is a one-line hint shown when the CLI is missing.
	Install string
	// Recognize tells this CLI's --version line from another program's
	// of the same name (nil: any).
	Recognize func(versionLine string) bool
	// Stream says what its stream becomes (the capability page's
	// stream_events note).
	Stream string
	// Cost is how far the result reports cost and usage, and what.
	Cost     Level
	CostNote string
	// Resume says how the CLI continues a session; empty when it cannot.
	Resume string
	// SessionByID: a new attempt in a new worktree can continue the
	// previous one's session (continue_session): the CLI finds it by its
	// id wherever it ran (Codex; Claude Code's --resume looks in every
	// project folder), or kusaw hands it the session's file (Gemini CLI,
	// whose --resume looks only in the working folder's sessions).
	SessionByID bool
	// LoginSessionDirs are the sub-folders of the CLI's login folder
	// that hold its sessions (Claude Code: projects). Inside kusaw's
	// sandbox they are the attempt's own (sandbox.LoginSession):
	// continue_session carries them to the run's next attempt only.
	LoginSessionDirs []string
	// Credentials are how the CLI's refresh changes the credentials files
	// of its login folder: the only change kusaw's sandbox carries back
	// to the user's file, and only after the step reached a token host
	// (docs/sandbox.md). A CLI without one gets no refreshed login back.
	Credentials []CredentialRefresh
}

// CredentialRefresh is one credentials file of a CLI's login folder and
// what its refresh changes.
type CredentialRefresh struct {
	File string // its name in the login folder
	// TokenHosts are the hosts the CLI refreshes its login at.
	TokenHosts []string
	// Tokens are the fields the refresh replaces, Expiry those it moves
	// forward (JSON pointers); every other value must stay.
	Tokens, Expiry []string
}

// EnvNames are the environment variables a provider's CLI reads.
type EnvNames struct {
	APIKey     string   // API key (the one inject replaces)
	LoginToken []string // long-lived login tokens, any one signs in; API key included when it works alone
	BaseURL    string   // API base URL (empty: the CLI has none)
	ConfigDir  string   // moves the CLI's state folder
}

// InjectSpec tells the egress proxy how to hold a provider's key.
type InjectSpec struct {
	Host       string // upstream API host
	Header     string // header the proxy sets to the real key
	BaseURLEnv string // env the step gets, pointing at the lease's local endpoint
	KeyEnv     string // env the step gets, set to the placeholder key
	Upstream   string // default upstream base URL (providers.<name>.base_url overrides)
	SecretKey  string // secret store key holding the real key
	// StripHeaders are the client's credential headers the proxy removes
	// before adding its own.
	StripHeaders []string
}

// PlaceholderKey is the value key_env gets inside the sandbox when inject
// holds the real key.
const PlaceholderKey = "factory-egress-placeholder"

// RunRequest is what the engine knows about one agent attempt.
type RunRequest struct {
	Command   string   // resolved command (a Probe's Path); empty: Spec().DefaultCommand
	Args      []string // providers.<name>.args
	Prompt    string   // the step's prompt (prompt_file already read)
	ExtraDirs []string // the attempt's other worktrees
	Sandboxed bool     // kusaw's sandbox wraps the process
	Network   string   // effective network: open | allowlist
	// UserSettings is extra Claude Code settings (a JSON object or a file
	// path) merged into the one --settings kusaw passes.
	UserSettings string
	// MaxTurns and MaxBudgetUSD are the step's limits, passed to a CLI
	// that can stop itself at them (Claude Code's --max-turns and
	// --max-budget-usd); 0: none.
	MaxTurns     int
	MaxBudgetUSD float64
	// Model is providers.<name>.model: the CLI's model flag, when set
	// and the user's args name none.
	Model string
	// BaseURL is providers.<name>.base_url when the proxy does not
	// inject: where a CLI that takes its base URL in argv (Codex) goes.
	BaseURL string
	// BaseURLFromEnv says the CLI's base URL is only known when the
	// process starts: the proxy's inject endpoint, or the step's own env
	// (Spec.Env.BaseURL). Argv then holds EnvRef markers that ExpandArgv
	// fills in from the final environment.
	BaseURLFromEnv bool
	// Resume is the session id the run continues (continue_session);
	// empty: a new session.
	Resume string
	// ConfigDir is the attempt's provider folder (PrepareInput.ConfigDir),
	// where CarrySession puts the session a CLI loads from a file.
	ConfigDir string
	// PromptFile is a file holding the prompt, for a CLI that reads it
	// from one (an agent described in the factory with {prompt_file}).
	PromptFile string
}

// baseURL is the base URL a CLI that takes it in argv should use: a
// marker for the env when it is only known at start, else BaseURL.
func (req RunRequest) baseURL(envName string) string {
	if req.BaseURLFromEnv && envName != "" {
		return EnvRef(envName)
	}
	return req.BaseURL
}

// envRefOpen starts an EnvRef marker. A NUL byte cannot be part of a
// real argument (checkPrompt and the args checks refuse it), so a marker
// is never mistaken for text the user wrote.
const envRefOpen = "\x00env:"

// EnvRef is a marker in an argv element for the value of env var name at
// the process's start.
func EnvRef(name string) string { return envRefOpen + name + "\x00" }

// ExpandArgv replaces the EnvRef markers in argv with values from lookup
// (the process's final environment: the step's env and the egress
// lease's). A marker whose variable is unset is an error naming it.
func ExpandArgv(argv []string, lookup func(string) (string, bool)) ([]string, error) {
	var out []string
	for i, a := range argv {
		if !strings.Contains(a, envRefOpen) {
			continue
		}
		if out == nil {
			out = append([]string(nil), argv...)
		}
		var b strings.Builder
		rest := a
		for {
			before, after, ok := strings.Cut(rest, envRefOpen)
			b.WriteString(before)
			if !ok {
				break
			}
			name, tail, ok := strings.Cut(after, "\x00")
			if !ok {
				return nil, fmt.Errorf("argument %d: an unterminated env marker", i)
			}
			v, set := lookup(name)
			if !set || v == "" {
				return nil, fmt.Errorf("the agent's base URL comes from %s, which is not set when it starts", name)
			}
			b.WriteString(v)
			rest = tail
		}
		out[i] = b.String()
	}
	if out == nil {
		return argv, nil
	}
	return out, nil
}

// DisplayArgv is argv as records show it: each EnvRef marker as ${NAME}.
func DisplayArgv(argv []string) []string {
	var out []string
	for i, a := range argv {
		if !strings.Contains(a, envRefOpen) {
			continue
		}
		if out == nil {
			out = append([]string(nil), argv...)
		}
		a = strings.ReplaceAll(a, envRefOpen, "${")
		out[i] = strings.ReplaceAll(a, "\x00", "}")
	}
	if out == nil {
		return argv
	}
	return out
}

// Event types emitted while parsing a stream: record's (its event table
// says what each carries and who may write it).
const (
	EventInit   = record.EvProviderInit
	EventTool   = record.EvProviderTool
	EventText   = record.EvProviderText
	EventResult = record.EvProviderResult
	EventRetry  = record.EvProviderRetry // the CLI retries a failed API call
	// EventUsage carries the running totals while the agent works (per
	// message, before the result): what limits are checked against.
	EventUsage = record.EvProviderUsage
	// EventThinking is one finished thinking phase (Cursor), its deltas
	// folded into one text.
	EventThinking = record.EvProviderThinking
)

// Event is one parsed stream event, ready to be written as an attempt event.
type Event struct {
	Type string
	Data map[string]any
	// Usage is set on provider.usage (the running totals) and on
	// provider.result when it reports usage: what limits are checked
	// against.
	Usage *record.Usage
}

// Result is what the stream said about the run. Zero when no result event
// was seen (Seen false).
type Result struct {
	Seen bool `json:"seen"`
	// Results counts result events: more than one fails the attempt
	// (provider.multiple_results), since which one decides is unclear.
	Results       int      `json:"results,omitempty"`
	IsError       bool     `json:"is_error"`
	Subtype       string   `json:"subtype,omitempty"`
	Turns         int      `json:"turns,omitempty"`
	DurationMS    int64    `json:"duration_ms,omitempty"`
	DurationAPIMS int64    `json:"duration_api_ms,omitempty"`
	CostUSD       *float64 `json:"cost_usd,omitempty"`
	// Usage is the result's usage when it reports one, else the running
	// totals of the messages seen (a process stopped before its result);
	// nil when the provider reported nothing.
	Usage             *record.Usage `json:"usage,omitempty"`
	SessionID         string        `json:"session_id,omitempty"`
	Model             string        `json:"model,omitempty"`
	Text              string        `json:"text,omitempty"` // truncated to ResultTextLimit
	PermissionDenials int           `json:"permission_denials,omitempty"`
	Tools             int           `json:"tools"`             // tool calls started
	Retries           int           `json:"retries,omitempty"` // API retries the CLI reported
	Lines             int           `json:"lines"`             // stream lines read
	Malformed         int           `json:"malformed"`         // lines that were not JSON objects
}

// Limits on text carried by events and results; the whole stream stays in
// stdout.log.
const (
	EventTextLimit  = 2000
	ResultTextLimit = 8000
	// MaxLineBytes bounds one stream line held in memory; longer lines are
	// skipped (counted as malformed), the stream goes on.
	MaxLineBytes = 32 << 20
	// MaxPromptBytes is below Linux's limit for one argv string (128 KiB).
	MaxPromptBytes = 120 << 10
)

var registry = map[string]Provider{}

func register(p Provider) { registry[p.Name()] = p }

// Default is the provider of an agent step that names none.
const Default = "claude-code"

// Get returns the provider with that name.
func Get(name string) (Provider, bool) {
	p, ok := registry[name]
	return p, ok
}

// Names lists the providers, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
