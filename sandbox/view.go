package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// The view of a Linux sandbox is an allowlist: bwrap's new root is an empty
// folder in memory, and only what the plan names is bound into it. What it
// does not name does not exist inside: /home, /root, /srv, /mnt, /media,
// /opt, /var, /run, /sys, other repositories, other factories' state
// folders and the Unix sockets in them.

// Origins of a mount: the part of the plan that put it there.
const (
	OriginSystem     = "system"      // a system folder programs need
	OriginToolchain  = "toolchain"   // a folder of a program on the step's PATH
	OriginHome       = "home"        // the empty home folder
	OriginWorktree   = "worktree"    // an attempt's worktree and its git folders
	OriginAttempt    = "attempt"     // artifacts/, the temp folder, the private object folder
	OriginLogin      = "login"       // the agent's per-attempt login state
	OriginAllowRead  = "allow_read"  // the factory's allow_read (and a CLI's install)
	OriginAllowWrite = "allow_write" // the factory's allow_write (and caches)
	OriginBinary     = "binary"      // a binary kusaw runs inside (itself, the bridge)
	OriginProxy      = "proxy"       // the egress lease's socket
	OriginProtected  = "protected"   // read-only on top: control files, settings
	OriginHidden     = "hidden"      // hidden again on top: credentials, secrets
	OriginCheckout   = "checkout"    // a project folder of sandbox exec
	OriginCommand    = "command"     // a file the step's command names (a script)
)

// systemFolders are the host folders every sandbox sees, read-only. A
// folder that is a link (merged /usr: /bin -> usr/bin) is made as the same
// link inside.
var systemFolders = []struct{ path, why string }{
	{"/usr", "programs, libraries and their data"},
	{"/bin", "programs"},
	{"/sbin", "system programs"},
	{"/lib", "shared libraries and the dynamic loader"},
	{"/lib32", "32-bit shared libraries"},
	{"/lib64", "the 64-bit dynamic loader"},
	{"/libx32", "x32 shared libraries"},
	{"/etc", "system configuration: users and groups, DNS, TLS roots, alternatives, /etc/gitconfig"},
}

// systemSecretsIn is the system folder whose files other users may not
// read are hidden (etcSecrets): kusaw often runs as root, and root inside
// keeps its uid.
const systemSecretsIn = "/etc"

// inSystem reports whether p lies in a system folder (as it resolves).
func inSystem(p string) bool {
	for _, s := range systemFolders {
		if within(s.path, p) {
			return true
		}
	}
	return false
}

// system adds the base of the view: the system folders, fresh /dev and
// /proc, an empty read-only /tmp and the empty home.
func (b *builder) system() error {
	b.origin = OriginSystem
	if b.plan.Backend != "bubblewrap" {
		return b.systemSeatbelt()
	}
	for _, s := range systemFolders {
		fi, err := os.Lstat(s.path)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			t, err := os.Readlink(s.path)
			if err != nil {
				continue
			}
			b.base = append(b.base, Mount{Op: "symlink", Src: t, Dst: s.path, Reason: s.why + " (a link to " + t + ", as on the host)", Origin: OriginSystem})
		case fi.IsDir():
			b.addBind(&b.base, "ro-bind", s.path, s.path, s.why+", read-only")
		}
	}
	// DNS: resolv.conf is often a link into /run (systemd-resolved).
	if t, err := filepath.EvalSymlinks("/etc/resolv.conf"); err == nil && !inSystem(t) {
		if fi, err := os.Stat(t); err == nil && fi.Mode().IsRegular() {
			b.addBind(&b.base, "ro-bind", t, t, "/etc/resolv.conf links here (DNS), read-only; nothing else of its folder")
		}
	}
	b.base = append(b.base,
		Mount{Op: "dev", Dst: "/dev", Reason: "a fresh /dev with only the basic devices", Origin: OriginSystem},
		Mount{Op: "proc", Dst: "/proc", Reason: "a /proc of the sandbox's own process namespace", Origin: OriginSystem},
	)
	b.addTmpfs(&b.base, "/tmp", "private /tmp, empty and read-only: host sockets such as ssh-agent and X11 stay outside; write to TMPDIR")
	if b.host.WSL {
		b.plan.Notes = append(b.plan.Notes, "WSL: /mnt and /run/WSL are not in the view, WSL_INTEROP is unset")
	}
	b.homeFolder()
	b.etcSecrets(systemSecretsIn)
	return nil
}

// etcSecrets hides every file and folder of root that its mode keeps from
// other users (shadow, ssh host keys, ssl/private, a service's credentials,
// whatever their names): what is not for everyone is not for a step.
// Links are not followed; a folder hidden is not walked. The walk may
// have been started ahead (WalkSystemAhead).
func (b *builder) etcSecrets(root string) {
	for _, e := range unreadableIn(root) {
		if e.dir {
			b.hideKnown(e.path, true, "hidden: a system folder other users may not read (root inside keeps its uid)")
		} else {
			b.hideKnown(e.path, false, "hidden: a system file other users may not read (root inside keeps its uid)")
		}
	}
}

// unreadable is an entry of a system folder that other users may not read.
type unreadable struct {
	path string
	dir  bool
}

// unreadableFor is the rule of the walk (unreadableBelow): a folder others
// may not list and enter, or a regular file others may not read. Links
// and other types are left alone: a link's own mode says nothing.
func unreadableFor(mode fs.FileMode) bool {
	perm := mode.Perm()
	switch {
	case mode.IsDir():
		return perm&0o005 != 0o005
	case mode.IsRegular():
		return perm&0o004 == 0
	}
	return false
}

// unreadableBelowWalk is the walk by path/filepath, in lexical order: what
// other systems use, and what the Linux walk is tested against.
func unreadableBelowWalk(root string) []unreadable {
	var out []unreadable
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return nil
		}
		// The directory entry already says it is a link: no lstat for
		// the links that are most of /etc (alternatives, ssl/certs, rc?.d).
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, ierr := d.Info()
		if ierr != nil || !unreadableFor(fi.Mode()) {
			return nil
		}
		out = append(out, unreadable{p, fi.IsDir()})
		if fi.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	return out
}

// homeFolder makes the home an empty read-only folder: HOME names a folder
// that exists, and only the login state, toolchains and caches the plan
// names appear in it.
func (b *builder) homeFolder() {
	home := b.home
	if home == "" || home == "/" {
		b.plan.Notes = append(b.plan.Notes, "no home (HOME is empty or /)")
		return
	}
	if fi, err := os.Stat(home); err == nil && fi.IsDir() {
		b.origin = OriginHome
		b.addTmpfs(&b.base, home, "hidden: the real home, an empty read-only folder inside (only the entries below appear in it)")
		b.origin = OriginSystem
	}
}

// systemSeatbelt is the macOS base: the system is readable, writes are
// denied unless allowed, and the profile hides the home and host sockets.
func (b *builder) systemSeatbelt() error {
	b.base = append(b.base,
		Mount{Op: "ro-bind", Src: "/", Dst: "/", Reason: "the system, read-only", Origin: OriginSystem},
		Mount{Op: "dev", Dst: "/dev", Reason: "a fresh /dev with only the basic devices", Origin: OriginSystem},
		Mount{Op: "proc", Dst: "/proc", Reason: "a /proc of the sandbox's own process namespace", Origin: OriginSystem},
	)
	b.addTmpfs(&b.base, "/tmp", "private /tmp, empty and read-only: host sockets such as ssh-agent and X11 stay outside; write to TMPDIR")
	b.addTmpfs(&b.base, "/run", "private /run, empty and read-only: the D-Bus session bus, agent sockets and /run/user stay outside")
	if fi, err := os.Lstat("/var/run"); err == nil && fi.IsDir() {
		b.addTmpfs(&b.base, "/var/run", "private /var/run: host sockets stay outside")
	}
	b.homeFolder()
	return nil
}

// Toolchain is one folder the view shows because a program of the step's
// PATH lies in it.
type Toolchain struct {
	Path   string `json:"path"`           // the folder bound read-only (links resolved)
	From   string `json:"from"`           // the PATH entry (or program) that needs it
	Reason string `json:"reason"`         // why this folder and not another
	Link   string `json:"link,omitempty"` // the PATH entry's own name when it is a link
}

// Toolchains returns the folders outside the system folders that the
// programs on path (a PATH value) need, read-only: for an entry .../bin
// the folder above it (/usr/local/go, ~/.nvm/versions/node/v22), else the
// entry itself; and the folder of each link in it that points elsewhere
// (~/.local/bin/claude -> ~/.local/share/claude/versions/X). Never the
// home, a folder holding it, a top-level folder (/opt, /srv, /var), the
// temp folders or a credential folder.
func Toolchains(path, home string) []Toolchain {
	var out []Toolchain
	seen := map[string]bool{}
	add := func(tc Toolchain) {
		if !seen[tc.Path] && !coveredBy(out, tc.Path) {
			seen[tc.Path] = true
			out = append(out, tc)
		}
	}
	// An entry named again adds nothing: the same folders, from the
	// same entry (PATH often holds ~/.cargo/bin twice).
	entries := map[string]bool{}
	for _, e := range filepath.SplitList(path) {
		if e == "" || !filepath.IsAbs(e) || entries[e] {
			continue
		}
		entries[e] = true
		d, err := filepath.EvalSymlinks(filepath.Clean(e))
		if err != nil || !isDir(d) || inSystem(d) || !toolchainRootOK(d, home) {
			continue
		}
		root, why := toolchainRoot(d, home)
		tc := Toolchain{Path: root, From: e, Reason: why}
		if c := filepath.Clean(e); c != d {
			tc.Link = c
		}
		add(tc)
		for _, t := range linkTargets(d) {
			if !inSystem(t) && toolchainRootOK(t, home) {
				add(Toolchain{Path: t, From: e, Reason: "the folder a program of " + e + " links to"})
			}
		}
	}
	// Parents before children, so the plan's order (and doctor's list) is stable.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func coveredBy(tcs []Toolchain, p string) bool {
	for _, t := range tcs {
		if within(t.Path, p) {
			return true
		}
	}
	return false
}

// toolchainRoot picks the folder bound for a PATH entry d: the one above a
// bin/ (or shims/) folder when that is a program's own tree, else d.
func toolchainRoot(d, home string) (string, string) {
	base, parent := filepath.Base(d), filepath.Dir(d)
	if base != "bin" && base != "shims" && base != "sbin" {
		return d, "a folder on the step's PATH"
	}
	// A folder shared by many programs (~/.local, ~/.config) or a
	// top-level one: only the bin folder itself.
	if strings.Count(parent, "/") < 2 || !toolchainRootOK(parent, home) {
		return d, "a folder on the step's PATH (the folder above it is shared, so only this one)"
	}
	if home != "" {
		for _, shared := range []string{".local", ".config", ".cache"} {
			if parent == filepath.Join(home, shared) {
				return d, "a folder on the step's PATH (the folder above it is shared, so only this one)"
			}
		}
	}
	// Only a program's own tree: libraries or tools beside its bin/. A
	// folder of projects with a bin/ in it (/srv/projects/bin) is not one,
	// and may hold other factories' state folders.
	if !slices.ContainsFunc(toolchainMarkers, func(m string) bool { return isDir(filepath.Join(parent, m)) }) {
		return d, "a folder on the step's PATH (the folder above it holds no lib/, libexec/, pkg/ or the like, so only this one)"
	}
	return parent, "the toolchain " + d + " on the step's PATH belongs to (its libraries and tools are next to its bin/)"
}

// toolchainMarkers are folders beside bin/ that make its parent a
// program's own tree.
var toolchainMarkers = []string{"lib", "lib64", "libexec", "pkg", "include", "versions", "plugins"}

// toolchainRootOK refuses folders a toolchain may never widen the view to.
func toolchainRootOK(p, home string) bool {
	if p == "/" || strings.Count(p, "/") < 2 && !inSystem(p) {
		return false
	}
	for _, t := range []string{"/tmp", "/proc", "/dev", "/sys", "/run", "/var/run"} {
		if within(t, p) {
			return false
		}
	}
	if goWorkspace(p) {
		return false
	}
	if home != "" {
		if within(p, home) { // the home or a folder holding it
			return false
		}
		for _, c := range credentialDirs {
			if cp := filepath.Join(home, c); within(cp, p) || within(p, cp) {
				return false
			}
		}
	}
	return true
}

// goWorkspace reports whether p is a GOPATH (the folder above go
// install's bin/): its src/ holds other repositories and pkg/mod module
// sources, so it is never a toolchain. A Go toolchain (GOROOT) has src/
// and pkg/ too, and its VERSION file; pyenv has src/ but no pkg/.
func goWorkspace(p string) bool {
	if exists(filepath.Join(p, "VERSION")) || !isDir(filepath.Join(p, "pkg")) {
		return false
	}
	return isDir(filepath.Join(p, "pkg", "mod")) || isDir(filepath.Join(p, "src"))
}

// linkTargets returns the folders that the links in d point to, outside d.
// d is resolved (no link in it), so a link whose target is a name in d
// (rustup's proxies: cargo -> rustup, a dozen of them) resolves as that
// name does: each such name is resolved once, not once per link.
func linkTargets(d string) []string {
	var out []string
	sibling := map[string]string{} // a name in d -> the folder it resolves to, "" if none
	for _, name := range linkNames(d) {
		p := filepath.Join(d, name)
		var t string
		if l, err := os.Readlink(p); err == nil && l != "." && l != ".." && l != "" && !strings.Contains(l, "/") {
			var ok bool
			if t, ok = sibling[l]; !ok {
				t = linkFolder(filepath.Join(d, l))
				sibling[l] = t
			}
		} else {
			t = linkFolder(p)
		}
		if t != "" && !within(d, t) && !slicesContains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// linkFolder is the folder p resolves to: p's target when it is a folder,
// else the folder holding it; "" when p does not resolve.
func linkFolder(p string) string {
	t, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	if fi, err := os.Stat(t); err == nil && !fi.IsDir() {
		t = filepath.Dir(t)
	}
	return t
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// toolchains binds the folders of the step's PATH programs, read-only.
func (b *builder) toolchains() error {
	if b.plan.Backend != "bubblewrap" {
		return nil // macOS: the system is readable as a whole
	}
	b.origin = OriginToolchain
	for _, tc := range Toolchains(b.stepPath(), b.home) {
		if b.allowReadHas(tc.Path) {
			continue // allow_read shows it already
		}
		if within(tc.Path, b.attempt) || within(b.attempt, tc.Path) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("toolchain %s (for %s) is or holds the attempt's folder; not mounted", tc.Path, tc.From))
			continue
		}
		if b.hiddenAt(tc.Path) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("toolchain %s (for %s) lies in a hidden folder; not mounted", tc.Path, tc.From))
			continue
		}
		b.addBind(&b.reads, "ro-bind", tc.Path, tc.Path, "toolchain: "+tc.Reason+" ("+tc.From+")")
		if tc.Link != "" && !b.mounted[tc.Link] && !within(tc.Path, tc.Link) {
			b.addBind(&b.reads, "ro-bind", filepath.Join(tc.Path, rel(filepath.Dir(tc.Path), tc.From)), tc.Link, "toolchain: the PATH entry "+tc.From+" at the name it has (a link)")
		}
		b.plan.Toolchains = append(b.plan.Toolchains, tc)
	}
	return nil
}

func (b *builder) allowReadHas(p string) bool {
	for _, r := range b.in.AllowRead {
		if filepath.IsAbs(r) && within(resolve(r), p) {
			return true
		}
	}
	return false
}

// hiddenAt reports whether p is, holds or lies in a hidden path or a
// credential folder.
func (b *builder) hiddenAt(p string) bool {
	for _, h := range b.in.HiddenPaths {
		if filepath.IsAbs(h) {
			r := resolve(h)
			if within(r, p) || within(p, r) {
				return true
			}
		}
	}
	return false
}

// stepPath is the PATH the step runs with.
func (b *builder) stepPath() string {
	if v, ok := b.in.Env["PATH"]; ok {
		return v
	}
	for _, kv := range b.host.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v
		}
	}
	return defaultPath
}

const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// mountRank orders mounts at one path: writable before read-only, so a
// read-only mount is never covered by a writable one.
func mountRank(m Mount) int {
	switch m.Op {
	case "bind", "tmpfs-rw", "dir":
		return 0
	}
	return 1
}

func depth(p string) int {
	p = filepath.Clean(p)
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// ordered returns the mounts in the order the backend makes them: every
// folder before what lies in it, and at one path the writable mount
// before the read-only one. So no mount ever covers one made before it:
// a read-only path stays read-only whatever part of the plan added it
// (writable folders inside it, git's objects/ in a read-only .git, are
// holes made after it). Remounts come last, then the read-only root.
func ordered(mounts []Mount, remounts []Mount, bwrap bool) []Mount {
	out := append([]Mount(nil), mounts...)
	sort.SliceStable(out, func(i, j int) bool {
		di, dj := depth(out[i].Dst), depth(out[j].Dst)
		if di != dj {
			return di < dj
		}
		// Paths of one depth do not cover each other; their order is
		// by name only so the sort is well defined.
		if out[i].Dst != out[j].Dst {
			return out[i].Dst < out[j].Dst
		}
		return mountRank(out[i]) < mountRank(out[j])
	})
	out = append(out, remounts...)
	if bwrap {
		out = append(out, Mount{Op: "remount-ro", Dst: "/", Reason: "the view's root: nothing can be created beside what the plan names", Origin: OriginSystem})
	}
	return out
}

// commandFiles shows, read-only, the files the step's command names by
// absolute path outside the view (run: [sh, /srv/factory/check.sh]):
// files only, never a folder, a credential or a hidden path.
func (b *builder) commandFiles() error {
	b.origin = OriginCommand
	for _, a := range b.in.Argv {
		if !filepath.IsAbs(a) || strings.ContainsRune(a, 0) {
			continue
		}
		r := resolve(a)
		fi, err := os.Stat(r)
		if err != nil || !fi.Mode().IsRegular() || inSystem(r) || b.underBind(r) || b.mounted[r] || within(b.attempt, r) {
			continue // not a file, or visible already (the attempt's own folders come later)
		}
		if b.hiddenAt(r) || b.credential(r, b.home, false) != "" {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("the command names %s, which is hidden; not mounted", a))
			continue
		}
		b.addBind(&b.reads, "ro-bind", r, r, "a file the step's command names, read-only")
		if c := filepath.Clean(a); c != r && !b.mounted[c] {
			b.addBind(&b.reads, "ro-bind", r, c, "a file the step's command names, at the name it uses")
		}
	}
	return nil
}

// View lists the mounts in the order the backend makes them, one line
// each: the origin (where in the plan it comes from), what it is, the
// path, and why. kusaw sandbox doctor prints it.
func (p *Plan) View() []string {
	out := make([]string, 0, len(p.Mounts))
	for _, m := range p.Mounts {
		if m.Op == "remount-ro" && m.Dst != "/" {
			continue // said by the tmpfs it makes read-only
		}
		what := map[string]string{"ro-bind": "read-only", "bind": "writable", "tmpfs": "empty, read-only", "tmpfs-rw": "writable, in memory",
			"empty-file": "read-only, empty", "symlink": "link", "dir": "folder", "dev": "devices", "proc": "processes", "remount-ro": "read-only"}[m.Op]
		if m.Src == "/dev/null" || m.Origin == OriginHidden {
			what = "hidden"
		}
		line := fmt.Sprintf("%-11s %-17s %s", m.Origin, what, m.Dst)
		if m.Src != "" && m.Src != m.Dst && m.Src != "/dev/null" && m.Op != "empty-file" {
			line += " <- " + m.Src
		}
		out = append(out, line+"  ("+m.Reason+")")
	}
	return out
}
