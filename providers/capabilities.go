package providers

import (
	"fmt"
	"sort"
	"strings"
)

// Level says how far a capability holds for one provider in one mode.
type Level string

const (
	Supported    Level = "supported"
	Partial      Level = "partial"
	NotSupported Level = "not_supported"
)

// Capability is something a step can require (steps.<id>.requires).
type Capability string

const (
	CapSandbox       Capability = "sandbox"
	CapNetwork       Capability = "network"
	CapInject        Capability = "inject"
	CapStreamEvents  Capability = "stream_events"
	CapResume        Capability = "resume"
	CapCostReporting Capability = "cost_reporting"
)

// Capabilities lists every capability with what it means, in page order.
var Capabilities = []struct {
	Name    Capability
	Meaning string
}{
	{CapSandbox, "the agent runs inside kusaw's OS sandbox (writes confined to the attempt)"},
	{CapNetwork, "outbound traffic is restricted to an allowlist through kusaw's egress proxy"},
	{CapInject, "the provider's API key stays outside the sandbox; the proxy adds it to requests"},
	{CapStreamEvents, "the provider's stream becomes provider.init/tool/text/result events"},
	{CapResume, "the agent's session files outlive the attempt, so a session can be resumed"},
	{CapCostReporting, "the result reports cost in USD and token usage"},
}

// Mode is the effective mode of an attempt, as far as capabilities care.
type Mode struct {
	Sandboxed bool   // effective sandbox mode is required
	Network   string // open | allowlist
	Inject    bool   // sandbox.egress.inject names this provider
	FreshHome bool   // the sandbox gives a fresh HOME (macOS)
}

// Cell is one capability's level and why.
type Cell struct {
	Capability Capability `json:"capability"`
	Level      Level      `json:"level"`
	Note       string     `json:"note"`
}

// Matrix is every capability of one provider in one mode.
type Matrix struct {
	Provider string `json:"provider"`
	Mode     Mode   `json:"mode"`
	Cells    []Cell `json:"capabilities"`
}

// Get returns the cell of a capability.
func (m Matrix) Get(c Capability) (Cell, bool) {
	for _, cell := range m.Cells {
		if cell.Capability == c {
			return cell, true
		}
	}
	return Cell{}, false
}

// Unmet checks a step's requires: list against the matrix. Unknown names
// and not_supported capabilities are errors (partial passes); each error
// is one line naming the capability and why.
func (m Matrix) Unmet(requires []string) []error {
	var errs []error
	for _, r := range requires {
		cell, ok := m.Get(Capability(r))
		if !ok {
			errs = append(errs, fmt.Errorf("unknown capability %q in requires; known: %s", r, strings.Join(CapabilityNames(), ", ")))
			continue
		}
		if cell.Level == NotSupported {
			errs = append(errs, &UnmetError{Capability: Capability(r), Provider: m.Provider, Note: cell.Note})
		}
	}
	return errs
}

// UnmetError is a capability a step requires that its provider does not
// have in the step's mode.
type UnmetError struct {
	Capability Capability
	Provider   string
	Note       string
}

func (e *UnmetError) Error() string {
	return fmt.Sprintf("requires %s, which %s does not support in this mode: %s", e.Capability, e.Provider, e.Note)
}

// CapabilityNames lists the capability names, in page order.
func CapabilityNames() []string {
	out := make([]string, len(Capabilities))
	for i, c := range Capabilities {
		out[i] = string(c.Name)
	}
	return out
}

// CapabilitiesOf computes the matrix of a provider in a mode. An unknown
// provider yields an empty matrix.
func CapabilitiesOf(provider string, m Mode) Matrix {
	p, ok := Get(provider)
	if !ok {
		return Matrix{Provider: provider, Mode: m}
	}
	return MatrixOf(p, m)
}

// MatrixOf computes the matrix of a provider already looked up (one the
// factory describes: Of).
func MatrixOf(p Provider, m Mode) Matrix {
	mx := Matrix{Provider: p.Name(), Mode: m}
	spec := p.Spec()
	ownOff := "its own sandbox is off (" + strings.Join(spec.SandboxOffArgs, " ") + ")"
	if len(spec.SandboxOffArgs) == 0 {
		ownOff = "no arguments turn a sandbox of its own off (sandbox_off_args)"
	}
	allow := m.Sandboxed && m.Network == "allowlist"
	add := func(c Capability, l Level, note string) {
		mx.Cells = append(mx.Cells, Cell{c, l, note})
	}

	switch {
	case !m.Sandboxed:
		add(CapSandbox, NotSupported, "the effective sandbox mode is off; set sandbox: required")
	case m.FreshHome:
		add(CapSandbox, Supported, fmt.Sprintf("fresh HOME; the agent signs in with %s from the step's env; %s", strings.Join(spec.Env.LoginToken, " or "), ownOff))
	default:
		add(CapSandbox, Supported, "its login folders are mounted read/write; "+ownOff)
	}

	switch {
	case allow:
		add(CapNetwork, Supported, "only allowlisted hosts through the egress proxy; handshake hosts need listing (W3)")
	case m.Network == "allowlist":
		add(CapNetwork, NotSupported, "network: allowlist has no effect while the sandbox is off (W2)")
	default:
		add(CapNetwork, NotSupported, "network: open leaves the network unrestricted; set network: allowlist")
	}

	switch {
	case spec.Inject == nil:
		key := spec.Env.APIKey
		if key == "" {
			key = "its key"
		}
		add(CapInject, NotSupported, "the CLI cannot be pointed at another API endpoint; keep "+key+" as a step secret")
	case !allow:
		add(CapInject, NotSupported, "inject needs a sandboxed step with network: allowlist (the proxy holds the key)")
	case !m.Inject:
		add(CapInject, NotSupported, "available: set sandbox.egress.inject: [provider] and store "+spec.Inject.SecretKey+" with --secret")
	default:
		add(CapInject, Supported, fmt.Sprintf("the proxy adds %s; the step sees %s=<local endpoint> and %s=%s; API keys only, not subscription logins", spec.Inject.Header, spec.Inject.BaseURLEnv, spec.Inject.KeyEnv, PlaceholderKey))
	}

	if g, ok := p.(generic); ok && g.d.Format == "text" {
		add(CapStreamEvents, NotSupported, spec.Stream)
	} else {
		add(CapStreamEvents, Supported, spec.Stream)
	}

	switch {
	case m.FreshHome:
		add(CapResume, NotSupported, "session files live in the fresh HOME, removed with the attempt's temp folder")
	case spec.Resume == "":
		add(CapResume, NotSupported, "the CLI cannot continue a session headless")
	case spec.SessionByID:
		add(CapResume, Supported, "the result records the session id; continue_session continues it in the run's next attempt ("+spec.Resume+")")
	default:
		add(CapResume, Supported, "session files stay in the CLI's login folders and the result records the session id ("+spec.Resume+"); continue_session is refused: the CLI keeps sessions per working folder")
	}

	add(CapCostReporting, spec.Cost, spec.CostNote)
	return mx
}

// PageModes are the effective modes the reference page shows.
var PageModes = []struct {
	Label string
	Mode  Mode
}{
	{"off", Mode{Network: "open"}},
	{"required, open", Mode{Sandboxed: true, Network: "open"}},
	{"required, allowlist", Mode{Sandboxed: true, Network: "allowlist"}},
	{"required, allowlist, inject", Mode{Sandboxed: true, Network: "allowlist", Inject: true}},
	{"required, allowlist, inject (macOS)", Mode{Sandboxed: true, Network: "allowlist", Inject: true, FreshHome: true}},
}

// CapabilitiesMarkdown renders docs/reference/capabilities.md.
func CapabilitiesMarkdown() string {
	var b strings.Builder
	b.WriteString("<!-- Generated by `go generate ./providers` from providers/capabilities.go. Do not edit. -->\n\n")
	b.WriteString("# Capability matrix\n\n")
	b.WriteString("What a step can require (`steps.<id>.requires`) of its provider in each effective mode. ")
	b.WriteString("A step that requires a capability that is `not_supported` for its provider and mode fails validation; `partial` passes. ")
	b.WriteString("`kusaw sandbox doctor` prints the matrix of each step. Linux and WSL mount the agent's login folders; ")
	b.WriteString("macOS gives the sandboxed agent a fresh HOME.\n\n")
	b.WriteString("| capability | meaning |\n|---|---|\n")
	for _, c := range Capabilities {
		fmt.Fprintf(&b, "| `%s` | %s |\n", c.Name, c.Meaning)
	}
	for _, name := range Names() {
		fmt.Fprintf(&b, "\n## %s\n\n", name)
		b.WriteString("| capability |")
		for _, pm := range PageModes {
			fmt.Fprintf(&b, " %s |", pm.Label)
		}
		b.WriteString("\n|---|")
		for range PageModes {
			b.WriteString("---|")
		}
		b.WriteString("\n")
		mats := make([]Matrix, len(PageModes))
		for i, pm := range PageModes {
			mats[i] = CapabilitiesOf(name, pm.Mode)
		}
		for _, c := range Capabilities {
			fmt.Fprintf(&b, "| `%s` |", c.Name)
			for _, mx := range mats {
				cell, _ := mx.Get(c.Name)
				fmt.Fprintf(&b, " %s |", cell.Level)
			}
			b.WriteString("\n")
		}
		b.WriteString("\nNotes:\n\n")
		for _, c := range Capabilities {
			seen := map[string][]string{}
			var order []string
			for i, mx := range mats {
				cell, _ := mx.Get(c.Name)
				if _, ok := seen[cell.Note]; !ok {
					order = append(order, cell.Note)
				}
				seen[cell.Note] = append(seen[cell.Note], PageModes[i].Label)
			}
			for _, note := range order {
				modes := strings.Join(seen[note], "; ")
				if len(seen[note]) == len(PageModes) {
					modes = "all modes"
				}
				fmt.Fprintf(&b, "- `%s` (%s): %s\n", c.Name, modes, note)
			}
		}
		p, _ := Get(name)
		s := p.Spec()
		b.WriteString("\n")
		fmt.Fprintf(&b, "- command: `%s`", s.DefaultCommand)
		if len(s.AltCommands) > 0 {
			fmt.Fprintf(&b, " (also `%s`)", strings.Join(s.AltCommands, "`, `"))
		}
		b.WriteString("\n")
		fmt.Fprintf(&b, "- egress hosts: %s\n", codeList(s.EgressHosts))
		fmt.Fprintf(&b, "- handshake hosts (never auto-allowed, W3): %s\n", codeList(s.HandshakeHosts))
		fmt.Fprintf(&b, "- login token env: %s\n", codeList(s.Env.LoginToken))
		if s.ExtraDirsFlag != "" {
			fmt.Fprintf(&b, "- other worktrees: `%s DIR` each\n", s.ExtraDirsFlag)
		}
		fmt.Fprintf(&b, "- checked against: %s\n", s.CheckedAgainst)
	}
	described(&b)
	return b.String()
}

// pageAgent is the agent the page's last section shows: one described in
// the factory, as docs/providers.md's worked example writes it.
var pageAgent = AgentDef{Name: "NAME", Argv: []string{"qwen", "{prompt}"}, Format: "jsonl", ResultWhen: "/type=result",
	InputTokens: "/usage/input_tokens", OutputTokens: "/usage/output_tokens", APIKeyEnv: "OPENAI_API_KEY", BaseURLEnv: "OPENAI_BASE_URL",
	SandboxOffArgs: []string{"--yolo"}, InjectHost: "api.openai.com", InjectHeader: "Authorization"}

// described writes the section on agents described in the factory: their
// matrix follows from what the description says.
func described(b *strings.Builder) {
	b.WriteString("\n## agents described in the factory (providers.NAME.agent)\n\n")
	b.WriteString("An agent CLI described in the factory file gets its matrix from its description; `kusaw sandbox doctor` prints it per step. ")
	b.WriteString("`inject` needs `agent.inject` with `key_env` and `base_url_env`; `stream_events` needs `stream.format: jsonl`; ")
	b.WriteString("`cost_reporting` is `supported` with `stream.usage.cost_usd`, `partial` with token pointers only; `resume` is never supported (kusaw does not know how the CLI continues a session). ")
	b.WriteString("The agent of docs/providers.md's worked example (jsonl, tokens, inject):\n\n")
	p, _ := NewAgent(pageAgent)
	b.WriteString("| capability |")
	for _, pm := range PageModes {
		fmt.Fprintf(b, " %s |", pm.Label)
	}
	b.WriteString("\n|---|")
	for range PageModes {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, c := range Capabilities {
		fmt.Fprintf(b, "| `%s` |", c.Name)
		for _, pm := range PageModes {
			cell, _ := MatrixOf(p, pm.Mode).Get(c.Name)
			fmt.Fprintf(b, " %s |", cell.Level)
		}
		b.WriteString("\n")
	}
}

func codeList(xs []string) string {
	ys := append([]string(nil), xs...)
	sort.Strings(ys)
	for i, x := range ys {
		ys[i] = "`" + x + "`"
	}
	if len(ys) == 0 {
		return "none"
	}
	return strings.Join(ys, ", ")
}
