package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/kusaw/kusaw/sandbox/confine"
)

// The confinement stage (package sandbox/confine) runs first inside every
// Linux sandbox: a fresh session keyring, then Landlock where the kernel
// has it, then the step. Its program is kusaw-bridge beside the running
// executable (small, quick to start), else the executable itself when it
// serves the stage (kusaw does; so do this package's tests).

var (
	confineMu   sync.Mutex
	confineSelf bool
	confineBy   string
	confineOnce sync.Once
	confineProg []string
)

// ServeConfine says that this executable runs the stage when started with
// confine.Subcommand as its first argument (kusaw's hidden __confine).
func ServeConfine() {
	confineMu.Lock()
	confineSelf = true
	confineMu.Unlock()
}

// ConfineProgram names the program that serves the stage (its
// confine.Subcommand) when kusaw-bridge is not beside the running
// executable: kusaw-daemon names kusaw, which it runs beside.
func ConfineProgram(path string) {
	confineMu.Lock()
	confineBy = path
	confineMu.Unlock()
}

// confineProgram is the stage's program and subcommand, or nil when there
// is none (a test binary of another package): the step then runs without
// Landlock and with the host's session keyring (unreachable: seccomp
// refuses keyctl), and check --verbose says so.
func confineProgram() []string {
	if runtime.GOOS != "linux" {
		return nil
	}
	confineOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			return
		}
		if r, err := filepath.EvalSymlinks(exe); err == nil {
			exe = r
		}
		if b := filepath.Join(filepath.Dir(exe), "kusaw-bridge"); isExecutable(b) {
			confineProg = []string{b, confine.Subcommand}
			return
		}
		confineMu.Lock()
		self, by := confineSelf, confineBy
		confineMu.Unlock()
		switch {
		case self:
			confineProg = []string{exe, confine.Subcommand}
		case by != "" && isExecutable(by):
			confineProg = []string{by, confine.Subcommand}
		}
	})
	return confineProg
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// confineBinaries are the files the plan binds read-only so the stage can run.
func confineBinaries() []string {
	if p := confineProgram(); p != nil {
		return p[:1]
	}
	return nil
}

// confineArgv is the argv prefix that runs the stage for this plan, nil
// without one.
func (p *Plan) confineArgv() []string {
	prog := confineProgram()
	if prog == nil {
		return nil
	}
	var w []string
	for _, r := range p.Writable {
		w = append(w, r.Path)
	}
	return append(append([]string{}, prog...), confine.Args(w)...)
}

// confineArgsFor is the stage's flags for writable paths, ending in "--".
func confineArgsFor(writable []string) []string { return confine.Args(writable) }

// confineGap says which kernel layers an attempt of this program lacks for
// want of the confinement stage: "" when the stage runs (or off Linux).
// refuse is set when the program named the stage's program
// (ConfineProgram: kusaw-daemon names kusaw) and that is missing: an
// attempt there is refused rather than run weaker than it was set up to
// run. A program that never claimed a stage (a test binary of another
// package) runs without one, and the plan says so.
func confineGap() (gap string, refuse bool) {
	if runtime.GOOS != "linux" || confineProgram() != nil {
		return "", false
	}
	layers := "the per-attempt session keyring"
	if abi, _ := confine.LandlockABI(); abi >= 1 {
		layers = fmt.Sprintf("Landlock (the kernel has ABI %d) and %s", abi, layers)
	}
	confineMu.Lock()
	by := confineBy
	confineMu.Unlock()
	if by != "" {
		return fmt.Sprintf("%s: the confinement stage's program %s is missing or not executable", layers, by), true
	}
	return layers + ": this program has no confinement stage (kusaw-bridge is not beside it and it is not kusaw)", false
}

// executable is the running program's path, links resolved.
func executable() string {
	exe, err := os.Executable()
	if err != nil {
		return "the kusaw program"
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return exe
}
