package config

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// ScaffoldRepo is one repository kusaw init found.
type ScaffoldRepo struct {
	Name     string
	Path     string   // relative to the factory file
	Test     []string // its own test command; nil when none was found
	TestWhy  string   // what the command was found from (go.mod, ...)
	Registry []string // package hosts its tests fetch from (proxy.golang.org, ...)
	Caches   []string // cache presets its tools keep warm (go, npm, ...)
	// Env is what its tests need to reach the user's package mirror
	// (GOPROXY, npm_config_registry): written into the checks step,
	// since the sandbox passes on only the variables a step names.
	Env map[string]string
}

// ScaffoldInput is what kusaw init learned about the folder.
type ScaffoldInput struct {
	Repos          []ScaffoldRepo
	Provider       string
	ProviderHosts  []string // the provider's egress hosts, added by provider_hosts
	HandshakeHosts []string // its login and telemetry hosts, never added for the user
	Sandbox        bool     // --sandbox and the backend is available
	SandboxNote    string   // why not, when --sandbox was asked but cannot be had
	SchemaPath     string   // relative to the file, for the editor's modeline
	// Toolchains are the folders outside the system's that the programs
	// on the user's PATH live in: the Linux sandbox shows them read-only,
	// and the file says so (allow_read), so validate has nothing to ask.
	Toolchains []string
}

// Scaffold writes a commented factory.yaml: the repos, a checks step
// running each repo's own tests, one agent step with a placeholder
// prompt, and the pipelines default and checks.
func Scaffold(in ScaffoldInput) []byte {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if in.SchemaPath != "" {
		w("# yaml-language-server: $schema=%s\n", in.SchemaPath)
	}
	w("# A kusaw factory, written by kusaw init. Reference: docs/factory.md;\n")
	w("# check it with kusaw validate, and see the effective sandbox with kusaw sandbox doctor.\n")
	w("version: 1\n")
	w("state_dir: .kusaw            # runs, attempts and their records\n\n")

	w("repos:\n")
	for _, r := range in.Repos {
		w("  %s:\n", r.Name)
		w("    path: %s\n", yamlScalar(r.Path))
		w("    # base: main             # the branch each run starts from (default: the repository's HEAD)\n")
	}
	w("\n")

	var registries []string
	for _, r := range in.Repos {
		for _, h := range r.Registry {
			if !contains(registries, h) {
				registries = append(registries, h)
			}
		}
	}
	var caches []string
	for _, r := range in.Repos {
		for _, c := range r.Caches {
			if !contains(caches, c) {
				caches = append(caches, c)
			}
		}
	}
	if len(caches) > 0 {
		w("caches: %s   # kept between attempts, so the second run is warm (docs/factory.md)\n\n", yamlFlow(caches))
	}
	w("sandbox:\n")
	switch {
	case in.Sandbox:
		w("  mode: required             # every attempt runs in the OS sandbox (kusaw sandbox check)\n")
		w("  network: allowlist         # and reaches only the hosts below, through kusaw's proxy\n")
		w("  egress:\n")
		if len(registries) > 0 {
			w("    allow: %s   # what the tests download\n", yamlFlow(registries))
		} else {
			w("    allow: []                # hosts the steps may reach, e.g. registry.npmjs.org\n")
		}
		w("    provider_hosts: true     # adds %s's own API hosts: %s\n", in.Provider, strings.Join(in.ProviderHosts, ", "))
		if in.Provider == DefaultProvider {
			w("    inject: provider         # the API key stays outside the sandbox:\n")
			w("                             #   kusaw config set providers.claude-code.api_key --secret\n")
		}
		if len(in.Toolchains) > 0 {
			w("  # The toolchains of your PATH outside the system's folders: the sandbox\n")
			w("  # shows them read-only so the steps find their programs (kusaw sandbox doctor).\n")
			w("  allow_read: %s\n", yamlFlow(in.Toolchains))
		}

	default:
		if in.SandboxNote != "" {
			w("  # --sandbox was asked for, but %s\n", in.SandboxNote)
		}
		w("  mode: off                  # required: run every attempt in the OS sandbox (kusaw init --sandbox)\n")
	}
	w("\n")

	w("pipelines:\n")
	w("  default: [implement, checks]\n")
	w("  checks: [checks]           # the repos' own tests alone: kusaw run checks\n\n")

	w("steps:\n")
	w("  implement:\n")
	w("    provider: %s\n", in.Provider)
	w("    prompt: %s   # or prompt_file: prompts/implement.md\n", PlaceholderPrompt)
	w("    timeout: 30m\n")
	if !in.Sandbox && in.Provider == DefaultProvider {
		w("    # The agent signs in as claude does on this machine; or give it a key:\n")
		w("    #   kusaw config set steps.implement.env.ANTHROPIC_API_KEY --secret\n")
	}
	if in.Provider == "cursor" {
		w("    # Cursor signs in with an API key kept in kusaw's secret store:\n")
		w("    #   kusaw config set steps.implement.env.CURSOR_API_KEY --secret\n")
	}
	if in.Sandbox && len(in.HandshakeHosts) > 0 {
		// Listed, not added by provider_hosts: the user sees each one and
		// removes what the CLI does not need (W3 asks for them written).
		w("    sandbox:\n")
		w("      egress:\n")
		w("        # %s's sign-in and telemetry hosts: remove those it does not need\n", in.Provider)
		w("        allow: %s\n", yamlFlow(in.HandshakeHosts))
	}
	w("  checks:\n")
	var tested []ScaffoldRepo
	for _, r := range in.Repos {
		if r.Test != nil {
			tested = append(tested, r)
		}
	}
	if len(in.Repos) == 1 && len(tested) == 1 {
		w("    run: %s   # the repo's own tests (%s)\n", yamlFlow(tested[0].Test), tested[0].TestWhy)
	} else {
		w("    builtin: checks            # runs each repo's own test command (make test, go test, npm test, ...)\n")
	}
	env := map[string]string{}
	for _, r := range in.Repos {
		for k, v := range r.Env {
			env[k] = v
		}
	}
	if len(env) > 0 {
		names := make([]string, 0, len(env))
		for k := range env {
			names = append(names, k)
		}
		sort.Strings(names)
		w("    env:                       # your package mirror, as your environment names it (a sandbox passes on only what the step sets)\n")
		for _, k := range names {
			w("      %s: %s\n", k, yamlScalar(env[k]))
		}
	}
	w("    timeout: 20m\n")
	return []byte(b.String())
}

// Compiled on first use (only kusaw init needs it), not at every start.
var plainScalar = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_./][A-Za-z0-9_./:-]*$`) })

// yamlScalar writes s plainly when YAML reads it back as the same string.
func yamlScalar(s string) string {
	if plainScalar().MatchString(s) && !contains([]string{"true", "false", "null", "yes", "no", "on", "off", "~"}, strings.ToLower(s)) {
		return s
	}
	q, _ := json.Marshal(s) // a JSON string is a YAML double-quoted scalar
	return string(q)
}

func yamlFlow(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = yamlScalar(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// PlaceholderPrompt is the prompt init writes for the agent step; validate
// warns while it is there (W16).
const PlaceholderPrompt = "Describe the change you want here."
