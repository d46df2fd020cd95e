package providers

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kusaw/kusaw/status"
)

// kusaw never runs a program a sandbox could have written (docs/sandbox.md):
// an agent may rewrite whatever it can write, and the CLI's --version
// probe runs on the host, outside every namespace. So a CLI found inside a
// folder that some sandbox kusaw builds can write is refused before it
// runs, whether the step is sandboxed or not. Checked on the exact paths
// about to run (as found and with links resolved): a sandbox can change
// neither once both lie outside every writable folder.

// writableRoot is a folder a sandbox may write, and what it is.
type writableRoot struct{ dir, what string }

// loginRoots are every provider's login folders and files for the
// current HOME: each provider's sandbox mounts its own read/write.
func loginRoots() []writableRoot {
	home, _ := os.UserHomeDir()
	var out []writableRoot
	for _, n := range Names() {
		for _, p := range registry[n].Spec().LoginPaths(home, os.Getenv) {
			out = append(out, writableRoot{p, "the login folder of " + n + ", which its sandboxed steps write"})
		}
	}
	return out
}

// writableRoots are the login folders and the caller's folders
// (PrepareInput.Writable), each also with its links resolved.
func writableRoots(extra []string) []writableRoot {
	roots := loginRoots()
	for _, d := range extra {
		roots = append(roots, writableRoot{d, "a folder the factory's sandboxes write (its state folder, a cache or allow_write)"})
	}
	var out []writableRoot
	for _, r := range roots {
		if r.dir == "" || !filepath.IsAbs(r.dir) {
			continue
		}
		r.dir = filepath.Clean(r.dir)
		out = append(out, r)
		if real, err := filepath.EvalSymlinks(r.dir); err == nil && real != r.dir {
			out = append(out, writableRoot{real, r.what})
		}
	}
	// The longest first: the message names the narrowest folder.
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].dir) > len(out[j].dir) })
	return out
}

func inside(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

// refuseWritable refuses a CLI whose path (as found, or real, with links
// resolved) lies inside a root.
func refuseWritable(spec Spec, path, real string, roots []writableRoot) error {
	for _, r := range roots {
		for _, p := range []string{path, real} {
			if !inside(r.dir, p) {
				continue
			}
			shown := path
			if real != path {
				shown += " (" + real + ")"
			}
			return &status.Error{Reason: status.ReasonProviderWritable,
				Msg: fmt.Sprintf("%s: the CLI %s lies in %s, %s: a step could have replaced it, so kusaw does not run it; install it elsewhere or set providers.%s.command to a copy outside %s", spec.Name, shown, r.dir, r.what, spec.Name, r.dir),
				Fix: fmt.Sprintf("install it outside %s (%s), or set providers.%s.command to a copy outside it", r.dir, installHint(spec), spec.Name)}
		}
	}
	return nil
}

// installHint is the spec's install line, or a generic one.
func installHint(spec Spec) string {
	if spec.Install != "" {
		return spec.Install
	}
	return "install " + spec.Name
}
