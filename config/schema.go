package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The schema of factory.yaml: one tree that `kusaw schema` renders as JSON
// Schema (draft 2020-12) for editors, and that the decoder is checked
// against in TestSchemaMatchesDecoder: every map the decoder reads must
// list exactly the keys the schema has there, and every value must be read
// as the schema's kind says. A key added to the decoder but not here fails
// that test with the key's path; add it below with a description.

// SchemaID is the schema's $id: a name, not a place (kusaw init points
// editors at a local copy).
const SchemaID = "urn:kusaw:factory:1"

// nodeKind is what the decoder reads a value as (the names the decoder's
// trace uses).
type nodeKind string

const (
	kindObject   nodeKind = "object"   // fixed keys
	kindMap      nodeKind = "map"      // keys are names the user picks
	kindText     nodeKind = "text"     // any scalar, read as its text
	kindBool     nodeKind = "bool"     // true or false
	kindInt      nodeKind = "int"      // a whole number
	kindNumber   nodeKind = "number"   // a number, fractions allowed
	kindDuration nodeKind = "duration" // a Go duration
	kindSize     nodeKind = "size"     // a byte size
	kindEnum     nodeKind = "enum"     // one of a few words
	kindList     nodeKind = "list"     // a list of scalars
	kindArray    nodeKind = "array"    // a list of other values
	kindOneOf    nodeKind = "oneOf"    // one of several shapes
)

// schemaNode is one value of factory.yaml.
type schemaNode struct {
	kind     nodeKind
	desc     string
	values   []string      // enum words; for a map, its allowed key names
	pattern  string        // text, and list items
	min, max *int          // int
	minItems int           // list, array
	unique   bool          // list: no item twice
	props    []*schemaProp // object
	elem     *schemaNode   // map values, array items
	alts     []*schemaNode // oneOf
	required []string      // object
	keyPat   string        // map keys
	// names are the keys a map always knows without being limited to
	// them (the built-in providers; the file may describe more): what
	// kusaw config set checks a key against, never rendered.
	names    []string
	constInt *int
	// inline: the decoder checks this alternative itself, without a
	// traced read (inject: provider).
	inline bool
}

type schemaProp struct {
	name string
	node *schemaNode
}

func p(name string, n *schemaNode) *schemaProp { return &schemaProp{name, n} }

func object(desc string, props ...*schemaProp) *schemaNode {
	return &schemaNode{kind: kindObject, desc: desc, props: props}
}
func mapOf(desc, keyPat string, elem *schemaNode) *schemaNode {
	return &schemaNode{kind: kindMap, desc: desc, keyPat: keyPat, elem: elem}
}
func text(desc string) *schemaNode { return &schemaNode{kind: kindText, desc: desc} }
func boolean(desc string) *schemaNode {
	return &schemaNode{kind: kindBool, desc: desc}
}
func integer(desc string, lo, hi *int) *schemaNode {
	return &schemaNode{kind: kindInt, desc: desc, min: lo, max: hi}
}
func duration(desc string) *schemaNode { return &schemaNode{kind: kindDuration, desc: desc} }
func size(desc string) *schemaNode     { return &schemaNode{kind: kindSize, desc: desc} }
func enum(desc string, values ...string) *schemaNode {
	return &schemaNode{kind: kindEnum, desc: desc, values: values}
}
func list(desc string) *schemaNode { return &schemaNode{kind: kindList, desc: desc} }
func array(desc string, elem *schemaNode) *schemaNode {
	return &schemaNode{kind: kindArray, desc: desc, elem: elem}
}
func oneOf(desc string, alts ...*schemaNode) *schemaNode {
	return &schemaNode{kind: kindOneOf, desc: desc, alts: alts}
}
func intp(i int) *int { return &i }

// Patterns shared by the decoder and the schema.
const (
	idPatternText      = `^[A-Za-z0-9][A-Za-z0-9_.-]*$`
	envNamePatternText = `^[A-Za-z_][A-Za-z0-9_]*$`
	// durationPattern is what time.ParseDuration takes (without a sign).
	durationPattern = `^([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))*$`
	// zeroDurationPattern is a duration of nothing, which the decoder
	// refuses: a duration is positive.
	zeroDurationPattern = `^([0.]+(ns|us|µs|ms|s|m|h))+$`
	// sizePattern is what ParseSize takes.
	sizePattern = `^ *[0-9]*\.?[0-9]+ *(KiB|MiB|GiB|TiB|KB|MB|GB|TB|K|M|G|T|B)? *$`
)

var (
	modes        = []string{string(ModeOff), string(ModeRequired)}
	networkModes = []string{string(NetworkOpen), string(NetworkAllowlist), string(NetworkAudit)}
)

func secretRefNode(desc string) *schemaNode {
	n := object(desc, p("secret", text("the key in kusaw's secret store (kusaw config set KEY --secret)")))
	n.required = []string{"secret"}
	return n
}

func injectNode(desc string) *schemaNode {
	provider := enum(`"provider": the step's provider's own key, host and variables`, "provider")
	provider.inline = true
	entry := object("an API key the proxy adds to requests to one host",
		p("host", text("the exact host whose requests get the key")),
		p("header", text("the request header that carries the key (the proxy removes the client's own)")),
		p("secret", text("the secret-store key holding the value")),
		p("base_url", text("the upstream the proxy forwards to over verified TLS (default https://HOST)")),
		p("base_url_env", text("the variable the step gets set to the local endpoint")),
		p("key_env", text("the variable the step gets set to the placeholder key")),
	)
	entry.required = []string{"host", "header", "secret", "base_url_env", "key_env"}
	for _, pr := range entry.props {
		if pr.name == "base_url_env" || pr.name == "key_env" {
			pr.node.pattern = envNamePatternText
		}
	}
	items := oneOf("", provider, entry)
	return oneOf(desc, provider, array("", items))
}

func limitsNode(desc string) *schemaNode {
	return object(desc,
		p("cost_usd", &schemaNode{kind: kindNumber, desc: "USD, from the cost the provider reports"}),
		p("tokens", integer("every token the provider counted (input, output, cache)", intp(1), nil)),
		p("turns", integer("agent turns (API round trips)", intp(1), nil)),
		p("duration", duration("wall time")),
	)
}

// pipelineSteps is a pipeline's list: step ids, or lists of two or more
// step ids that run at the same time (a parallel group).
func pipelineSteps(desc string) *schemaNode {
	id := &schemaNode{kind: kindText, desc: "a step id", pattern: idPatternText, inline: true}
	group := list("a parallel group: steps that start from the same run-branch tip; their commits merge in written order")
	group.pattern = idPatternText
	group.minItems = 2
	group.unique = true
	steps := array(desc, oneOf("", id, group))
	steps.minItems = 1
	return steps
}

func hostList(desc string) *schemaNode {
	return list(desc + `: a name, *.suffix (subdomains only), each with an optional :port; no IP literals`)
}

// factorySchema builds the tree. It is a function (not a variable) so
// that no package initialiser pays for it: kusaw's start-up is measured.
func factorySchema() *schemaNode {
	repo := object("a local git repository the factory works on",
		p("path", text("its folder, relative to the factory file (or ~/...)")),
		p("base", text("the branch, tag or commit each run starts from (default: the repository's HEAD)")),
		p("sandbox", enum("the sandbox mode of attempts whose active repos include this one", modes...)),
		p("include", list("globs of gitignored files (.env, config/local.yaml) copied from the main checkout into each new worktree, outside the sandbox; never committed")),
		p("sparse", list("folders an attempt's worktree checks out (git's sparse-checkout cone mode: each folder whole, and the files at the top and in the folders leading to one); the attempt's commit keeps everything else as in its base")),
		p("write_layer", enum("overlay: a sandboxed step (bwrap, Linux) writes the worktree through an overlay's upper layer, applied by kusaw afterwards, so the commit and the clean-up of a reused tree look only at what the step changed; none (default): the step writes the tree itself", WriteLayerOverlay, "none")),
	)
	repo.required = []string{"path"}

	provider := object("overrides of one built-in agent provider, or (with agent) an agent CLI described here",
		p("command", text("the CLI: a name on PATH or a path")),
		p("args", list("arguments added to every run of this provider")),
		p("base_url", text("the upstream inject forwards to (an API gateway may replace the provider's own)")),
		p("ca_file", text("a PEM file of CA certificates kusaw's proxy trusts, besides the system's, for base_url under inject (a gateway with a private CA)")),
		p("api_key", secretRefNode("the provider's API key, from the secret store (never written in the file)")),
		p("exit_grace", duration("how long the agent may take to exit by itself after its result before kusaw stops it (default 5s)")),
		p("model", text("the model the CLI runs (its --model), unless args name one; e.g. gpt-5-codex, gemini-2.5-pro, sonnet")),
		p("agent", agentNode()),
	)
	providers := mapOf("the built-in agent providers' overrides ("+strings.Join(ProviderNames, ", ")+"), and agent CLIs described with agent:, by name", idPatternText, provider)
	providers.names = ProviderNames

	budgets := object("byte limits of the egress proxy, counted on the wire; past one, new connections are refused",
		p("per_host", size("bytes per host (default 512MiB)")),
		p("total", size("bytes in all (default 2GiB)")),
		p("enabled", boolean("false turns the budgets off")),
	)
	egress := object("the egress proxy's policy for attempts with network: allowlist",
		p("allow", hostList("hosts an attempt may reach")),
		p("provider_hosts", boolean("add each agent provider's own API hosts to the list (default true)")),
		p("inject", injectNode("API keys the proxy holds outside the sandbox and adds to requests")),
		p("allow_ranges", list("CIDRs an allowed name may resolve to although they are private (an internal registry)")),
		p("resolver", text("host:port of the DNS server the proxy asks (default: the system's)")),
		p("budgets", budgets),
		p("upstream_proxy", oneOf("a corporate proxy the egress proxy reaches allowed hosts through with CONNECT, after its own checks (kusaw never reads its own HTTPS_PROXY)",
			&schemaNode{kind: kindText, desc: "http://HOST:PORT or https://HOST:PORT", pattern: `^https?://[^/@]+:[0-9]+/?$`},
			object("the proxy with credentials",
				p("url", &schemaNode{kind: kindText, desc: "http://HOST:PORT or https://HOST:PORT", pattern: `^https?://[^/@]+:[0-9]+/?$`}),
				p("credentials", secretRefNode(`"user:password" for the proxy, from the secret store`)),
			))),
		p("upstream_no_proxy", hostList("hosts dialled directly although upstream_proxy is set")),
	)
	resources := object("bounds on each attempt's processes (a limit reached ends the attempt with resource_limit naming it); kusaw sandbox check --verbose says how this machine enforces each",
		p("pids", integer("processes and threads at once (default 4096)", intp(1), nil)),
		p("memory", size("memory of all the attempt's processes (default half the machine's memory)")),
		p("cpu", integer("cores (default: all)", intp(1), nil)),
		p("disk", size("bytes in the attempt's tmp folder and worktrees (default 20GiB)")),
		p("output", size("bytes of stdout and stderr together (default 1GiB)")),
	)
	sandbox := object("the factory-wide sandbox and egress policy",
		p("mode", enum("off (default) or required: whether attempts run in the OS sandbox", modes...)),
		p("network", enum("open (default) or allowlist: the network of a sandboxed attempt", networkModes...)),
		p("allow_read", list("extra paths visible read-only in the sandbox")),
		p("allow_write", list("extra writable paths; /, system folders, the home and above and credential folders are refused")),
		p("egress", egress),
		p("resources", resources),
		p("settings_scripts_writable", list("paths relative to a repo's top that agent or editor settings name (a hook's script, an MCP server's file) and that steps may change anyway, such as build output; never in .git")),
	)
	serve := object("settings of kusaw serve",
		p("max_parallel", integer("attempts serve runs itself at once, across runs and within a run's parallel groups and candidates; 0: the number of cores (attempts on workers are bounded by their slots and serve.cluster.max_running)", intp(0), nil)),
		p("listen", text("an extra TCP address host:port for the API and the web page (with a bearer token)")),
		p("resume", boolean("after a crash, queue interrupted runs again from their first step that did not pass")),
		p("public_url", text("where people reach serve's web page, e.g. https://kusaw.example.com: forge comments link to a run's page there")),
		p("cluster", object("run attempts on workers (kusaw worker) over NATS JetStream; absent: serve runs everything itself",
			p("listen", text("host:port the embedded NATS server listens on for workers (TLS with serve's own CA, enrolled keys only)")),
			p("nats_url", &schemaNode{kind: kindText, desc: "an existing NATS cluster (nats:// or tls://, several comma-separated; always TLS) instead of the embedded server; not with listen", pattern: `^(nats|tls)://[^/]+`}),
			p("account", &schemaNode{kind: kindText, desc: "with nats_url: the public key (A...) of the NATS account serve and its workers use", pattern: `^A[A-Z2-7]{55}$`}),
			p("signing_key", secretRefNode("with nats_url: a signing seed (SA...) of that account, from the secret store; serve signs its own and its workers' credentials with it")),
			p("ca", text("with nats_url: a PEM file of the CA certificates the NATS servers' certificates chain to (default: the system's roots)")),
			p("system_account", &schemaNode{kind: kindText, desc: "with nats_url, optional: the public key (A...) of the NATS system account; with system_key and operator_key kusaw workers retire revokes the worker's key on the account", pattern: `^A[A-Z2-7]{55}$`}),
			p("system_key", secretRefNode("with system_account: a signing seed (SA...) of the system account, scoped to looking up and updating kusaw's account (kusaw cluster nats-config makes one), from the secret store")),
			p("operator_key", secretRefNode("with system_account: an operator signing seed (SO...) of the operator that signed the account, from the secret store; serve signs the account's JWT anew with each revocation")),
			p("replicas", integer("with nats_url: copies of each stream and bucket across the NATS cluster's JetStream servers (1 to 5, default 1)", intp(1), intp(5))),
			p("local_worker", boolean("serve runs attempts of pool default itself (default true)")),
			p("lost_after", duration("a worker silent this long is lost; its attempts end lost and are dispatched again (default 15s)")),
			p("max_running", integer("at most this many attempts on workers at once (default: as many as the live workers have slots; serve.max_parallel bounds serve's own attempts only)", intp(0), nil)),
		)),
	)
	stepSandbox := oneOf("the step's sandbox: off or required, or a map that also sets the network and adds to the factory's lists",
		enum("", modes...),
		object("",
			p("mode", enum("off or required", modes...)),
			p("network", enum("open or allowlist", networkModes...)),
			p("allow_read", list("extra read-only paths for this step")),
			p("allow_write", list("extra writable paths for this step")),
			p("egress", object("this step's additions to the egress policy",
				p("allow", hostList("hosts added to the factory's list for this step")),
				p("inject", injectNode("replaces the factory's inject for this step")),
			)),
			p("resources", resources),
		),
	)
	envValue := oneOf("a value, or {secret: KEY} read from the secret store when the process starts",
		text(""), secretRefNode(""))
	step := object("one unit of work: an agent step (prompt), a built-in step (builtin) or a command step (run)",
		p("provider", &schemaNode{kind: kindText, pattern: idPatternText, desc: "the agent CLI of an agent step (default claude-code): " + strings.Join(ProviderNames, ", ") + ", or one described under providers.NAME.agent"}),
		p("builtin", enum("a built-in step", BuiltinNames...)),
		p("run", list("the argv of a command step: [program, arg, ...]")),
		p("prompt", text("the agent's task")),
		p("prompt_file", text("a file holding the agent's task, relative to the factory file")),
		p("repos", list("the repos the step works on (default: all)")),
		p("per_repo", boolean("one process and one sandbox per active repo; only that repo is writable")),
		p("attempts", integer("tries before the step fails", intp(1), intp(100))),
		p("timeout", duration("per attempt; then SIGTERM to the process group, SIGKILL after a grace period")),
		p("env", mapOf("extra environment of the step's process", envNamePatternText, envValue)),
		p("sandbox", stepSandbox),
		p("requires", list("capabilities the step needs; validate fails when one is missing: "+fmt.Sprint(Capabilities))),
		p("limits", limitsNode("bounds on each attempt; past one the attempt ends with limit_reached")),
		p("pool", &schemaNode{kind: kindText, desc: "the pool of workers that runs the step's attempts (default: default)", pattern: poolPatternText}),
		p("caches", cachesNode("the step's own caches; a name the factory also has replaces the factory's")),
		p("ports", integer("free host ports each attempt leases, as KUSAW_PORT_1..N; never the same for two running attempts", intp(0), intp(MaxPorts))),
	)
	step.props = append(step.props, shapeProps()...)
	for _, pr := range step.props {
		if pr.name == "requires" {
			pr.node.values = Capabilities
		}
	}
	pipeline := oneOf("the steps in order (a list), or a map with the steps and settings of the whole run",
		pipelineSteps("step ids run in order; a list of step ids is a parallel group"),
		object("",
			p("steps", pipelineSteps("step ids run in order; a list of step ids is a parallel group")),
			p("limits", limitsNode("bounds on the whole run")),
			p("deliver", deliverNode()),
			p("notify", notifyNode("webhooks for this pipeline's runs, added to the factory's")),
		),
	)
	for _, pr := range pipeline.alts[1].props {
		if pr.name == "steps" {
			pipeline.alts[1].required = []string{"steps"}
		}
	}

	setupCmd := list("a command: [program, arg, ...]")
	setupCmd.minItems = 1
	root := object("a kusaw factory: the repositories it works on, its steps and the pipelines that chain them",
		p("version", &schemaNode{kind: kindInt, desc: "the file format's version: 1", constInt: intp(1)}),
		p("state_dir", text("where runs and attempts are recorded, relative to the file (default .kusaw)")),
		p("state_dir_mode", &schemaNode{kind: kindText, pattern: `^0?7[0145][0145]$`, desc: `the mode of the folders under state_dir, in octal ("0750" shares the records with your group; files get the same bits without execute; no one else may write); default "0700": private to kusaw's user`}),
		p("repos", mapOf("the git repositories the factory works on, by name", idPatternText, repo)),
		p("providers", providers),
		p("setup", array("commands run in every new worktree before the step: on the host on the run's starting commit, inside the step's sandbox on commits a step of the run may have written", setupCmd)),
		p("sandbox", sandbox),
		p("serve", serve),
		p("caches", cachesNode("named caches shared by the attempts of the factory, mounted read-write into the sandbox of each step, one writer at a time")),
		p("pipelines", mapOf("named pipelines", idPatternText, pipeline)),
		p("steps", mapOf("the steps, by id", idPatternText, step)),
		p("notify", notifyNode("webhooks for every pipeline's runs")),
		p("forges", forgesNode()),
		p("triggers", mapOf("what starts runs besides kusaw run: a forge's event or a schedule (docs/intake.md)", idPatternText, triggerNode())),
		p("retention", retentionNode()),
	)
	root.required = []string{"version", "pipelines"}
	return root
}

// JSONSchema renders the factory file's JSON Schema (draft 2020-12).
func JSONSchema() []byte {
	var b bytes.Buffer
	w := &jw{b: &b}
	w.open('{')
	w.kv("$schema", "https://json-schema.org/draft/2020-12/schema")
	w.kv("$id", SchemaID)
	w.kv("title", "kusaw factory.yaml")
	w.node(factorySchema())
	w.close('}')
	b.WriteByte('\n')
	return b.Bytes()
}

// jw writes indented JSON with keys in the order given (encoding/json
// sorts map keys, and the schema reads best in the file's own order).
type jw struct {
	b     *bytes.Buffer
	depth int
	first bool
}

func (w *jw) nl() {
	w.b.WriteByte('\n')
	for i := 0; i < w.depth; i++ {
		w.b.WriteString("  ")
	}
}
func (w *jw) open(c byte) { w.b.WriteByte(c); w.depth++; w.first = true }
func (w *jw) close(c byte) {
	w.depth--
	if !w.first {
		w.nl()
	}
	w.b.WriteByte(c)
	w.first = false
}
func (w *jw) key(k string) {
	if !w.first {
		w.b.WriteByte(',')
	}
	w.first = false
	w.nl()
	kb, _ := json.Marshal(k)
	w.b.Write(kb)
	w.b.WriteString(": ")
}
func (w *jw) kv(k string, v any) {
	w.key(k)
	vb, _ := json.Marshal(v)
	w.b.Write(vb)
}

// node writes n's keywords into the object already open.
func (w *jw) node(n *schemaNode) {
	if n.desc != "" {
		w.kv("description", n.desc)
	}
	scalarTypes := []string{"string", "number", "boolean"}
	switch n.kind {
	case kindObject:
		w.kv("type", "object")
		w.key("properties")
		w.open('{')
		for _, pr := range n.props {
			w.key(pr.name)
			w.open('{')
			w.node(pr.node)
			w.close('}')
		}
		w.close('}')
		w.kv("additionalProperties", false)
		if len(n.required) > 0 {
			w.kv("required", n.required)
		}
	case kindMap:
		w.kv("type", "object")
		if n.values != nil {
			w.key("propertyNames")
			w.open('{')
			w.kv("enum", n.values)
			w.close('}')
		} else if n.keyPat != "" {
			w.key("propertyNames")
			w.open('{')
			w.kv("pattern", n.keyPat)
			w.close('}')
		}
		w.key("additionalProperties")
		w.open('{')
		w.node(n.elem)
		w.close('}')
	case kindText:
		if n.pattern != "" {
			w.kv("type", "string")
			w.kv("pattern", n.pattern)
		} else {
			// The decoder reads any scalar as its text (run: [true] is
			// the command "true").
			w.kv("type", scalarTypes)
		}
	case kindBool:
		w.kv("type", "boolean")
	case kindNumber:
		w.kv("type", "number")
		w.kv("exclusiveMinimum", 0)
	case kindInt:
		w.kv("type", "integer")
		if n.constInt != nil {
			w.kv("const", *n.constInt)
		}
		if n.min != nil {
			w.kv("minimum", *n.min)
		}
		if n.max != nil {
			w.kv("maximum", *n.max)
		}
	case kindDuration:
		w.kv("type", "string")
		w.kv("pattern", durationPattern)
		w.key("not")
		w.open('{')
		w.kv("pattern", zeroDurationPattern)
		w.close('}')
	case kindSize:
		w.kv("type", []string{"string", "integer"})
		w.kv("pattern", sizePattern)
		w.kv("minimum", 0)
	case kindEnum:
		w.kv("enum", n.values)
	case kindList:
		w.kv("type", "array")
		if n.minItems > 0 {
			w.kv("minItems", n.minItems)
		}
		if n.unique {
			w.kv("uniqueItems", true)
		}
		w.key("items")
		w.open('{')
		switch {
		case n.values != nil:
			w.kv("enum", n.values)
		case n.pattern != "":
			w.kv("type", "string")
			w.kv("pattern", n.pattern)
		default:
			w.kv("type", scalarTypes)
		}
		w.close('}')
	case kindArray:
		w.kv("type", "array")
		if n.minItems > 0 {
			w.kv("minItems", n.minItems)
		}
		w.key("items")
		w.open('{')
		w.node(n.elem)
		w.close('}')
	case kindOneOf:
		w.key("oneOf")
		w.open('[')
		for _, a := range n.alts {
			if !w.first {
				w.b.WriteByte(',')
			}
			w.first = false
			w.nl()
			w.open('{')
			w.node(a)
			w.close('}')
		}
		w.close(']')
	default:
		panic("schema: unknown kind " + strconv.Quote(string(n.kind)))
	}
}

func deliverNode() *schemaNode {
	merge := object("merge the run branch into a local branch (refused when that branch is checked out with uncommitted changes)",
		p("into", text("the branch to merge into")),
		p("how", enum("ff-only (default), merge (a merge commit) or squash (one commit)", mergeHows...)),
	)
	merge.required = []string{"into"}
	push := object("push the run branch to a remote with the user's own git credentials",
		p("remote", text("the git remote")),
		p("branch", text("the remote branch; {run} and {pipeline} are replaced (default kusaw/{run})")),
	)
	push.required = []string{"remote"}
	pr := object("open, or update, one pull request per run through the forge's REST API",
		p("forge", enum("the forge's API dialect", forges...)),
		p("api_url", text("the forge's API address (default: forges.FORGE.api_url, for github https://api.github.com)")),
		p("repo", text("OWNER/NAME on the forge (GitLab: the project's path)")),
		p("base", text("the branch the pull request targets")),
		p("token", secretRefNode("the forge token, from the secret store (default: forges.FORGE.token)")),
		p("title", text("the pull request's title (default: kusaw: PIPELINE run RUN)")),
		p("body_file", text("a file holding the body, relative to the factory file (default: the run's summary)")),
	)
	pr.required = []string{"forge", "repo", "base"}
	return object("where a successful run's work goes, outside the sandbox: merge, push, pull request (kusaw deliver RUN does it again)",
		p("repo", text("the factory repo to deliver (required when there are several)")),
		p("merge", merge),
		p("push", push),
		p("pull_request", pr),
	)
}

func cachesNode(desc string) *schemaNode {
	cache := object("a cache: the folder (default <state_dir>/caches/NAME) and the variable set to it (presets "+presetNames()+" know theirs)",
		p("path", text("the cache's folder, relative to the factory file")),
		p("env", &schemaNode{kind: kindText, desc: "the environment variable the step's tools read the folder from", pattern: envNamePatternText}),
	)
	return oneOf(desc, mapOf("caches by name", idPatternText, cache), list("presets by name: "+presetNames()))
}

// shapeProps are a step's pipeline-shape keys (docs/pipelines.md).
func shapeProps() []*schemaProp {
	on := list("outcomes that retry: " + strings.Join(RetryKinds, ", ") + ", or exit:CODE[,CODE]; anything else ends the step at once")
	code := `([1-9][0-9]?|1[0-9]{2}|2[0-4][0-9]|25[0-5])`
	on.pattern = `^(` + strings.Join(RetryKinds, "|") + `|exit:` + code + `(,` + code + `)*)$`
	sel := &schemaNode{kind: kindText, desc: "how one candidate is kept: first (default), all (smallest diff of the passing) or judge:STEP", pattern: `^(first|all|judge:[A-Za-z0-9][A-Za-z0-9_.-]*)$`}
	stepRef := func(desc string) *schemaNode {
		return &schemaNode{kind: kindText, desc: desc, pattern: idPatternText}
	}
	gate := oneOf("wait for approval (kusaw approve RUN) before the step runs: the message, or a map",
		text(""),
		object("",
			p("message", text("what the approver decides")),
			p("timeout", duration("past it the gate rejects (gate_timeout)")),
			p("approvers", list("who may decide: local user names or API token names (default: anyone who can reach kusaw)")),
		))
	return []*schemaProp{
		p("retry", object("which failures retry",
			p("attempts", integer("tries before the step fails", intp(1), intp(100))),
			p("on", on),
			p("backoff", duration("wait before each next attempt")),
		)),
		p("candidates", oneOf("attempts run at once from the same tip; one is kept (select)",
			integer("how many, all with the step's provider", intp(2), intp(10)),
			array("one candidate per entry, each with its own provider (an agent step)", candidateNode()))),
		p("select", sel),
		p("on_failure", stepRef("a fixer step run on a failed attempt's branch; the next attempt starts from its commit")),
		p("continue_on_failure", boolean("the step's failure neither stops its group's siblings nor fails the run")),
		p("continue_session", boolean("a retry or fix loop's next attempt continues the agent's session of the attempt before it, within the run (claude-code, codex and gemini; inside the sandbox the session files are the attempt's own and go to the run's next attempt only)")),
		p("resolve", stepRef("on a parallel group's first step: runs in a worktree holding a conflicted merge; its commit completes it")),
		p("gate", gate),
	}
}

func notifyNode(desc string) *schemaNode {
	entry := object("a webhook: kusaw POSTs a JSON body, signed when a secret is set",
		p("url", text("http(s) URL")),
		p("on", list("events: "+strings.Join(NotifyEvents, ", ")+" (default: all)")),
		p("secret", secretRefNode("HMAC-SHA256 key for the X-Kusaw-Signature header")),
	)
	entry.required = []string{"url"}
	for _, pr := range entry.props {
		if pr.name == "on" {
			pr.node.values = NotifyEvents
		}
	}
	return array(desc, entry)
}

// candidateNode is one entry of candidates written as a list.
func candidateNode() *schemaNode {
	n := object("one candidate", p("provider", &schemaNode{kind: kindText, pattern: idPatternText, desc: "the candidate's agent CLI: " + strings.Join(ProviderNames, ", ") + ", or one described under providers.NAME.agent"}))
	n.required = []string{"provider"}
	return n
}

// agentNode is providers.NAME.agent: an agent CLI described as data.
func agentNode() *schemaNode {
	ptr := func(desc string) *schemaNode {
		return &schemaNode{kind: kindText, pattern: `^/`, desc: desc}
	}
	usage := object("JSON pointers into the result line to its usage",
		p("input_tokens", ptr("input tokens")),
		p("output_tokens", ptr("output tokens")),
		p("cache_read_tokens", ptr("input tokens read from the cache")),
		p("cost_usd", ptr("the cost in USD; without it limits.cost_usd is refused")),
	)
	stream := object("what the CLI's stdout is and how kusaw reads its outcome",
		p("format", enum("jsonl (default): JSON lines, the result line decides; text: plain output, the exit code decides", AgentJSONL, AgentText)),
		p("result", ptr(`which line is the result: "/type=result" (the pointer's value is that text) or "/usage" (the pointer exists); no result line fails the attempt`)),
		p("success", ptr(`the result's success: "/ok" (a boolean) or "/is_error=false", "/subtype=success" (the value that means success); unset: a result line is a success`)),
		p("text", ptr("the result's final text")),
		p("session", ptr("the session id (any line)")),
		p("usage", usage),
	)
	argv := list(`the headless run: [program, arg, ...]; "{prompt}" is the prompt, "{prompt_file}" a file holding it, "{model}" providers.NAME.model (an argument naming {model} is left out when no model is set, so write --model={model} as one); "{sandbox_off}" is where sandbox_off_args go (default: after the program)`)
	argv.minItems = 1
	inject := object("how the egress proxy holds the CLI's key (sandbox.egress.inject: provider)",
		p("host", text("the API's host")),
		p("header", text("the header carrying the key (Authorization gets Bearer)")),
		p("upstream", text("the API's base URL (default https://HOST; providers.NAME.base_url overrides)")),
	)
	n := object("an agent CLI kusaw has no built-in provider for, described so a step can run it as provider: NAME (docs/providers.md)",
		p("argv", argv),
		p("stream", stream),
		p("key_env", &schemaNode{kind: kindText, pattern: envNamePatternText, desc: "the variable the CLI reads its API key from (inject sets it to a placeholder)"}),
		p("base_url_env", &schemaNode{kind: kindText, pattern: envNamePatternText, desc: "the variable the CLI reads its API base URL from (inject points it at the proxy)"}),
		p("login_token_env", list("variables any one of which signs the CLI in (needed with a fresh HOME)")),
		p("env", mapOf("set for every run (telemetry and update checks off); the step's env wins; never a key", envNamePatternText, text(""))),
		p("login_folders", list("the CLI's own state folders under the home (~/.NAME), mounted read/write in the Linux sandbox")),
		p("egress_hosts", hostList("the hosts the CLI needs to work (added to an allowlist with provider_hosts)")),
		p("handshake_hosts", hostList("login, telemetry and update hosts: warned about (W3), never allowed automatically")),
		p("sandbox_off_args", list("arguments added when kusaw's sandbox wraps the step: what turns the CLI's own sandbox and approval prompts off")),
		p("inject", inject),
	)
	n.required = []string{"argv"}
	return n
}
