package main

import (
	"os"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

func TestMain(m *testing.M) {
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
