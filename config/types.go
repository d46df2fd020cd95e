package config

import (
	"net/netip"
	"os"
	"sort"
	"time"
)

// Mode is a sandbox mode.
type Mode string

const (
	ModeUnset    Mode = ""
	ModeOff      Mode = "off"
	ModeRequired Mode = "required"
)

// Network is a sandbox network mode. NetworkNone is never written in a file:
// it is what a sandboxed attempt gets when it must have no network at all
// (kusaw sandbox exec without a factory).
type Network string

const (
	NetworkUnset     Network = ""
	NetworkOpen      Network = "open"
	NetworkAllowlist Network = "allowlist"
	// NetworkAudit runs like allowlist, but a host the allowlist lacks is
	// admitted and logged as would_refuse (the address guard still
	// refuses): a way to learn a step's allowlist.
	NetworkAudit Network = "audit"
	NetworkNone  Network = "none"
)

// Proxied reports whether the network goes through kusaw's proxy
// (allowlist or audit): the sandbox then has no other way out.
func (n Network) Proxied() bool { return n == NetworkAllowlist || n == NetworkAudit }

// StepKind says how a step is run.
type StepKind string

const (
	KindAgent   StepKind = "agent"
	KindBuiltin StepKind = "builtin"
	KindCommand StepKind = "command"
)

// Schema values that are part of the file format.
var (
	ProviderNames = []string{"claude-code", "codex", "cursor", "gemini", "opencode"}
	BuiltinNames  = []string{"checks", "diff"}
	Capabilities  = []string{"sandbox", "network", "inject", "stream_events", "resume", "cost_reporting"}
)

// DefaultProvider is the provider of an agent step that names none.
const DefaultProvider = "claude-code"

// Factory is a loaded factory.yaml.
type Factory struct {
	Path     string // absolute path of the file
	Dir      string // its directory; relative paths are resolved against it
	Version  int
	StateDir string // absolute
	// StateDirMode is state_dir_mode: the mode of the folders kusaw makes
	// under state_dir (files get it without execute); 0 means private
	// (0700 folders, 0600 files).
	StateDirMode os.FileMode

	Repos     map[string]*Repo
	RepoOrder []string

	Providers map[string]*ProviderConfig
	Setup     [][]string
	Sandbox   SandboxPolicy
	Serve     Serve
	// Caches are the factory's named caches (caches:), by name.
	Caches map[string]*Cache

	Pipelines     map[string]*Pipeline
	PipelineOrder []string
	Notify        []Notify // webhooks for every pipeline

	// Forges are the forges kusaw talks to (forges:), by name; Triggers
	// start runs from their events and from schedules (triggers:).
	Forges       map[string]*Forge
	Triggers     map[string]*Trigger
	TriggerOrder []string
	// Retention is retention:, nil when the file has none (serve then
	// removes nothing on its own).
	Retention *Retention

	Steps     map[string]*Step
	StepOrder []string

	pos map[string]Pos
}

// Pos is a line and column in the factory file (1-based).
type Pos struct{ Line, Column int }

// PosOf returns where the value at a key path (e.g. "steps.test.timeout")
// stands in the file, or the zero Pos.
func (f *Factory) PosOf(path string) Pos { return f.pos[path] }

// Repo is one git repository the factory works on.
type Repo struct {
	Name    string
	Path    string // absolute
	Base    string // branch, tag or commit; "" means the repo's HEAD
	Sandbox Mode
	// Include are globs of gitignored files copied from the main checkout
	// into each new worktree (repos.<name>.include).
	Include []string
	// Sparse are the folders an attempt's worktree checks out (git's
	// cone mode; repos.<name>.sparse); nil: the whole tree.
	Sparse []string
	// WriteLayer is how a sandboxed step writes the repo's worktree
	// (repos.<name>.write_layer): WriteLayerOverlay, or "" (none: the
	// tree itself).
	WriteLayer string
}

// WriteLayerOverlay: a sandboxed (bwrap) step writes its worktree through
// an overlay's upper layer, which kusaw applies afterwards: the commit and
// the clean-up of a reused tree then cost what the step changed.
const WriteLayerOverlay = "overlay"

// SecretRef names a value in the secret store.
type SecretRef struct{ Key string }

// ProviderConfig overrides a built-in provider.
type ProviderConfig struct {
	Command string
	Args    []string
	// ExitGrace is how long the agent may take to exit by itself after
	// its result event before kusaw stops it (0: DefaultExitGrace).
	ExitGrace time.Duration
	BaseURL   string
	// CAFile is providers.<name>.ca_file (absolute): a PEM file of the CA
	// certificates kusaw's proxy trusts, besides the system's, when inject
	// forwards to base_url (a gateway with a private CA).
	CAFile string
	// CAPEM is CAFile's content, read when the file is loaded: a run's
	// spec carries it, so a cluster worker needs no copy of the file.
	CAPEM  []byte
	APIKey *SecretRef
	// Model is the CLI's model (its --model flag) unless args name one.
	Model string
	// Agent describes an agent CLI kusaw has no built-in provider for
	// (providers.NAME.agent); nil for the built-in providers.
	Agent *Agent
}

// Agent is an agent CLI described in the factory file, so a team adds an
// agent without a kusaw release.
type Agent struct {
	// Argv is the headless run: argv[0] the program (providers.NAME.command
	// overrides it), {prompt}, {prompt_file} and {model} filled in.
	Argv   []string
	Format string // AgentJSONL or AgentText
	// JSON pointers into the stream's lines (format jsonl). Result and
	// Success are POINTER or POINTER=VALUE.
	Result, Success, Text, Session                      string
	InputTokens, OutputTokens, CacheReadTokens, CostUSD string
	// The environment names the CLI reads.
	KeyEnv, BaseURLEnv string
	LoginTokenEnv      []string
	// Env is set for every run (telemetry and update checks off); the
	// step's env wins. "NAME=value", in file order.
	Env []string
	// LoginFolders are its state folders (~/.NAME), mounted read/write in
	// the Linux sandbox like a built-in provider's.
	LoginFolders   []string
	EgressHosts    []string
	HandshakeHosts []string
	// SandboxOffArgs are added when kusaw's sandbox wraps the step: what
	// turns the CLI's own sandbox and approval prompts off.
	SandboxOffArgs []string
	// Inject: the API host, the header carrying the key, the upstream base
	// URL (default https://HOST); empty Host: the key cannot be injected.
	InjectHost, InjectHeader, InjectUpstream string
}

// Stream formats of an agent described in the factory.
const (
	AgentJSONL = "jsonl" // JSON lines; the result line decides
	AgentText  = "text"  // plain output; the exit code decides
)

// AgentPlaceholders are what an agent's argv may name.
var AgentPlaceholders = []string{"{prompt}", "{prompt_file}", "{model}", "{sandbox_off}"}

// KnowsProvider reports whether a step may name provider: a built-in one,
// or an agent this factory describes.
func (f *Factory) KnowsProvider(name string) bool {
	if contains(ProviderNames, name) {
		return true
	}
	pc := f.Providers[name]
	return pc != nil && pc.Agent != nil
}

// ProviderChoices lists the providers a step of f may name: the built-in
// ones, then the factory's agents, sorted.
func (f *Factory) ProviderChoices() []string {
	out := append([]string(nil), ProviderNames...)
	var agents []string
	for n, pc := range f.Providers {
		if pc.Agent != nil {
			agents = append(agents, n)
		}
	}
	sort.Strings(agents)
	return append(out, agents...)
}

// EnvValue is a step environment value: a literal, or a reference to the
// secret store that is resolved only when the step's process starts.
type EnvValue struct {
	Value  string
	Secret *SecretRef
}

// HostEntry is one allowlist entry as written, with its parsed pattern.
type HostEntry struct {
	Raw     string
	Pattern HostPattern
	Path    string // key path in the file, for messages
}

// InjectEntry is one inject rule. Provider is true for the string "provider":
// the step's provider's own inject spec.
type InjectEntry struct {
	Provider   bool
	Host       string
	Header     string
	Secret     string
	BaseURL    string
	BaseURLEnv string
	KeyEnv     string
}

// Budgets are egress byte limits; zero means no limit.
type Budgets struct {
	Enabled bool
	PerHost int64
	Total   int64
}

// Egress is the proxy policy.
type Egress struct {
	Allow         []HostEntry
	ProviderHosts bool
	Inject        []InjectEntry
	AllowRanges   []netip.Prefix
	Resolver      string
	Budgets       Budgets
	// UpstreamProxy, when set, is the proxy kusaw's proxy reaches allowed
	// hosts through (CONNECT), after its own checks.
	UpstreamProxy *UpstreamProxy
	// UpstreamNoProxy are hosts dialled directly although UpstreamProxy
	// is set.
	UpstreamNoProxy []HostEntry
}

// UpstreamProxy is sandbox.egress.upstream_proxy: an http:// or https://
// proxy with a port, and optionally "user:password" from the secret store.
type UpstreamProxy struct {
	URL         string
	Credentials *SecretRef
}

// SandboxPolicy is the factory-wide sandbox section.
type SandboxPolicy struct {
	Mode       Mode
	Network    Network
	AllowRead  []string
	AllowWrite []string
	Egress     Egress
	Resources  Resources
	// SettingsScriptsWritable are paths (relative to each repo's top) that
	// agent or editor settings name and that steps may change anyway.
	SettingsScriptsWritable []string
}

// Resources bound each attempt's processes (sandbox.resources, and a
// step's own, which wins field by field). Zero means kusaw's default.
type Resources struct {
	Pids   int   // processes and threads at once
	Memory int64 // bytes
	CPU    int   // cores
	Disk   int64 // bytes in the attempt's tmp and worktrees
	Output int64 // bytes of stdout and stderr together
}

// EffectiveResources are the step's resources: its own fields over the
// factory's. Zero fields are left for kusaw's defaults.
func (f *Factory) EffectiveResources(s *Step) Resources {
	r := f.Sandbox.Resources
	if s != nil && s.Sandbox != nil && s.Sandbox.Resources != nil {
		o := s.Sandbox.Resources
		if o.Pids > 0 {
			r.Pids = o.Pids
		}
		if o.Memory > 0 {
			r.Memory = o.Memory
		}
		if o.CPU > 0 {
			r.CPU = o.CPU
		}
		if o.Disk > 0 {
			r.Disk = o.Disk
		}
		if o.Output > 0 {
			r.Output = o.Output
		}
	}
	return r
}

// Serve holds the daemon's settings.
type Serve struct {
	MaxParallel int // 0: the number of cores
	Listen      string
	Resume      bool
	// PublicURL is where people reach serve's web page (its links in forge
	// comments); "" means no links.
	PublicURL string
	// Cluster is nil when serve runs everything itself (no serve.cluster).
	Cluster *Cluster
}

// Cluster is serve.cluster: attempts run on workers over NATS JetStream
// (docs/cluster.md).
type Cluster struct {
	Listen  string // host:port workers connect to (embedded server)
	NatsURL string // an existing NATS cluster instead of the embedded one (comma-separated URLs)
	// With NatsURL: the account serve works in (its public nkey), the
	// account signing seed in the secret store, the cluster's CA bundle
	// ("" = the system's roots) and the replicas of streams and buckets.
	Account    string
	SigningKey *SecretRef
	CA         string
	Replicas   int
	// With NatsURL, optional, all three or none: the system account's
	// public key, a signing seed of it scoped to kusaw's account JWT, and
	// an operator signing seed; with them kusaw workers retire revokes
	// the worker's user key on the account.
	SystemAccount string
	SystemKey     *SecretRef
	OperatorKey   *SecretRef
	LocalWorker   bool          // serve runs attempts of pool default itself (default true)
	LostAfter     time.Duration // a worker silent this long is lost (default 15s)
	// MaxRunning bounds the attempts on workers at once (0: only the
	// workers' own slots do); serve.max_parallel bounds serve's own.
	MaxRunning int
}

// DefaultLostAfter is serve.cluster.lost_after's default.
const DefaultLostAfter = 15 * time.Second

// DefaultPool is the pool of a step that names none.
const DefaultPool = "default"

// StepSandbox is a step's sandbox override: a string sets the mode, a map
// sets the mode and network and adds to the factory's lists.
type StepSandbox struct {
	Mode       Mode
	Network    Network
	AllowRead  []string
	AllowWrite []string
	Allow      []HostEntry
	Inject     []InjectEntry
	// InjectSet is true when the step names egress.inject itself (even
	// as an empty list): then it replaces the factory's inject.
	InjectSet bool
	// Resources, when set, override the factory's field by field.
	Resources *Resources
}

// Step is one unit of work.
type Step struct {
	ID         string
	Provider   string // agent steps (defaulted to DefaultProvider)
	Builtin    string
	Run        []string
	Prompt     string
	PromptFile string // absolute
	Repos      []string
	PerRepo    bool
	Attempts   int
	Timeout    time.Duration
	Env        map[string]EnvValue
	EnvOrder   []string
	Sandbox    *StepSandbox
	Requires   []string
	// Limits bound each attempt (steps.<id>.limits); nil: none.
	Limits *Limits
	// Pool is the workers' pool that runs it; "" is DefaultPool.
	Pool string
	// Caches are the step's own caches (steps.<id>.caches), by name.
	Caches map[string]*Cache
	// Ports is how many free host ports each attempt leases (KUSAW_PORT_n).
	Ports int

	// Pipeline shapes (config/shapes.go).
	Retry      *Retry // nil: attempts alone, retried on any failure
	Candidates int    // 0: one attempt at a time; 2..10: that many at once
	// CandidateProviders is candidates written as a list: candidate k
	// (from 0) runs with provider CandidateProviders[k]. Empty: every
	// candidate runs with Provider.
	CandidateProviders []string
	Select             Select // with candidates; "" means first
	Judge              string // select: judge:STEP
	OnFailure          string // a fixer step run between failed attempts
	ContinueOnFailure  bool   // the step's failure does not fail its group or run
	// ContinueSession: a retry or fix loop's next attempt continues the
	// agent's session of the attempt before it (same run only).
	ContinueSession bool
	Resolve         string // on a group's first step: finishes a conflicted merge
	Gate            *Gate  // wait for approval before the step runs
	retryAttempts   bool   // retry.attempts was written
}

// Kind says whether the step is an agent, built-in or command step.
func (s *Step) Kind() StepKind {
	switch {
	case s.Builtin != "":
		return KindBuiltin
	case len(s.Run) > 0:
		return KindCommand
	default:
		return KindAgent
	}
}

// ActiveRepos returns the repos the step works on: its own list, or all.
func (f *Factory) ActiveRepos(s *Step) []string {
	if len(s.Repos) > 0 {
		return s.Repos
	}
	return f.RepoOrder
}

// Pipeline is one pipelines.<name>: written as a list (the shorthand) or
// as a map {steps: [...], ...}.
type Pipeline struct {
	Name  string
	Steps []PipelineItem
	// Limits bound the whole run (pipelines.<name>.limits); nil: none.
	Limits *Limits
	// Deliver is where a successful run's work goes; nil: nowhere.
	Deliver *Deliver
	Notify  []Notify // adds to the factory's
}

// PipelineItem is one item of a pipeline's steps: a step id, or a parallel
// group of step ids that start from the same run-branch tip.
type PipelineItem struct {
	Step  string   // set for a single step
	Group []string // set for a parallel group (two or more steps)
}

// IDs are the item's step ids: the step, or the group's members.
func (it PipelineItem) IDs() []string {
	if it.Group != nil {
		return it.Group
	}
	return []string{it.Step}
}

// StepIDs are every step id of the pipeline in written order, groups
// flattened.
func (p *Pipeline) StepIDs() []string {
	var out []string
	for _, it := range p.Steps {
		out = append(out, it.IDs()...)
	}
	return out
}
