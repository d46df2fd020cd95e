package providers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// AgentDef describes an agent CLI kusaw has no built-in provider for
// (providers.NAME.agent in the factory), so a team adds an agent without
// a kusaw release.
type AgentDef struct {
	Name    string
	Command string // the program; argv[0] of the template when empty
	// Argv is the headless run, argv[0] the program (Command, when set,
	// replaces it): {prompt}, {prompt_file} (a file holding the prompt)
	// and {model} are filled in; an element naming {model} is left out
	// when no model is set (so --model={model} is written as one);
	// {sandbox_off} is where SandboxOffArgs go (default: after the
	// program).
	Argv []string
	// Format is "jsonl" (JSON lines; the result line decides) or "text"
	// (the exit code decides).
	Format string
	// JSON pointers (RFC 6901) into the stream's lines (jsonl only).
	// ResultWhen picks the result line: "/type=result" (the pointer's
	// value equals the text) or "/usage" (the pointer exists).
	ResultWhen string
	// Success is the result's success flag: a boolean, or a value
	// compared with SuccessValue when set. Empty: a result line means
	// success.
	Success, SuccessValue string
	Text, Session         string // the final text; the session id (any line)
	InputTokens           string
	OutputTokens          string
	CacheReadTokens       string
	CostUSD               string
	// Env names the CLI reads.
	APIKeyEnv, BaseURLEnv string
	LoginTokenEnv         []string
	// Env ("NAME=value") is set for every run; the step's env wins.
	Env []string
	// LoginFolders are the CLI's state folders (~/ is the home).
	LoginFolders []string
	EgressHosts  []string
	Handshake    []string
	// SandboxOffArgs are added when kusaw's sandbox wraps the step (the
	// CLI's own sandbox or approvals off).
	SandboxOffArgs []string
	// Inject: the API host and the header that carries the key; the CLI
	// is pointed at the proxy through BaseURLEnv.
	InjectHost, InjectHeader, InjectUpstream string
}

// generic is a provider described by an AgentDef.
type generic struct{ d AgentDef }

// NewAgent checks def and returns its provider. Errors name the key of
// providers.NAME.agent (the loader reports the same with its position).
func NewAgent(def AgentDef) (Provider, error) {
	if def.Name == "" {
		return nil, fmt.Errorf("agent: a name is needed")
	}
	if _, builtin := registry[def.Name]; builtin {
		return nil, fmt.Errorf("providers.%s.agent: %s is a built-in provider; give the agent another name", def.Name, def.Name)
	}
	where := "providers." + def.Name + ".agent"
	if len(def.Argv) == 0 {
		return nil, fmt.Errorf("%s.argv: write the headless run as [program, ..., \"{prompt}\"]", where)
	}
	if !strings.Contains(strings.Join(def.Argv[1:], "\x00"), "{prompt") {
		return nil, fmt.Errorf("%s.argv: name {prompt} or {prompt_file}, or the agent never gets the step's prompt", where)
	}
	switch def.Format {
	case "jsonl":
		if def.ResultWhen == "" {
			return nil, fmt.Errorf("%s.stream.result: with format jsonl, say which line is the result (e.g. \"/type=result\")", where)
		}
		for field, ptr := range map[string]string{"result": strings.SplitN(def.ResultWhen, "=", 2)[0], "success": def.Success, "text": def.Text, "session": def.Session,
			"usage.input_tokens": def.InputTokens, "usage.output_tokens": def.OutputTokens, "usage.cache_read_tokens": def.CacheReadTokens, "usage.cost_usd": def.CostUSD} {
			if ptr != "" && !strings.HasPrefix(ptr, "/") {
				return nil, fmt.Errorf("%s.stream.%s: %q is not a JSON pointer; write it as /key/sub", where, field, ptr)
			}
		}
	case "text":
	default:
		return nil, fmt.Errorf("%s.stream.format: %q is not jsonl or text", where, def.Format)
	}
	if (def.InjectHost == "") != (def.InjectHeader == "") || def.InjectHost != "" && (def.BaseURLEnv == "" || def.APIKeyEnv == "") {
		return nil, fmt.Errorf("%s.inject: needs host and header, and the agent's base_url_env and key_env", where)
	}
	return generic{def}, nil
}

func (g generic) Name() string { return g.d.Name }

func (g generic) Spec() Spec {
	d := g.d
	cmd := d.Command
	if cmd == "" {
		cmd = d.Argv[0]
	}
	s := Spec{Name: d.Name, DefaultCommand: cmd,
		Env:         EnvNames{APIKey: d.APIKeyEnv, LoginToken: d.LoginTokenEnv, BaseURL: d.BaseURLEnv},
		EgressHosts: d.EgressHosts, HandshakeHosts: d.Handshake, SandboxOffArgs: d.SandboxOffArgs,
		CheckedAgainst: "described in the factory (providers." + d.Name + ".agent); not checked by kusaw",
		Install:        "install " + cmd + " as its vendor says",
		LoginPaths: func(home string, _ func(string) string) []string {
			var out []string
			for _, f := range d.LoginFolders {
				if rest, ok := strings.CutPrefix(f, "~/"); ok {
					if home == "" {
						continue
					}
					f = filepath.Join(home, rest)
				}
				out = append(out, filepath.Clean(f))
			}
			return out
		},
	}
	if d.InjectHost != "" {
		up := d.InjectUpstream
		if up == "" {
			up = "https://" + d.InjectHost
		}
		s.Inject = &InjectSpec{Host: d.InjectHost, Header: d.InjectHeader, BaseURLEnv: d.BaseURLEnv, KeyEnv: d.APIKeyEnv, Upstream: up,
			SecretKey: "providers." + d.Name + ".api_key", StripHeaders: []string{strings.ToLower(d.InjectHeader), "authorization"}}
	}
	switch d.Format {
	case "jsonl":
		s.Stream = "the result line (" + d.ResultWhen + ") decides; its text, session and usage by JSON pointer; other lines are kept in stdout.log only"
	default:
		s.Stream = "plain output, kept in stdout.log; the exit code decides"
	}
	switch {
	case d.Format == "jsonl" && d.CostUSD != "":
		s.Cost, s.CostNote = Supported, "cost and tokens from the result line ("+d.CostUSD+")"
	case d.Format == "jsonl" && d.InputTokens != "":
		s.Cost, s.CostNote = Partial, "tokens from the result line; no cost, so limits.cost_usd is refused"
	default:
		s.Cost, s.CostNote = NotSupported, "the stream reports no usage"
	}
	return s
}

func (g generic) Probe(ctx context.Context, command string) (Probe, error) {
	return probe(ctx, g.Spec(), command)
}

// Argv fills the template. {prompt_file} needs req.PromptFile (Prepare
// writes the prompt there).
func (g generic) Argv(req RunRequest) ([]string, error) {
	if err := checkPrompt(g.d.Name, req.Prompt); err != nil {
		return nil, err
	}
	cmd := req.Command
	if cmd == "" {
		cmd = g.Spec().DefaultCommand
	}
	argv := []string{cmd}
	// The args that turn the CLI's own sandbox off go where argv says
	// ({sandbox_off}: after a subcommand), else right after the program.
	placed := slices.Contains(g.d.Argv, "{sandbox_off}")
	if req.Sandboxed && !placed {
		argv = append(argv, g.d.SandboxOffArgs...)
	}
	fill := strings.NewReplacer("{prompt}", req.Prompt, "{prompt_file}", req.PromptFile, "{model}", req.Model)
	for _, a := range g.d.Argv[1:] {
		if a == "{sandbox_off}" {
			if req.Sandboxed {
				argv = append(argv, g.d.SandboxOffArgs...)
			}
			continue
		}
		if strings.Contains(a, "{model}") && req.Model == "" {
			continue
		}
		if strings.Contains(a, "{prompt_file}") && req.PromptFile == "" {
			return nil, fmt.Errorf("%s: {prompt_file} needs the attempt's folder for the prompt", g.d.Name)
		}
		argv = append(argv, fill.Replace(a))
	}
	return append(argv, req.Args...), nil
}

func (g generic) Env(RunRequest) []string { return g.d.Env }

func (g generic) readsPromptFile() bool {
	return strings.Contains(strings.Join(g.d.Argv, "\x00"), "{prompt_file}")
}

func (g generic) Outcome(res Result, exitCode int) (status.Outcome, status.Reason) {
	if g.d.Format == "text" {
		if exitCode == 0 {
			return status.OutcomePassed, status.ReasonNone
		}
		return status.OutcomeFailed, status.ReasonProviderError
	}
	return outcome(res, exitCode)
}

func (g generic) ParseStream(r io.Reader, emit func(Event)) Result {
	var res Result
	if g.d.Format == "text" {
		eachLine(r, func([]byte) { res.Lines++ }, func() { res.Lines++ })
		return res
	}
	when, want, hasWant := strings.Cut(g.d.ResultWhen, "=")
	eachLine(r, func(line []byte) {
		res.Lines++
		m := obj(line)
		if m == nil {
			res.Malformed++
			return
		}
		if g.d.Session != "" && res.SessionID == "" {
			if s, ok := pointer(m, g.d.Session).(string); ok && s != "" {
				res.SessionID = s
				emit(Event{Type: EventInit, Data: map[string]any{"session_id": s}})
			}
		}
		v := pointer(m, when)
		if v == nil || hasWant && scalarText(v) != want {
			return
		}
		res.Seen = true
		res.Results++
		res.IsError = false
		if g.d.Success != "" {
			sv := pointer(m, g.d.Success)
			switch {
			case g.d.SuccessValue != "":
				res.IsError = scalarText(sv) != g.d.SuccessValue
			default:
				b, ok := sv.(bool)
				res.IsError = !ok || !b
			}
		}
		if g.d.Text != "" {
			if s, ok := pointer(m, g.d.Text).(string); ok {
				res.Text = resultText(s)
			}
		}
		var u record.Usage
		has := false
		for _, f := range []struct {
			ptr string
			dst *int64
		}{{g.d.InputTokens, &u.InputTokens}, {g.d.OutputTokens, &u.OutputTokens}, {g.d.CacheReadTokens, &u.CacheReadTokens}} {
			if n, ok := pointer(m, f.ptr).(json.Number); ok && f.ptr != "" {
				if i, err := n.Int64(); err == nil {
					*f.dst, has = i, true
				}
			}
		}
		if n, ok := pointer(m, g.d.CostUSD).(json.Number); ok && g.d.CostUSD != "" {
			if c, err := n.Float64(); err == nil {
				u.CostUSD, res.CostUSD, has = &c, &c, true
			}
		}
		if has {
			res.Usage = &u
		}
		emit(Event{Type: EventResult, Data: resultData(res), Usage: res.Usage})
	}, func() { res.Lines++; res.Malformed++ })
	return res
}

// pointer resolves an RFC 6901 JSON pointer in a decoded line; nil when
// it does not resolve.
func pointer(v any, ptr string) any {
	if ptr == "" {
		return nil
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
		if v == nil {
			return nil
		}
	}
	return v
}

func scalarText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}
