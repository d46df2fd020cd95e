package sandbox

import (
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
