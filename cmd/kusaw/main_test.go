package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/sandbox/confine"
)

func TestMain(m *testing.M) {
	// This binary is the stages' program in these tests (kusaw serves
	// them when kusaw-bridge is not beside it): run them, never the tests.
	if len(os.Args) > 1 && (os.Args[1] == confine.Subcommand || os.Args[1] == confine.LayerSubcommand) {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	testscript.Main(m, map[string]func(){
		"kusaw": func() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the CLI scripts in testdata/script: each is a small
// session of kusaw commands with their expected output and exit codes.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(e *testscript.Env) error {
			// Every script gets its own secret store and home.
			e.Setenv("KUSAW_SECRETS_DIR", e.WorkDir+"/.secrets")
			e.Setenv("HOME", e.WorkDir+"/home")
			e.Setenv("XDG_CONFIG_HOME", e.WorkDir+"/home/.config")
			return os.MkdirAll(e.WorkDir+"/home", 0o755)
		},
	})
}

// TestSandboxExecArgs: the walk of /etc starts ahead for kusaw sandbox
// exec only, wherever its global flags are, and not for a command that
// merely runs "sandbox exec" as its own arguments.
func TestSandboxExecArgs(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"sandbox", "exec", "--", "true"}, true},
		{[]string{"-f", "x.yaml", "sandbox", "exec", "--step", "s", "--", "true"}, true},
		{[]string{"sandbox", "check"}, false},
		{[]string{"run", "--", "sandbox", "exec"}, false},
		{[]string{"sandbox"}, false},
		{nil, false},
	} {
		if got := sandboxExecArgs(c.args); got != c.want {
			t.Errorf("sandboxExecArgs(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// A start makes only the command it runs (newRootCmdFor): each command
// registered under its own name, and the command a start finds in the
// smaller tree reads, parses and prints as in the whole tree (usage,
// flags, global flags, subcommands; no completion command, which is not
// among them). Help, completion, a flag first or an unknown name get the
// whole tree.
func TestRootForOneCommandSameAsWholeTree(t *testing.T) {
	a := &app{}
	whole := newRootCmd(a)
	for _, f := range commandFactories {
		if got := f.make(a).Name(); got != f.name {
			t.Errorf("command %q is registered as %q", got, f.name)
			continue
		}
		root := newRootCmdFor(a, []string{f.name, "--help"})
		var names []string
		for _, c := range root.Commands() {
			names = append(names, c.Name())
		}
		want := []string{"help", f.name}
		slices.Sort(names)
		slices.Sort(want)
		if !slices.Equal(names, want) {
			t.Errorf("the tree for %s holds %v", f.name, names)
		}
		var walk func(lazy *cobra.Command)
		walk = func(lazy *cobra.Command) {
			full, _, err := whole.Find(strings.Fields(lazy.CommandPath())[1:])
			if err != nil || full.CommandPath() != lazy.CommandPath() {
				t.Errorf("%s: not in the whole tree (%v)", lazy.CommandPath(), err)
				return
			}
			if lazy.UsageString() != full.UsageString() {
				t.Errorf("%s: usage differs from the whole tree's:\n%s\nwhole tree:\n%s", lazy.CommandPath(), lazy.UsageString(), full.UsageString())
			}
			for _, c := range lazy.Commands() {
				walk(c)
			}
		}
		for _, c := range root.Commands() {
			if c.Name() == f.name {
				walk(c)
			}
		}
	}
	for _, args := range [][]string{nil, {"help"}, {"--help"}, {"-f", "x.yaml", "run"}, {"rnu"}, {"__complete", "sa"}, {"completion", "bash"}} {
		if got, want := len(newRootCmdFor(a, args).Commands()), len(whole.Commands()); got != want {
			t.Errorf("the tree for %q holds %d commands, want the whole tree's %d", args, got, want)
		}
	}
}
