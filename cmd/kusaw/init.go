package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
)

func init() { addCommand("init", newInitCmd) }

// initSandboxCheck is swappable so a test can show the unavailable case.
var initSandboxCheck = sandbox.CachedCheck

func newInitCmd(a *app) *cobra.Command {
	var provider string
	var withSandbox bool
	c := &cobra.Command{
		Use:   "init [--provider claude-code|cursor] [--sandbox]",
		Short: "write a commented factory.yaml for the git repository here (or the ones below)",
		Long: `Run in a git repository (or in a folder whose sub-folders are git
repositories), kusaw init writes factory.yaml there: the repos, a checks
step that runs each repository's own test command (a Makefile test target,
go test, npm test, cargo test, pytest), one agent step with a placeholder
prompt, and two pipelines: default (implement, then checks) and checks.

With --sandbox, and when this machine can run the sandbox, every attempt is
sandboxed with network: allowlist: the hosts the tests download from and the
provider's own API hosts; for claude-code the API key stays outside the
sandbox (inject). A package mirror your tools use on this machine (GOPROXY
and GOSUMDB, in the environment or go env -w's file; npm_config_registry
or ~/.npmrc's registry) takes the public hosts' place in the allowlist and
goes into the checks step's env, since the sandbox passes on only the
variables a step sets. It saves the file's JSON Schema in .kusaw/ and points
editors at it; it validates what it wrote and prints the next commands. It
never overwrites a factory.yaml (exit 2).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			return a.runInit(provider, withSandbox)
		},
	}
	c.Flags().StringVar(&provider, "provider", config.DefaultProvider, "the agent step's provider: claude-code or cursor")
	c.Flags().BoolVar(&withSandbox, "sandbox", false, "sandbox every attempt with an allowlist (when this machine can)")
	return c
}

func (a *app) runInit(provider string, withSandbox bool) error {
	if !slices.Contains(config.ProviderNames, provider) {
		return exitf(status.ExitUsage, "--provider %q is not one of %s", provider, strings.Join(config.ProviderNames, ", "))
	}
	wd, err := os.Getwd()
	if err != nil {
		return exitf(status.ExitInternal, "%v", err)
	}
	target := filepath.Join(wd, "factory.yaml")
	if _, err := os.Lstat(target); err == nil {
		return exitf(status.ExitUsage, "factory.yaml already exists here; kusaw init never overwrites it (check it with kusaw validate)")
	}
	repos, err := findRepos(wd)
	if err != nil {
		return err
	}
	in := config.ScaffoldInput{Repos: repos, Provider: provider, SchemaPath: ".kusaw/factory.schema.json"}
	if p, ok := providers.Get(provider); ok {
		in.ProviderHosts, in.HandshakeHosts = p.Spec().EgressHosts, p.Spec().HandshakeHosts
	}
	if withSandbox {
		if r := initSandboxCheck(); r.Available {
			in.Sandbox = true
			in.Toolchains = initToolchains()
		} else {
			in.SandboxNote = "this machine cannot run it: " + r.Msg + " (" + r.Fix + ")"
			fmt.Fprintf(a.stderr, "kusaw: --sandbox: the sandbox is not available here (%s); the file says mode: off\n", r.Msg)
		}
	}
	data := config.Scaffold(in)
	// What init writes must be valid as written: checked before it lands.
	if _, fs := config.Parse(data, target); len(fs.Errors()) > 0 {
		return exitf(status.ExitInternal, "the factory.yaml init made is not valid (%s); please report this", fs.Errors()[0].String())
	}
	if err := writeNew(target, data); err != nil {
		return err
	}
	state := filepath.Join(wd, ".kusaw")
	if err := os.MkdirAll(state, 0o700); err == nil {
		_ = os.WriteFile(filepath.Join(state, "factory.schema.json"), config.JSONSchema(), 0o644)
	}
	excluded := excludeState(wd, repos)
	var desc []string
	for _, r := range repos {
		t := "no test command found"
		if r.Test != nil {
			t = strings.Join(r.Test, " ") + " (" + r.TestWhy + ")"
		}
		desc = append(desc, fmt.Sprintf("repo %s at %s: %s", r.Name, r.Path, t))
	}
	mode := "sandbox off"
	if in.Sandbox {
		mode = "sandbox required, network allowlist"
	}
	fmt.Fprintf(a.stdout, "wrote factory.yaml: %s; %s\n", strings.Join(desc, "; "), mode)
	for _, r := range repos {
		if len(r.Env) > 0 {
			fmt.Fprintf(a.stdout, "steps.checks.env: %s from your environment (repo %s's package mirror; the sandbox passes on only what a step sets), and its host in the allowlist\n", strings.Join(steps.EnvNames(r.Env), ", "), r.Name)
		}
	}
	if excluded != "" {
		fmt.Fprintf(a.stdout, "added .kusaw/ to %s (records stay out of git status)\n", excluded)
	}
	fmt.Fprintf(a.stdout, "next:\n  kusaw validate\n  kusaw run checks\n")
	key := "kusaw config set steps.implement.env.CURSOR_API_KEY --secret"
	if provider == config.DefaultProvider {
		key = "kusaw config set providers.claude-code.api_key --secret"
		if !in.Sandbox {
			key = "kusaw config set steps.implement.env.ANTHROPIC_API_KEY --secret (or sign in with claude)"
		}
	}
	fmt.Fprintf(a.stdout, "then write the task in steps.implement.prompt, store the key with %s, and: kusaw run\n", key)
	return nil
}

// findRepos returns the git repository the folder is in, else the git
// repositories in its sub-folders.
func findRepos(wd string) ([]config.ScaffoldRepo, error) {
	if top, err := gitTop(wd); err == nil {
		rel, _ := filepath.Rel(wd, top)
		return []config.ScaffoldRepo{scaffoldRepo(repoName(filepath.Base(top)), rel, top)}, nil
	}
	entries, err := os.ReadDir(wd)
	if err != nil {
		return nil, exitf(status.ExitInternal, "%v", err)
	}
	var out []config.ScaffoldRepo
	for _, e := range entries {
		sub := filepath.Join(wd, e.Name())
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if _, err := os.Stat(filepath.Join(sub, ".git")); err == nil {
			out = append(out, scaffoldRepo(repoName(e.Name()), e.Name(), sub))
		}
	}
	if len(out) == 0 {
		return nil, exitf(status.ExitUsage, "no git repository here or in the folders below; run kusaw init in your repository (git init first for a new one)")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func gitTop(dir string) (string, error) {
	cmd := exec.Command("git", "rev-parse", "--show-toplevel")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(strings.TrimSpace(string(out)))
}

func scaffoldRepo(name, rel, dir string) config.ScaffoldRepo {
	r := config.ScaffoldRepo{Name: name, Path: rel}
	eco, ok := steps.Detect(dir)
	if ok {
		r.Test, r.TestWhy = eco.Test, eco.Why
	}
	home, _ := os.UserHomeDir()
	eco = steps.Mirror(eco, dir, home, os.LookupEnv)
	r.Registry, r.Caches, r.Env = eco.Hosts, eco.Caches, eco.Env
	return r
}

// repoName makes a folder's name a valid repo name.
func repoName(s string) string {
	var b strings.Builder
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || (i > 0 && strings.ContainsRune("_.-", r))
		if ok {
			b.WriteRune(r)
		} else {
			b.WriteRune('_')
		}
	}
	if b.Len() == 0 || !strings.ContainsAny(b.String()[:1], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") {
		return "repo" + b.String()
	}
	return b.String()
}

// writeNew creates the file, refusing one that appeared meanwhile.
func writeNew(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, os.ErrExist) {
		return exitf(status.ExitUsage, "factory.yaml already exists here; kusaw init never overwrites it")
	}
	if err != nil {
		return exitf(status.ExitInternal, "cannot write %s: %v", p, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return exitf(status.ExitInternal, "cannot write %s: %v", p, err)
	}
	return f.Close()
}

// excludeState adds .kusaw/ to the repository's own exclude file when the
// factory lives inside it, and returns that file's path ("" otherwise).
func excludeState(wd string, repos []config.ScaffoldRepo) string {
	inside := len(repos) == 1 && (repos[0].Path == "." || strings.HasPrefix(repos[0].Path, ".."))
	if !inside {
		return ""
	}
	cmd := exec.Command("git", "rev-parse", "--git-path", "info/exclude")
	cmd.Dir = wd
	out, err := cmd.Output()
	if err != nil {
		return ""
	}
	p := strings.TrimSpace(string(out))
	if !filepath.IsAbs(p) {
		p = filepath.Join(wd, p)
	}
	rel, err := filepath.Rel(filepath.Join(wd, repos[0].Path), filepath.Join(wd, ".kusaw"))
	if err != nil {
		return ""
	}
	line := "/" + filepath.ToSlash(rel) + "/"
	old, _ := os.ReadFile(p)
	if bytes.Contains(old, []byte(line)) {
		return ""
	}
	if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
		old = append(old, '\n')
	}
	if os.MkdirAll(filepath.Dir(p), 0o755) != nil || os.WriteFile(p, append(old, []byte(line+"\n")...), 0o644) != nil {
		return ""
	}
	return p
}

// initToolchains are the folders the Linux sandbox will show read-only
// for the programs on kusaw's PATH (validate names each one, W15, until
// the file lists it).
func initToolchains() []string {
	if runtime.GOOS != "linux" {
		return nil
	}
	home, _ := os.UserHomeDir()
	var out []string
	for _, tc := range sandbox.Toolchains(os.Getenv("PATH"), home) {
		out = append(out, tc.Path)
	}
	return out
}
