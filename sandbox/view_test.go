package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// argvMount is one mount operation of bwrap's argv.
type argvMount struct{ op, dst string }

// argvMounts reads the mount operations back from bwrap's arguments.
func argvMounts(args []string) []argvMount {
	two := map[string]bool{"--ro-bind": true, "--bind": true, "--symlink": true, "--ro-bind-data": true}
	one := map[string]bool{"--tmpfs": true, "--dir": true, "--dev": true, "--proc": true, "--remount-ro": true}
	var out []argvMount
	for i := 0; i < len(args); i++ {
		switch {
		case two[args[i]] && i+2 < len(args):
			out = append(out, argvMount{args[i], args[i+2]})
			i += 2
		case one[args[i]] && i+1 < len(args):
			out = append(out, argvMount{args[i], args[i+1]})
			i++
		}
	}
	return out
}

func writableOp(op string) bool { return op == "--bind" || op == "--dir" }

// The order of bwrap's mounts, asserted on its argv: the view starts from
// nothing (no bind of the host's /), every folder comes before what lies
// in it, at one path a read-only mount comes after a writable one, and
// the root is made read-only last. So no read-only path (the agent's CLI
// in its login folder, its settings, git's control files) is ever covered
// by a writable bind, whichever part of the plan added it.
func TestPlanArgvOrder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bubblewrap's argv")
	}
	f := newFixture(t)
	write(t, filepath.Join(f.home, ".claude", "local", "claude"), "#!/bin/sh\n")
	in := f.input()
	in.AllowRead = append(in.AllowRead, filepath.Join(f.home, ".claude", "local"))
	p := mustPlan(t, in)
	ms := argvMounts(p.Args())
	if len(ms) < 10 {
		t.Fatalf("too few mounts: %v", ms)
	}
	for i, m := range ms {
		if m.dst == "/" && m.op != "--remount-ro" {
			t.Errorf("mount %d: %s / (the view must not start from the host's root)", i, m.op)
		}
		for _, later := range ms[i+1:] {
			if later.op == "--remount-ro" {
				continue
			}
			covers := later.dst == m.dst || within(later.dst, m.dst)
			if covers && (later.dst != m.dst || writableOp(later.op) && !writableOp(m.op)) {
				t.Errorf("%s %s is covered by the later %s %s", m.op, m.dst, later.op, later.dst)
			}
		}
	}
	if last := ms[len(ms)-1]; last != (argvMount{"--remount-ro", "/"}) {
		t.Errorf("the last mount is %v, want the read-only root", last)
	}
	// The excerpt that finding 1 was about: the CLI's install in the login
	// folder, read-only after the writable copy of the folder.
	login, local := -1, -1
	for i, m := range ms {
		switch {
		case m.op == "--bind" && m.dst == filepath.Join(f.home, ".claude"):
			login = i
		case m.op == "--ro-bind" && m.dst == filepath.Join(f.home, ".claude", "local"):
			local = i
		}
	}
	if login < 0 || local < login {
		t.Errorf("~/.claude bound at %d, its local/ read-only at %d: %v", login, local, ms)
	}
	// Every mount says where it comes from and why.
	for _, m := range p.Mounts {
		if m.Origin == "" || m.Reason == "" {
			t.Errorf("mount %+v has no origin or reason", m)
		}
	}
	// The system folders, each named.
	for _, d := range []string{"/usr", "/etc"} {
		if !slices.ContainsFunc(p.Mounts, func(m Mount) bool { return m.Dst == d && m.Origin == OriginSystem && m.Op == "ro-bind" }) {
			t.Errorf("%s is not a read-only system folder of the plan", d)
		}
	}
}

// The toolchains of a PATH: the folder above a bin/ when it is a
// program's own tree, the entry itself when the folder above is shared,
// never the home, a top-level folder or a credential folder.
func TestToolchains(t *testing.T) {
	// Not under /tmp: the sandbox's /tmp is its own, no toolchain comes from there.
	root, err := os.MkdirTemp("/var/tmp", "kusaw-toolchains-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if root, err = filepath.EvalSymlinks(root); err != nil { // macOS: /var is a link
		t.Fatal(err)
	}
	home := filepath.Join(root, "home", "u")
	mk := func(p string) string {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	node := mk(filepath.Join(home, ".nvm", "versions", "node", "v22", "bin"))
	mk(filepath.Join(home, ".nvm", "versions", "node", "v22", "lib", "node_modules"))
	projects := mk(filepath.Join(root, "srv", "projects", "bin"))
	mk(filepath.Join(root, "srv", "projects", "other", ".kusaw", "serve"))
	local := mk(filepath.Join(home, ".local", "bin"))
	cargo := mk(filepath.Join(home, ".cargo", "bin"))
	mine := mk(filepath.Join(home, "bin"))
	opt := mk(filepath.Join(root, "opt", "tool", "bin"))
	mk(filepath.Join(root, "opt", "tool", "lib"))
	share := mk(filepath.Join(home, ".local", "share", "claude", "versions"))
	write(t, filepath.Join(share, "2.0.0"), "binary")
	if err := os.Symlink(filepath.Join(share, "2.0.0"), filepath.Join(local, "claude")); err != nil {
		t.Fatal(err)
	}
	path := strings.Join([]string{node, local, cargo, mine, opt, projects, home, "/usr/bin", "relative/bin", "/tmp", filepath.Join(home, ".ssh")}, ":")
	got := map[string]string{}
	for _, tc := range Toolchains(path, home) {
		got[tc.Path] = tc.From
	}
	want := map[string]string{
		filepath.Dir(node):                 node,  // ~/.nvm/versions/node/v22
		local:                              local, // ~/.local is shared: only its bin/
		share:                              local, // where ~/.local/bin/claude points
		cargo:                              cargo, // ~/.cargo holds credentials: only its bin/
		mine:                               mine,  // ~/bin: the folder above is the home
		filepath.Join(root, "opt", "tool"): opt,
		projects:                           projects, // a folder of projects: only its bin/
	}
	for p, from := range want {
		if got[p] != from {
			t.Errorf("toolchain %s: from %q, want %q (all: %v)", p, got[p], from, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("toolchains %v, want exactly %v", got, want)
	}
}

// linkTargets resolves a link to a name in its own folder as that name
// resolves, once per name: the same folders in the same order as
// resolving every link by its full path (linkTargetsEach), on a folder
// with each kind of link.
func TestLinkTargetsSameAsEachLinkResolved(t *testing.T) {
	root := t.TempDir()
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	bin := filepath.Join(root, "tool", "bin")
	other := filepath.Join(root, "other", "lib")
	far := filepath.Join(root, "far")
	for _, d := range []string{bin, other, far, filepath.Join(bin, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(bin, "rustup"), "binary")
	// A folder of shims: more programs than one read of the folder
	// returns, among the links.
	for i := range 300 {
		write(t, filepath.Join(bin, fmt.Sprintf("shim-%03d-with-a-name-as-long-as-pyenvs", i)), "#!/bin/sh")
	}
	write(t, filepath.Join(other, "prog"), "binary")
	write(t, filepath.Join(far, "prog"), "binary")
	links := map[string]string{
		"cargo":    "rustup",                        // a name in the folder: a file
		"rustc":    "rustup",                        // the same name again
		"away":     filepath.Join(other, "prog"),    // a file elsewhere
		"hop":      "away",                          // a name in the folder that links elsewhere
		"hop2":     "hop",                           // and again through two names
		"up":       "..",                            // the folder above
		"here":     ".",                             // the folder itself
		"subdir":   "sub",                           // a folder inside
		"rel":      "../../other/lib/prog",          // relative with a slash
		"dangling": "missing",                       // a name that is not there
		"loop1":    "loop2",                         // a loop
		"loop2":    "loop1",                         //
		"otherdir": filepath.Join(root, "other"),    // a folder elsewhere
		"viadir":   "otherdir",                      // a name that links to a folder elsewhere
		"abs":      filepath.Join(bin, "rustup"),    // an absolute link into the folder
		"deep":     filepath.Join(other, "..", "x"), // dangling, absolute
		// A name that sorts first and links through one that sorts
		// last: its folder comes first, as it did (the order decides
		// which of two nested folders Toolchains keeps).
		"a_hop": "z_far",
		"z_far": filepath.Join(far, "prog"),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	got, want := linkTargets(bin), linkTargetsEach(bin)
	if !slices.Equal(got, want) {
		t.Fatalf("linkTargets(%s) = %v, want %v", bin, got, want)
	}
	if len(want) < 3 {
		t.Fatalf("the fixture resolves to too few folders to compare: %v", want)
	}
}

// linkTargetsEach is linkTargets resolving every link by its full path.
func linkTargetsEach(d string) []string {
	ents, err := os.ReadDir(d)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if e.Type()&os.ModeSymlink == 0 {
			continue
		}
		t, err := filepath.EvalSymlinks(filepath.Join(d, e.Name()))
		if err != nil {
			continue
		}
		if fi, err := os.Stat(t); err == nil && !fi.IsDir() {
			t = filepath.Dir(t)
		}
		if !within(d, t) && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}
