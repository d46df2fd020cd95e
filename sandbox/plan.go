package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/kusaw/kusaw/status"
)

// Network modes of a plan.
const (
	NetworkOpen      = "open"      // the host's network, unrestricted
	NetworkNone      = "none"      // a private network namespace with only loopback
	NetworkAllowlist = "allowlist" // a private namespace whose only way out is the lease's proxy socket
)

// Worktree is one git worktree an attempt sees.
type Worktree struct {
	Repo      string // the repo's name in the factory (for messages)
	Path      string // the worktree directory
	GitDir    string // its private git dir: <common>/worktrees/<x>
	CommonDir string // the repository's .git
	Writable  bool   // false for per_repo's other repos: visible read-only
	// RefStore, when set (Linux), is the attempt's private ref store: its
	// refs/ and logs/ are mounted over the repository's, so the step's
	// branches, tags and reflogs go there and the repository's own ref
	// and reflog folders stay read-only. kusaw reads the attempt branch
	// from it afterwards, checked, and moves the real branch itself.
	RefStore string
}

// Proxy is what the sandbox needs from an egress lease (allowlist mode).
type Proxy struct {
	SocketPath string // the lease's Unix socket, bound into the sandbox (Linux)
	Port       int    // the lease's loopback port (macOS: no namespace, the profile admits only this port)
	// LocalPorts are the host loopback ports of local-service entries:
	// the macOS profile admits them too (on Linux the bridge forwards them).
	LocalPorts []int
	Env        []string // NAME=value proxy variables for the step
	WrapArgv   []string // argv run first inside (the egress bridge), ending in "--" if it needs one
	Binaries   []string // files bound read-only so WrapArgv can run (the kusaw binary)
}

// Host describes the machine for plan decisions; nil in Input means "this machine".
type Host struct {
	WSL bool     // Windows Subsystem for Linux: /mnt and /run/WSL are hidden
	Env []string // the environment the base variables are taken from
}

// DetectHost describes the machine kusaw runs on.
func DetectHost() *Host {
	return &Host{WSL: isWSL(), Env: os.Environ()}
}

func isWSL() bool {
	b, err := os.ReadFile("/proc/version")
	if err != nil {
		return false
	}
	s := strings.ToLower(string(b))
	return strings.Contains(s, "microsoft") || strings.Contains(s, "wsl")
}

// Input is everything a plan is built from: plain data, no policy objects.
type Input struct {
	Worktrees    []Worktree
	AttemptDir   string // the attempt's folder: not visible inside except artifacts/ and tmp/
	ArtifactsDir string
	TmpDir       string
	// PrivateTmp (Linux) makes TmpDir, and ArtifactsDir when set, folders
	// that exist only inside the sandbox: writable, in memory, gone with
	// it. Nothing is created or removed on the host for them (kusaw
	// sandbox exec without a factory keeps no records). Ignored on macOS.
	PrivateTmp bool
	// PrivateTmpSize bounds each private in-memory folder (bytes; 0: no
	// bound): without it a command could fill the machine's memory.
	PrivateTmpSize int64
	Workdir        string // where the process starts (default: the first writable worktree)
	// ObjectDir, when set, is the attempt's private git object folder
	// (inside AttemptDir): the repositories' own objects/ become read-only
	// and git writes new objects here (GIT_OBJECT_DIRECTORY), reading the
	// repositories' objects as alternates. kusaw imports what a branch
	// needs from it outside, re-hashing every object, so a step cannot
	// replace an existing object of the repository. Empty: objects/ stays
	// writable (loose objects can then be replaced).
	ObjectDir string

	Home       string   // the real home: hidden
	FreshHome  bool     // HOME is a fresh, empty folder in TmpDir and LoginPaths are not mounted (always on macOS: the agent signs in with a token)
	LoginPaths []string // agent login folders/files, mounted read-write

	AllowRead  []string
	AllowWrite []string
	// SettingsScriptsWritable are paths, relative to a worktree, that
	// agent settings name and the step may change anyway (build output an
	// MCP server runs); never in git's folder.
	SettingsScriptsWritable []string
	// Checkouts are writable folders that may be a project checkout
	// (sandbox exec without a factory makes the current folder one): the
	// same protections as a worktree apply in each (agent and editor
	// settings, the folder core.hooksPath names, missing ones included),
	// and its .git folder is read-only as a whole.
	Checkouts   []string
	HiddenPaths []string // caller's secrets: the secret store, key folders, other repos

	Env     map[string]string // the step's own env, resolved
	Network string
	Proxy   *Proxy

	ExtraBinaries []string // files bound read-only (the kusaw binary for built-in steps)
	Host          *Host    // nil: DetectHost()
}

// Precreated is a file or folder Prepare creates when missing.
type Precreated struct {
	Path    string `json:"path"`
	Dir     bool   `json:"dir,omitempty"`
	Content string `json:"content,omitempty"`
}

// PathRule is one path decision and why it was made.
type PathRule struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// EnvVar names one variable of the step's environment and where it came
// from. Values are never printed: a step may declare a secret.
type EnvVar struct {
	Name   string `json:"name"`
	Origin string `json:"origin"`
}

// Mount is one filesystem operation of the backend, in order: later mounts
// cover earlier ones.
type Mount struct {
	Op     string `json:"op"` // ro-bind, bind, tmpfs, tmpfs-rw, dir, dev, proc, empty-file, remount-ro
	Src    string `json:"src,omitempty"`
	Dst    string `json:"dst"`
	Reason string `json:"reason"`
	// Size bounds a writable tmpfs (bytes; 0: the kernel's default).
	Size int64 `json:"size,omitempty"`
}

// Plan is the fully resolved sandbox of one attempt. It is pure data:
// printable (String, JSON) and testable without a backend.
type Plan struct {
	Backend  string     `json:"backend"`
	Network  string     `json:"network"`
	Workdir  string     `json:"workdir"`
	Writable []PathRule `json:"writable"`
	ReadOnly []PathRule `json:"read_only"`
	Hidden   []PathRule `json:"hidden"`
	EnvVars  []EnvVar   `json:"env"`
	Dropped  []EnvVar   `json:"env_dropped,omitempty"` // Origin holds why
	Notes    []string   `json:"notes,omitempty"`
	Mounts   []Mount    `json:"mounts"`
	// StandIns are mount points that did not exist when the plan was made
	// and that the backend creates on disk for the run; Cleanup removes them.
	StandIns []string `json:"stand_ins,omitempty"`
	WrapArgv []string `json:"wrap_argv,omitempty"`
	// EmptyFile is the read-only empty file bound over missing protected files.
	EmptyFile string `json:"empty_file,omitempty"`
	// Precreate lists harmless empty settings Prepare creates (and leaves)
	// in the agent's login folder so they can be mounted read-only.
	Precreate []Precreated `json:"precreate,omitempty"`
	Socket    string       `json:"proxy_socket,omitempty"`
	ProxyPort int          `json:"proxy_port,omitempty"` // macOS: the lease's loopback port
	// LocalPorts are the leased local-service ports (macOS: admitted by
	// the profile; Linux: forwarded by the bridge).
	LocalPorts []int `json:"local_ports,omitempty"`
	// Home and AttemptDir as resolved (for probes and doctor).
	Home       string `json:"home,omitempty"`
	AttemptDir string `json:"attempt_dir,omitempty"`

	// Env is the exact environment of the step (NAME=value). Never printed.
	Env []string `json:"-"`
	// mkdirs are folders Command creates before the start (temp subfolders).
	mkdirs []string
	// privateTmp: the temp folder is a tmpfs of the sandbox (Input.PrivateTmp).
	privateTmp bool
}

// Base variables taken from the host when set; everything else of the host
// environment is left out.
var baseEnvNames = []string{"PATH", "USER", "LOGNAME", "LANG", "LANGUAGE", "TERM", "TZ", "COLORTERM", "NO_COLOR"}

// Variables never passed in, even when a step declares them: they lead to
// agents and buses outside the sandbox.
var neverEnv = map[string]string{
	"SSH_AUTH_SOCK":            "the SSH agent stays outside: signing and keys are not reachable",
	"SSH_AGENT_PID":            "the SSH agent stays outside",
	"GPG_AGENT_INFO":           "the GPG agent stays outside: signing is not reachable",
	"GNUPGHOME":                "the GPG home stays outside",
	"DBUS_SESSION_BUS_ADDRESS": "the D-Bus session bus is not mounted",
	"WSL_INTEROP":              "WSL interop would start Windows programs outside the sandbox",
	"KUSAW_SECRET_STORE":       "kusaw's secret store stays outside",
}

// Credential folders in the home, hidden again on top of anything that
// allow_read or a login path exposes.
var credentialDirs = []string{
	".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker", ".config/gcloud", ".config/gh",
	".netrc", ".git-credentials", ".npmrc", ".pypirc", ".config/kusaw", ".local/share/kusaw",
}

// System folders allow_write may never name, contain or lie in.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr"}

// Folders allow_write may lie in (a cache under /var/cache) but never name
// or contain.
var systemRoots = []string{"/var", "/opt", "/srv", "/home", "/mnt", "/media", "/root", "/tmp"}

func refuse(fix, format string, args ...any) error {
	return &status.Error{Reason: status.ReasonSandboxPlanRefused, Msg: fmt.Sprintf(format, args...), Fix: fix}
}

// builder accumulates mounts in tiers so that later tiers cover earlier ones.
type builder struct {
	in      Input
	host    *Host
	plan    *Plan
	base    []Mount // /, /dev, /proc, /tmp, /run, WSL
	hide    []Mount // the home and the repositories' own checkouts
	reads   []Mount // allow_read, binaries, read-only worktrees
	writes  []Mount // worktrees, git folders, artifacts, tmp, login, allow_write
	secrets []Mount // credential folders and the caller's hidden paths
	protect []Mount // control files and settings, read-only on top
	remount []Mount
	mounted map[string]bool // destinations already given a mount
	home    string          // the resolved home
	visible []string        // every bind destination (for conflict checks)
	objDir  string          // the private object folder, or ""
	alts    []string        // the repositories' objects/ folders (GIT_ALTERNATE_OBJECT_DIRECTORIES)
}

// BuildPlan resolves the sandbox of one attempt. It reads the filesystem
// (to resolve links and see what exists) but changes nothing.
func BuildPlan(in Input) (*Plan, error) {
	b := &builder{in: in, host: in.Host, mounted: map[string]bool{}}
	if b.host == nil {
		b.host = DetectHost()
	}
	b.plan = &Plan{Backend: "bubblewrap"}
	if runtime.GOOS == "darwin" {
		// macOS: always a fresh HOME and never the agent's real login
		// folders (docs/architecture.md, "The sandbox and the seam with the host"), whatever the caller passed.
		b.plan.Backend = "seatbelt"
		b.in.FreshHome = true
	}
	if err := b.build(); err != nil {
		return nil, err
	}
	p := b.plan
	for _, tier := range [][]Mount{b.base, b.hide, b.reads, b.writes, b.secrets, b.protect, b.remount} {
		p.Mounts = append(p.Mounts, tier...)
	}
	for _, m := range p.Mounts {
		switch m.Op {
		case "bind", "tmpfs-rw":
			p.Writable = append(p.Writable, PathRule{m.Dst, m.Reason})
		case "ro-bind", "empty-file":
			if m.Src == "/dev/null" && isHideReason(m.Reason) { // a hidden file
				p.Hidden = append(p.Hidden, PathRule{m.Dst, m.Reason})
			} else {
				p.ReadOnly = append(p.ReadOnly, PathRule{m.Dst, m.Reason})
			}
		case "tmpfs":
			if isHideReason(m.Reason) {
				p.Hidden = append(p.Hidden, PathRule{m.Dst, m.Reason})
			} else {
				p.ReadOnly = append(p.ReadOnly, PathRule{m.Dst, m.Reason})
			}
		}
	}
	return p, nil
}

func isHideReason(r string) bool {
	return strings.HasPrefix(r, "hidden") || strings.HasPrefix(r, "private")
}

func (b *builder) build() error {
	in := b.in
	var err error
	for _, w := range in.SettingsScriptsWritable {
		c := filepath.ToSlash(filepath.Clean(w))
		if filepath.IsAbs(w) || c == "." || c == ".." || strings.HasPrefix(c, "../") || c == ".git" || strings.HasPrefix(c, ".git/") {
			return refuse("list paths inside the repository, relative to its top, outside .git", "sandbox.settings_scripts_writable: %q is not a path inside the worktree (or it is git's own folder)", w)
		}
	}
	abs := func(what, p string) (string, error) {
		if p == "" {
			return "", nil
		}
		if !filepath.IsAbs(p) {
			return "", refuse("give an absolute path", "%s %q is not an absolute path", what, p)
		}
		return resolve(p), nil
	}
	net := in.Network
	if net == "" {
		net = NetworkOpen
	}
	switch net {
	case NetworkOpen, NetworkNone:
	case NetworkAllowlist:
		if in.Proxy == nil || (in.Proxy.SocketPath == "" && in.Proxy.Port == 0) {
			return refuse("lease the egress proxy before building the plan", "network allowlist needs the proxy lease's socket (Linux) or loopback port (macOS)")
		}
	default:
		return refuse("use open, none or allowlist", "unknown network mode %q", in.Network)
	}
	b.plan.Network = net
	if in.AttemptDir == "" || in.TmpDir == "" {
		return refuse("pass the attempt folder and its tmp folder", "the plan needs AttemptDir and TmpDir")
	}
	attempt, _ := abs("attempt dir", in.AttemptDir)
	if attempt == "" {
		return refuse("give an absolute path", "attempt dir %q is not an absolute path", in.AttemptDir)
	}
	tmp, err := abs("tmp dir", in.TmpDir)
	if err != nil {
		return err
	}
	artifacts, err := abs("artifacts dir", in.ArtifactsDir)
	if err != nil {
		return err
	}
	// No home given: hide the one kusaw runs with, never show it by omission.
	homeIn := in.Home
	if homeIn == "" {
		for _, kv := range b.host.Env {
			if v, ok := strings.CutPrefix(kv, "HOME="); ok {
				homeIn = v
			}
		}
	}
	home, err := abs("home", homeIn)
	if err != nil {
		return err
	}
	b.home = home
	b.plan.Home, b.plan.AttemptDir = home, attempt
	// bwrap makes the read-only empty file of a missing protected file
	// itself (--ro-bind-data), so nothing is created on the host for it.
	if b.plan.Backend != "bubblewrap" {
		b.plan.EmptyFile = filepath.Join(attempt, ".sandbox-empty")
	}
	private := in.PrivateTmp && b.plan.Backend == "bubblewrap"
	b.plan.privateTmp = private

	// Base: the system read-only, fresh /dev and /proc, private /tmp and /run.
	b.base = append(b.base,
		Mount{Op: "ro-bind", Src: "/", Dst: "/", Reason: "the system, read-only"},
		Mount{Op: "dev", Dst: "/dev", Reason: "a fresh /dev with only the basic devices"},
		Mount{Op: "proc", Dst: "/proc", Reason: "a /proc of the sandbox's own process namespace"},
	)
	// /tmp and /run: empty and read-only (TMPDIR is the place to write), so
	// the host's sockets stay outside and nothing is written to phantom
	// folders that vanish.
	b.addTmpfs(&b.base, "/tmp", "private /tmp, empty and read-only: host sockets such as ssh-agent and X11 stay outside; write to TMPDIR")
	b.addTmpfs(&b.base, "/run", "private /run, empty and read-only: the D-Bus session bus, agent sockets and /run/user stay outside")
	if fi, err := os.Lstat("/var/run"); err == nil && fi.IsDir() {
		b.addTmpfs(&b.base, "/var/run", "private /var/run: host sockets stay outside")
	}
	if b.host.WSL {
		b.addTmpfs(&b.base, "/mnt", "hidden: WSL's Windows drives (/mnt)")
		b.plan.Notes = append(b.plan.Notes, "WSL: /run/WSL is hidden by the private /run, WSL_INTEROP is unset")
	}

	// Hidden before binds: the home, and each repository's own checkout.
	if home != "" && home != "/" {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			b.addTmpfs(&b.hide, home, "hidden: the real home (only the agent's login folders are mounted into it)")
		}
	} else {
		b.plan.Notes = append(b.plan.Notes, "no home to hide (HOME is empty or /)")
	}
	for _, w := range in.Worktrees {
		c := resolve(w.CommonDir)
		if filepath.Base(c) == ".git" {
			checkout := filepath.Dir(c)
			if !b.mounted[checkout] && checkout != "/" {
				b.addTmpfs(&b.hide, checkout, fmt.Sprintf("hidden: repo %s's own checkout (uncommitted files, .env); only its .git is mounted", w.Repo))
			}
		}
	}

	// Read-only extras.
	for _, p := range in.AllowRead {
		r, err := abs("allow_read entry", p)
		if err != nil {
			return err
		}
		if home != "" && within(r, home) {
			return refuse("name a folder inside the home instead of the home itself", "allow_read %q would expose the whole home", p)
		}
		if c := b.credential(r, home, false); c != "" {
			return refuse("remove it from sandbox.allow_read", "allow_read %q names a credential folder (%s)", p, c)
		}
		if !exists(r) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("allow_read %s does not exist; not mounted", r))
			continue
		}
		b.addBind(&b.reads, "ro-bind", r, r, "allow_read (not protected: the factory chose to show it)")
	}
	bins := append(append([]string{}, in.ExtraBinaries...), confineBinaries()...)
	if in.Proxy != nil {
		bins = append(bins, in.Proxy.Binaries...)
	}
	for _, p := range bins {
		if !filepath.IsAbs(p) {
			return refuse("give an absolute path", "binary %q is not an absolute path", p)
		}
		r := resolve(p)
		if !exists(r) {
			return refuse("build or install it first", "binary %s does not exist", p)
		}
		b.addBind(&b.reads, "ro-bind", r, r, "a binary the step needs (read-only)")
		if lp := filepath.Clean(p); lp != r {
			b.addBind(&b.reads, "ro-bind", r, lp, "a binary the step needs, at the path it is called by")
		}
	}

	// Writable: worktrees and the git folders they need.
	objDir, err := abs("object dir", in.ObjectDir)
	if err != nil {
		return err
	}
	if objDir != "" {
		if !isDir(objDir) {
			return refuse("create the attempt's object folder first", "object folder %s does not exist", objDir)
		}
		if !within(attempt, objDir) || objDir == attempt {
			return refuse("put the object folder inside the attempt folder", "object folder %s is not inside the attempt folder %s", objDir, attempt)
		}
		b.objDir = objDir
	}
	for _, w := range in.Worktrees {
		if err := b.worktree(w); err != nil {
			return err
		}
	}
	if objDir != "" {
		b.addBind(&b.writes, "bind", objDir, objDir, "the attempt's private git object folder: new objects go here (GIT_OBJECT_DIRECTORY); kusaw imports them outside, re-hashing each")
	}
	switch {
	case private:
		// In the sandbox's memory: no folder to make on the host before,
		// none to remove after. Under the private /tmp, where bwrap can
		// make the folders above it without touching the host.
		for _, d := range []string{tmp, artifacts} {
			if d != "" && (!within("/tmp", d) || d == "/tmp") {
				return refuse("put the private temp folder under /tmp", "private temp folder %s is not under /tmp (the sandbox's own)", d)
			}
		}
		if artifacts != "" {
			b.addPrivateDir(artifacts, "the attempt's artifacts/ (in the sandbox's memory: gone when it ends)")
		}
		b.addPrivateDir(tmp, "the attempt's private temp folder (TMPDIR, XDG_CACHE_HOME, XDG_RUNTIME_DIR; in the sandbox's memory: gone when it ends)")
	default:
		if artifacts != "" {
			if !isDir(artifacts) {
				return refuse("create the attempt's artifacts folder first", "artifacts folder %s does not exist", artifacts)
			}
			b.addBind(&b.writes, "bind", artifacts, artifacts, "the attempt's artifacts/")
		}
		if !isDir(tmp) {
			return refuse("create the attempt's tmp folder first", "tmp folder %s does not exist", tmp)
		}
		b.addBind(&b.writes, "bind", tmp, tmp, "the attempt's private temp folder (TMPDIR, XDG_CACHE_HOME, XDG_RUNTIME_DIR)")
	}
	if b.in.FreshHome && len(in.LoginPaths) > 0 {
		b.plan.Notes = append(b.plan.Notes, "login folders are not mounted: HOME is fresh and the agent signs in with a token (a step secret)")
	}
	for _, p := range in.LoginPaths {
		if b.in.FreshHome {
			break
		}
		r, err := abs("login path", p)
		if err != nil {
			return err
		}
		if !exists(r) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("login path %s does not exist; not mounted", r))
			continue
		}
		if home != "" && within(r, home) {
			return refuse("name the agent's own folder", "login path %q would expose the whole home", p)
		}
		b.addBind(&b.writes, "bind", r, r, "the agent's own login folder or file (not protected: the agent holds its login itself)")
		// A login path that is a link: the agent looks it up by its own name.
		if lp := filepath.Clean(p); lp != r && !b.mounted[lp] {
			b.addBind(&b.writes, "bind", r, lp, "the agent's login path, at the name the agent uses (it is a link to "+r+")")
		}
		if isDir(r) {
			if err := b.loginSettings(r); err != nil {
				return err
			}
		}
	}
	for _, p := range in.AllowWrite {
		r, err := abs("allow_write entry", p)
		if err != nil {
			return err
		}
		if err := b.checkAllowWrite(p, r, home, attempt); err != nil {
			return err
		}
		if !exists(r) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("allow_write %s does not exist; not mounted", r))
			continue
		}
		b.addBind(&b.writes, "bind", r, r, "allow_write (not protected: the factory chose to open it)")
	}
	for _, c := range in.Checkouts {
		if err := b.checkout(c); err != nil {
			return err
		}
	}
	if in.Proxy != nil && net == NetworkAllowlist {
		if in.Proxy.SocketPath != "" {
			s := resolve(in.Proxy.SocketPath)
			b.addBind(&b.writes, "bind", s, s, "the egress lease's socket (the only way out)")
			b.plan.Socket = s
		}
		b.plan.ProxyPort = in.Proxy.Port
		b.plan.LocalPorts = append([]int(nil), in.Proxy.LocalPorts...)
		b.plan.WrapArgv = append([]string{}, in.Proxy.WrapArgv...)
	}

	// Secrets hidden on top of every bind.
	if home != "" && home != "/" {
		for _, c := range credentialDirs {
			p := filepath.Join(home, c)
			if exists(p) && b.underBind(p) {
				b.hidePath(p, "hidden: credential folder "+c)
			}
		}
	}
	for _, p := range in.HiddenPaths {
		r, err := abs("hidden path", p)
		if err != nil {
			return err
		}
		for _, v := range b.visible {
			if within(r, v) {
				return refuse("move the attempt outside the hidden folder or stop hiding it", "hidden path %s contains %s, which the step needs", r, v)
			}
		}
		if !exists(r) {
			continue
		}
		b.hidePath(r, "hidden: kusaw's secrets or a path the factory keeps out")
	}

	// Workdir.
	wd := in.Workdir
	if wd == "" {
		for _, w := range in.Worktrees {
			if w.Writable {
				wd = w.Path
				break
			}
		}
	}
	if wd == "" && len(in.Worktrees) > 0 {
		wd = in.Worktrees[0].Path
	}
	if wd == "" {
		wd = tmp
	}
	wdr, err := abs("workdir", wd)
	if err != nil {
		return err
	}
	b.plan.Workdir = wdr

	for k, v := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return refuse("fix the variable's name or value in the step's env", "env variable %q has an empty name, or a '=' or NUL byte in it", k)
		}
	}
	b.buildEnv(home, tmp)
	return nil
}

// worktree adds one worktree, its git folders and its protected files.
func (b *builder) worktree(w Worktree) error {
	if w.Path == "" || w.GitDir == "" || w.CommonDir == "" {
		return refuse("pass Path, GitDir and CommonDir of each worktree", "worktree of repo %q is incomplete", w.Repo)
	}
	for _, p := range []string{w.Path, w.GitDir, w.CommonDir} {
		if !filepath.IsAbs(p) {
			return refuse("give absolute paths", "worktree path %q of repo %s is not absolute", p, w.Repo)
		}
	}
	wt, gd, cd := resolve(w.Path), resolve(w.GitDir), resolve(w.CommonDir)
	for _, p := range []string{wt, gd, cd} {
		if !isDir(p) {
			return refuse("create the worktree first (git worktree add)", "%s of repo %s is not a directory", p, w.Repo)
		}
	}
	if !w.Writable {
		b.addBind(&b.reads, "ro-bind", wt, wt, fmt.Sprintf("repo %s's worktree, read-only (another repo's attempt writes it)", w.Repo))
		b.addBind(&b.reads, "ro-bind", cd, cd, fmt.Sprintf("repo %s's git folder, read-only", w.Repo))
		if p := filepath.Join(cd, "objects"); b.objDir != "" && isDir(p) && !slices.Contains(b.alts, p) {
			b.alts = append(b.alts, p)
		}
		return nil
	}
	if gd == cd {
		return refuse("let kusaw create a linked worktree (git worktree add)", "worktree %s of repo %s is a main checkout; kusaw sandboxes linked worktrees only", wt, w.Repo)
	}
	b.addBind(&b.writes, "bind", wt, wt, fmt.Sprintf("repo %s's worktree", w.Repo))

	// The common dir read-only as a whole: config, hooks/, info/, packed-refs,
	// modules/, other worktrees' folders, HEAD of the user's checkout.
	// Once per repository: a second worktree of the same repo must not
	// cover the first one's writable folders again.
	if !b.mounted[cd] {
		b.addBind(&b.writes, "ro-bind", cd, cd, fmt.Sprintf("repo %s's git control files (config, hooks/, info/, packed-refs, modules/, worktrees/), read-only", w.Repo))
		if p := filepath.Join(cd, "objects"); isDir(p) && b.objDir != "" {
			// Covered by the read-only common dir, loose objects included:
			// git does not re-hash an object it reads, so a replaced one
			// would change history other branches rely on.
			b.alts = append(b.alts, p)
			b.writes[len(b.writes)-1].Reason += "; objects/ too: new objects go to the attempt's private object folder"
		} else if isDir(p) {
			b.addBind(&b.writes, "bind", p, p, "git objects: a commit writes new loose objects")
			// Packs and alternates are never written by a commit: read-only,
			// so the step cannot swap the packed history or point the
			// repository at objects of its own.
			for _, sub := range []string{"pack", "info"} {
				if q := filepath.Join(p, sub); isDir(q) {
					b.addBind(&b.writes, "ro-bind", q, q, "git objects/"+sub+"/: existing packs and alternates stay as they are (git gc inside fails)")
				}
			}
		}
	}
	if w.RefStore != "" {
		if err := b.refStore(w, cd); err != nil {
			return err
		}
	} else if ref := headRef(gd); ref != "" {
		// Only the folder holding the attempt's own branch is writable, so
		// the step cannot move the user's branches or tags.
		refFile := filepath.Join(cd, filepath.FromSlash(ref))
		if fi, err := os.Lstat(refFile); err == nil && fi.Mode().IsRegular() {
			dir := filepath.Dir(refFile)
			why := "the folder of the attempt's branch " + ref + ": a commit moves it"
			if dir == filepath.Join(cd, "refs", "heads") {
				why += " (the branch is at the top of refs/heads, so every branch there is writable)"
			}
			b.addBind(&b.writes, "bind", dir, dir, why)
			if ld := filepath.Join(cd, "logs", filepath.FromSlash(ref)); exists(ld) {
				b.addBind(&b.writes, "bind", filepath.Dir(ld), filepath.Dir(ld), "the reflog folder of the attempt's branch")
			}
		} else {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("repo %s: branch %s has no loose ref file; commits inside cannot move it", w.Repo, ref))
		}
	} else {
		b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("repo %s: HEAD is detached; commits inside move only HEAD", w.Repo))
	}
	b.addBind(&b.writes, "bind", gd, gd, "the worktree's own git folder: index, logs/, ORIG_HEAD")
	if headRef(gd) != "" {
		// The worktree stays on the attempt's branch: kusaw's own commit
		// outside follows HEAD, so a HEAD moved to main would land there.
		// Commits, amends and resets still work; checkout of another branch
		// does not.
		h := filepath.Join(gd, "HEAD")
		b.addBind(&b.protect, "ro-bind", h, h, "HEAD of the worktree: it stays on the attempt's branch, which kusaw commits outside")
	}
	for _, f := range []string{"commondir", "gitdir"} {
		p := filepath.Join(gd, f)
		if exists(p) {
			b.addBind(&b.protect, "ro-bind", p, p, "git control file "+f+" of the worktree's git folder (where git finds the repository)")
		}
	}
	cfgs := []string{"/etc/gitconfig", filepath.Join(cd, "config"), filepath.Join(gd, "config.worktree")}
	if b.home != "" {
		cfgs = append([]string{filepath.Join(b.home, ".gitconfig"), filepath.Join(b.home, ".config", "git", "config")}, cfgs...)
	}
	if wc := filepath.Join(gd, "config.worktree"); exists(wc) {
		b.addBind(&b.protect, "ro-bind", wc, wc, "git control file config.worktree")
	} else if gitConfigBool(filepath.Join(cd, "config"), "extensions", "worktreeconfig") {
		b.addEmptyFile(wc, "git control file config.worktree (missing: a read-only empty stand-in so it cannot be created)")
	}

	// The linked worktree's .git file: where git looks for the repository.
	dotgit := filepath.Join(wt, ".git")
	if fi, err := os.Lstat(dotgit); err != nil || !fi.Mode().IsRegular() {
		return refuse("recreate the worktree with git worktree add", "%s is not a regular .git file", dotgit)
	}
	b.addBind(&b.protect, "ro-bind", dotgit, dotgit, "the linked worktree's .git file (its pointer to the git folder)")

	if err := b.agentSettings(wt); err != nil {
		return err
	}
	// core.hooksPath, from every config git reads (the factory's own git
	// outside reads the same files).
	hp := gitConfigLast(cfgs, "core", "hookspath")
	if hp != "" {
		if strings.HasPrefix(hp, "~/") && b.home != "" {
			hp = filepath.Join(b.home, hp[2:])
		}
		if !filepath.IsAbs(hp) {
			hp = filepath.Join(wt, hp)
		}
		hp = filepath.Clean(hp)
		if err := b.protectPath(wt, hp, true, "the folder core.hooksPath names: its hooks run outside"); err != nil {
			return err
		}
	}
	return nil
}

// checkout protects a writable project folder like a worktree: its git
// folder is read-only as a whole (hooks, config, commondir, info/ and the
// rest start programs or redirect git for the user's next git command
// outside), and agent settings and the hooks folder are protected.
func (b *builder) checkout(dir string) error {
	wt := resolve(dir)
	if !isDir(wt) {
		return refuse("run it from an existing folder", "%s is not a folder", dir)
	}
	dotgit := filepath.Join(wt, ".git")
	fi, err := os.Lstat(dotgit)
	switch {
	case err != nil:
		// Not a checkout's top (or no git): a .git created later would
		// make a repository whose config git runs. An empty read-only
		// stand-in keeps it from being created.
		b.addTmpfsStandIn(dotgit, "git folder of the checkout (missing: an empty read-only stand-in, so no repository with its own hooks or config can be made here)")
	case fi.Mode()&os.ModeSymlink != 0:
		return symlinkRefusal(dotgit, wt)
	default:
		why := "the checkout's git folder, read-only as a whole: hooks/, config, commondir and info/ start programs or redirect your next git command outside; commit outside the sandbox"
		if !fi.IsDir() {
			why = "the checkout's .git file (its pointer to the git folder)"
		}
		b.addBind(&b.protect, "ro-bind", dotgit, dotgit, why)
	}
	if err := b.agentSettings(wt); err != nil {
		return err
	}
	cfgs := []string{"/etc/gitconfig", filepath.Join(dotgit, "config")}
	if b.home != "" {
		cfgs = append([]string{filepath.Join(b.home, ".gitconfig"), filepath.Join(b.home, ".config", "git", "config")}, cfgs...)
	}
	if hp := gitConfigLast(cfgs, "core", "hookspath"); hp != "" {
		if strings.HasPrefix(hp, "~/") && b.home != "" {
			hp = filepath.Join(b.home, hp[2:])
		}
		if !filepath.IsAbs(hp) {
			hp = filepath.Join(wt, hp)
		}
		if err := b.protectPath(wt, filepath.Clean(hp), true, "the folder core.hooksPath names: its hooks run outside"); err != nil {
			return err
		}
	}
	return nil
}

// Agent and editor settings that start programs later, outside.
var settingGroups = []struct {
	dir   string   // the folder
	files []string // protected files in it
	dirs  []string // protected sub-folders
	whole bool     // the whole folder is protected
}{
	{dir: ".claude", files: []string{"settings.json", "settings.local.json"}, dirs: []string{"hooks", "commands", "agents", "skills"}},
	{dir: ".vscode", files: []string{"tasks.json", "settings.json"}},
	{dir: ".codex", files: []string{"config.toml", "hooks.json"}},
	{dir: ".gemini", files: []string{"settings.json"}},
	{dir: ".cursor", whole: true},
	{dir: ".devcontainer", whole: true},
	{dir: ".husky", whole: true},
}

func (b *builder) agentSettings(wt string) error {
	const why = "agent and editor settings that start programs later"
	if err := b.protectPath(wt, filepath.Join(wt, ".mcp.json"), false, why+" (.mcp.json)"); err != nil {
		return err
	}
	for _, g := range settingGroups {
		d := filepath.Join(wt, g.dir)
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			// Missing: an empty read-only folder, so nothing can be created in it.
			b.addTmpfsStandIn(d, why+" ("+g.dir+"/ is missing: an empty read-only stand-in)")
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			return symlinkRefusal(d, wt)
		case !fi.IsDir():
			b.addBind(&b.protect, "ro-bind", d, d, why+" ("+g.dir+" is not a folder: read-only as it is)")
			continue
		}
		if g.whole {
			b.addBind(&b.protect, "ro-bind", d, d, why+" ("+g.dir+"/ whole)")
			continue
		}
		// Any missing protected entry makes the whole folder read-only: no
		// stand-in is created inside the user's folder.
		var present []string
		missing := ""
		for _, f := range g.files {
			p := filepath.Join(d, f)
			if _, err := os.Lstat(p); err != nil {
				missing = f
			} else {
				present = append(present, p)
			}
		}
		for _, s := range g.dirs {
			p := filepath.Join(d, s)
			if _, err := os.Lstat(p); err != nil {
				missing = s + "/"
			} else {
				present = append(present, p)
			}
		}
		if g.dir == ".claude" {
			// settings*.json beyond the two known names.
			m, _ := filepath.Glob(filepath.Join(d, "settings*.json"))
			present = append(present, m...)
		}
		for _, p := range present {
			if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSymlink != 0 {
				return symlinkRefusal(p, wt)
			}
		}
		if missing != "" {
			b.addBind(&b.protect, "ro-bind", d, d, fmt.Sprintf("%s (%s/%s is missing, so the whole folder is read-only)", why, g.dir, missing))
			continue
		}
		// The folder stays writable but cannot be moved or replaced.
		b.addBind(&b.protect, "bind", d, d, "a folder leading to protected settings: bound on itself so it cannot be moved or replaced")
		sort.Strings(present)
		for _, p := range present {
			if !b.mounted[p] {
				b.addBind(&b.protect, "ro-bind", p, p, why+" ("+rel(wt, p)+")")
			}
		}
	}
	return b.protectSettingScripts(wt)
}

// Settings in an agent's login folder that start programs in the user's
// next session outside: hooks, commands, MCP servers. The folder itself
// stays writable (the agent keeps its login and sessions there).
//
// A missing one is created before the start as a harmless empty setting
// ("{}" or an empty folder) and left there, instead of a stand-in that is
// removed afterwards: the login folder is shared by concurrent attempts and
// by the user's own sessions, and removing a mount point from outside
// detaches the mount in every sandbox still using it.
var loginSettings = map[string]struct{ files, dirs []string }{
	".cursor": {files: []string{"mcp.json", "hooks.json"}},
	"":        {files: []string{"settings.json"}, dirs: []string{"hooks", "commands", "agents", "skills"}}, // Claude Code (~/.claude or CLAUDE_CONFIG_DIR)
}

func (b *builder) loginSettings(dir string) error {
	const why = "agent settings in its login folder that start programs in your next session outside"
	set, ok := loginSettings[filepath.Base(dir)]
	if !ok {
		set = loginSettings[""]
	}
	var files []string
	files = append(files, set.files...)
	if m, _ := filepath.Glob(filepath.Join(dir, "settings*.json")); len(m) > 0 {
		for _, f := range m {
			if !slices.Contains(files, filepath.Base(f)) {
				files = append(files, filepath.Base(f))
			}
		}
	}
	protect := func(p, name string, isDir bool) error {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			content := "{}\n"
			if isDir {
				content = ""
			}
			b.plan.Precreate = append(b.plan.Precreate, Precreated{Path: p, Dir: isDir, Content: content})
		case fi.Mode()&os.ModeSymlink != 0:
			return refuse("replace the link with a real file or folder", "%s is a symlink; a protected path cannot be a link, since the link itself could be replaced", p)
		}
		b.addBind(&b.protect, "ro-bind", p, p, why+" ("+name+")")
		return nil
	}
	for _, f := range files {
		if err := protect(filepath.Join(dir, f), f, false); err != nil {
			return err
		}
	}
	for _, d := range set.dirs {
		if err := protect(filepath.Join(dir, d), d+"/", true); err != nil {
			return err
		}
	}
	return nil
}

// protectPath makes p read-only inside worktree root wt when it lies in a
// writable place, with a stand-in if it is missing and self-binds of the
// folders leading to it.
func (b *builder) protectPath(wt, p string, wantDir bool, why string) error {
	// Outside every writable place: read-only already.
	if !b.writableAt(p) {
		return nil
	}
	// Resolve links on the way: a link anywhere on the path cannot be protected.
	for cur := p; within(wt, cur) && cur != wt; cur = filepath.Dir(cur) {
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return symlinkRefusal(cur, wt)
		}
	}
	// Folders between the worktree and p: bound on themselves (immovable).
	var lead []string
	for cur := filepath.Dir(p); within(wt, cur) && cur != wt; cur = filepath.Dir(cur) {
		lead = append([]string{cur}, lead...)
	}
	for _, d := range lead {
		if !isDir(d) {
			// A missing folder on the way: protect the first missing one.
			b.addTmpfsStandIn(d, why+" (missing: an empty read-only stand-in)")
			return nil
		}
		if !b.mounted[d] {
			b.addBind(&b.protect, "bind", d, d, "a folder leading to a protected path: bound on itself so it cannot be moved or replaced")
		}
	}
	fi, err := os.Lstat(p)
	switch {
	case err != nil && wantDir:
		b.addTmpfsStandIn(p, why+" (missing: an empty read-only stand-in)")
	case err != nil:
		b.addEmptyFile(p, why+" (missing: a read-only empty stand-in)")
	case fi.Mode()&os.ModeSymlink != 0:
		return symlinkRefusal(p, wt)
	default:
		b.addBind(&b.protect, "ro-bind", p, p, why)
	}
	return nil
}

func symlinkRefusal(p, wt string) error {
	t, err := filepath.EvalSymlinks(p)
	if err != nil {
		t, _ = os.Readlink(p)
	}
	if !within(wt, t) {
		return refuse("replace the link with a real file or folder", "%s is a symlink pointing outside the worktree (to %s); a protected path cannot be a link", p, t)
	}
	return refuse("replace the link with a real file or folder", "%s is a symlink (to %s); a protected path cannot be a link, since the link itself could be replaced", p, t)
}

// writableAt reports whether p lies under a writable bind.
func (b *builder) writableAt(p string) bool {
	best, op := "", ""
	for _, tier := range [][]Mount{b.writes, b.protect} {
		for _, m := range tier {
			if (m.Op == "bind" || m.Op == "ro-bind" || m.Op == "tmpfs" || m.Op == "tmpfs-rw" || m.Op == "empty-file") && within(m.Dst, p) && len(m.Dst) >= len(best) {
				best, op = m.Dst, m.Op
			}
		}
	}
	return op == "bind" || op == "tmpfs-rw"
}

func (b *builder) underBind(p string) bool {
	for _, v := range b.visible {
		if within(v, p) {
			return true
		}
	}
	return false
}

// credential names the credential or hidden folder r lies in (or, with
// above, also one r contains), or "".
func (b *builder) credential(r, home string, above bool) string {
	hit := func(c string) bool { return within(c, r) || (above && within(r, c)) }
	if home != "" {
		for _, c := range credentialDirs {
			if hit(filepath.Join(home, c)) {
				return "~/" + c
			}
		}
	}
	for _, h := range b.in.HiddenPaths {
		if filepath.IsAbs(h) && hit(resolve(h)) {
			return h
		}
	}
	return ""
}

func (b *builder) checkAllowWrite(orig, r, home, attempt string) error {
	const fix = "remove it from sandbox.allow_write"
	if r == "/" {
		return refuse(fix, "allow_write %q is the disk root", orig)
	}
	for _, s := range systemDirs {
		if within(r, s) || within(s, r) {
			return refuse(fix, "allow_write %q is, contains or lies in the system folder %s", orig, s)
		}
	}
	for _, s := range systemRoots {
		if within(r, s) {
			return refuse(fix, "allow_write %q is or contains the system folder %s", orig, s)
		}
	}
	if home != "" && within(r, home) {
		return refuse(fix, "allow_write %q is the home or above it", orig)
	}
	if c := b.credential(r, home, true); c != "" {
		return refuse(fix, "allow_write %q names a credential or hidden folder (%s)", orig, c)
	}
	if home != "" {
		for _, a := range []string{".claude", ".codex", ".gemini", ".cursor", ".config"} {
			if r == filepath.Join(home, a) {
				return refuse(fix, "allow_write %q is an agent's or the desktop's configuration folder", orig)
			}
		}
	}
	if within(r, attempt) {
		return refuse(fix, "allow_write %q contains the attempt's records (events, egress log)", orig)
	}
	for _, w := range b.in.Worktrees {
		c := resolve(w.CommonDir)
		if within(c, r) || within(r, c) {
			return refuse(fix, "allow_write %q overlaps repo %s's git folder", orig, w.Repo)
		}
	}
	return nil
}

func (b *builder) addBind(tier *[]Mount, op, src, dst, why string) {
	*tier = append(*tier, Mount{Op: op, Src: src, Dst: dst, Reason: why})
	b.mounted[dst] = true
	if op == "bind" || op == "ro-bind" {
		b.visible = append(b.visible, dst)
	}
}

func (b *builder) addTmpfs(tier *[]Mount, dst, why string) {
	*tier = append(*tier, Mount{Op: "tmpfs", Dst: dst, Reason: why})
	b.mounted[dst] = true
	b.remount = append(b.remount, Mount{Op: "remount-ro", Dst: dst, Reason: "nothing can be created in it"})
}

// addPrivateDir mounts a writable, empty in-memory folder at dst: it is
// made inside the sandbox, never on the host.
func (b *builder) addPrivateDir(dst, why string) {
	b.writes = append(b.writes, Mount{Op: "tmpfs-rw", Dst: dst, Reason: why, Size: b.in.PrivateTmpSize})
	b.mounted[dst] = true
}

func (b *builder) addTmpfsStandIn(dst, why string) {
	b.addTmpfs(&b.protect, dst, why)
	b.plan.StandIns = append(b.plan.StandIns, dst)
}

func (b *builder) addEmptyFile(dst, why string) {
	b.protect = append(b.protect, Mount{Op: "empty-file", Src: b.plan.EmptyFile, Dst: dst, Reason: why})
	b.mounted[dst] = true
	b.plan.StandIns = append(b.plan.StandIns, dst)
}

func (b *builder) hidePath(p, why string) {
	if isDir(p) {
		b.secrets = append(b.secrets, Mount{Op: "tmpfs", Dst: p, Reason: why})
		b.remount = append(b.remount, Mount{Op: "remount-ro", Dst: p, Reason: "nothing can be created in it"})
	} else {
		b.secrets = append(b.secrets, Mount{Op: "ro-bind", Src: "/dev/null", Dst: p, Reason: why})
	}
	b.mounted[p] = true
}

// buildEnv builds the step's environment: a documented base set, the step's
// own env, the temp variables and the proxy variables; nothing else.
func (b *builder) buildEnv(home, tmp string) {
	vals := map[string]string{}
	origin := map[string]string{}
	set := func(k, v, o string) { vals[k] = v; origin[k] = o }
	host := map[string]string{}
	for _, kv := range b.host.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			host[k] = v
		}
	}
	for _, k := range baseEnvNames {
		if v, ok := host[k]; ok {
			set(k, v, "base (from kusaw's environment)")
		}
	}
	for k, v := range host {
		if strings.HasPrefix(k, "LC_") {
			set(k, v, "base (locale)")
		}
	}
	if _, ok := vals["PATH"]; !ok {
		set("PATH", "/usr/local/bin:/usr/bin:/bin", "base (default)")
	}
	if b.in.FreshHome {
		set("HOME", filepath.Join(tmp, "home"), "a fresh, empty HOME in the temp folder")
	} else if home != "" {
		set("HOME", home, "base (the real home path; its content is hidden)")
	}
	keys := make([]string, 0, len(b.in.Env))
	for k := range b.in.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if why, bad := neverEnv[k]; bad {
			b.plan.Dropped = append(b.plan.Dropped, EnvVar{k, why})
			continue
		}
		set(k, b.in.Env[k], "step")
	}
	if b.objDir != "" {
		set("GIT_OBJECT_DIRECTORY", b.objDir, "the attempt's private git object folder")
		if len(b.alts) > 0 {
			set("GIT_ALTERNATE_OBJECT_DIRECTORIES", altList(b.alts), "the repositories' own objects, read-only")
		}
	}
	set("TMPDIR", tmp, "temp")
	set("XDG_CACHE_HOME", filepath.Join(tmp, "cache"), "temp")
	set("XDG_RUNTIME_DIR", filepath.Join(tmp, "run"), "temp")
	b.plan.mkdirs = []string{filepath.Join(tmp, "cache"), filepath.Join(tmp, "run")}
	if b.in.FreshHome {
		b.plan.mkdirs = append(b.plan.mkdirs, filepath.Join(tmp, "home"))
	}
	if b.plan.privateTmp {
		// bwrap makes them in the private temp folder (--dir).
		for _, d := range b.plan.mkdirs {
			b.writes = append(b.writes, Mount{Op: "dir", Dst: d, Reason: "a folder of the private temp folder"})
		}
		b.plan.mkdirs = nil
	}
	if b.in.Proxy != nil && b.plan.Network == NetworkAllowlist {
		for _, kv := range b.in.Proxy.Env {
			if k, v, ok := strings.Cut(kv, "="); ok {
				set(k, v, "proxy")
			}
		}
	}
	for k := range neverEnv {
		delete(vals, k)
	}
	names := make([]string, 0, len(vals))
	for k := range vals {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b.plan.Env = append(b.plan.Env, k+"="+vals[k])
		b.plan.EnvVars = append(b.plan.EnvVars, EnvVar{k, origin[k]})
	}
}

// altList joins folders for GIT_ALTERNATE_OBJECT_DIRECTORIES: git splits
// it at ':' and reads an entry that starts with '"' as a C-quoted string.
func altList(dirs []string) string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		if strings.ContainsAny(d, ":\"\\\n") {
			d = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(d) + `"`
		}
		out[i] = d
	}
	return strings.Join(out, ":")
}

// String prints the plan for people: what is writable, read-only, hidden,
// and the environment's names (never its values).
func (p *Plan) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "backend: %s\nnetwork: %s\nworkdir: %s\n", p.Backend, p.Network, p.Workdir)
	if p.Socket != "" {
		fmt.Fprintf(&sb, "proxy socket: %s\n", p.Socket)
	}
	if len(p.LocalPorts) > 0 {
		fmt.Fprintf(&sb, "local services (host loopback ports): %s\n", strings.Trim(fmt.Sprint(p.LocalPorts), "[]"))
	}
	if p.ProxyPort != 0 {
		fmt.Fprintf(&sb, "proxy port: 127.0.0.1:%d\n", p.ProxyPort)
	}
	section := func(title string, rules []PathRule) {
		fmt.Fprintf(&sb, "%s:\n", title)
		for _, r := range rules {
			fmt.Fprintf(&sb, "  %s  (%s)\n", r.Path, r.Reason)
		}
	}
	section("writable", p.Writable)
	section("read-only", p.ReadOnly)
	section("hidden", p.Hidden)
	fmt.Fprintf(&sb, "env:\n")
	for _, e := range p.EnvVars {
		fmt.Fprintf(&sb, "  %s  (%s)\n", e.Name, e.Origin)
	}
	for _, e := range p.Dropped {
		fmt.Fprintf(&sb, "  %s dropped  (%s)\n", e.Name, e.Origin)
	}
	if len(p.StandIns) > 0 {
		fmt.Fprintf(&sb, "stand-ins (empty mount points made for the step, removed after it):\n")
		for _, s := range p.StandIns {
			fmt.Fprintf(&sb, "  %s\n", s)
		}
	}
	if len(p.Precreate) > 0 {
		fmt.Fprintf(&sb, "created once in the agent's login folder (empty settings, kept):\n")
		for _, c := range p.Precreate {
			fmt.Fprintf(&sb, "  %s\n", c.Path)
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&sb, "note: %s\n", n)
	}
	return sb.String()
}

// JSON is the plan as one JSON document (for the attempt record and the
// sandbox.plan event). It holds no env values.
func (p *Plan) JSON() []byte {
	b, _ := json.Marshal(p)
	return b
}

// Cleanup removes the stand-in mount points the backend left on disk; call
// it after the process has ended and before committing the worktree. Only
// empty files and empty folders are removed. The deepest go first; those
// of one depth are removed at the same time: on a busy disk one removal
// can wait milliseconds for the journal, and waiting for each in turn made
// this the largest part of a short sandbox exec after bwrap itself.
func (p *Plan) Cleanup() error {
	byDepth := map[int][]string{}
	var depths []int
	for _, s := range p.StandIns {
		d := strings.Count(filepath.Clean(s), string(filepath.Separator))
		if byDepth[d] == nil {
			depths = append(depths, d)
		}
		byDepth[d] = append(byDepth[d], s)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(depths)))
	var (
		mu   sync.Mutex
		errs []string
	)
	remove := func(s string) {
		fi, err := os.Lstat(s)
		if err != nil {
			return
		}
		switch {
		case fi.IsDir():
			err = syscall.Rmdir(s) // fails on a folder that is not empty
		case fi.Mode().IsRegular() && fi.Size() == 0:
			err = syscall.Unlink(s)
		default:
			return
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			mu.Lock()
			errs = append(errs, (&os.PathError{Op: "remove", Path: s, Err: err}).Error())
			mu.Unlock()
		}
	}
	for _, d := range depths {
		group := byDepth[d]
		if len(group) == 1 {
			remove(group[0])
			continue
		}
		var wg sync.WaitGroup
		for _, s := range group {
			wg.Add(1)
			go func() { defer wg.Done(); remove(s) }()
		}
		wg.Wait()
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("sandbox cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}

// --- small helpers ---

// resolve cleans p and resolves the links of its longest existing prefix.
func resolve(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	dir, base := filepath.Split(p)
	dir = filepath.Clean(dir)
	if dir == p {
		return p
	}
	return filepath.Join(resolve(dir), base)
}

// within reports whether p is dir or below it.
func within(dir, p string) bool {
	if dir == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

func rel(base, p string) string {
	r, err := filepath.Rel(base, p)
	if err != nil {
		return p
	}
	return r
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

func isDir(p string) bool { fi, err := os.Stat(p); return err == nil && fi.IsDir() }

// refStore mounts the attempt's private ref store over the repository's
// refs/ and logs/: the step writes whatever refs it likes there, and the
// repository's own stay read-only (a bind mount, which the step can
// neither remove nor rename over).
func (b *builder) refStore(w Worktree, cd string) error {
	if b.plan.Backend != "bubblewrap" {
		return refuse("leave RefStore empty on this backend (kusaw checks the ref folder afterwards instead)", "repo %s: a private ref store needs bind mounts, which the %s backend lacks", w.Repo, b.plan.Backend)
	}
	if !filepath.IsAbs(w.RefStore) {
		return refuse("give an absolute path", "ref store %q of repo %s is not absolute", w.RefStore, w.Repo)
	}
	for _, d := range []string{"refs", "logs"} {
		src, dst := filepath.Join(w.RefStore, d), filepath.Join(cd, d)
		if !isDir(src) || !isDir(dst) {
			return refuse("let kusaw create the ref store (worktree.NewRefStore)", "repo %s: %s or %s is not a folder", w.Repo, src, dst)
		}
		b.addBind(&b.writes, "bind", src, dst, fmt.Sprintf("repo %s's %s/: the attempt's private copy (branches, tags and reflogs the step writes stay there; kusaw takes only the attempt's branch, checked)", w.Repo, d))
	}
	return nil
}

// headRef returns the branch a worktree's HEAD names ("refs/heads/x"), or "".
func headRef(gitDir string) string {
	b, err := os.ReadFile(filepath.Join(gitDir, "HEAD"))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if r, ok := strings.CutPrefix(s, "ref: "); ok && strings.HasPrefix(r, "refs/") && !strings.Contains(r, "..") {
		return r
	}
	return ""
}

// gitConfigLast returns the last value of section.key across files, in
// git's order of precedence (later files win). Includes are not followed.
func gitConfigLast(files []string, section, key string) string {
	val := ""
	for _, f := range files {
		if v, ok := gitConfigGet(f, section, key); ok {
			val = v
		}
	}
	return val
}

func gitConfigBool(file, section, key string) bool {
	v, ok := gitConfigGet(file, section, key)
	if !ok {
		return false
	}
	switch strings.ToLower(v) {
	case "", "true", "yes", "on", "1":
		return true
	}
	return false
}

// gitConfigGet is a small reader of git's INI format: enough for
// core.hooksPath and extensions.worktreeConfig.
func gitConfigGet(file, section, key string) (string, bool) {
	f, err := os.Open(file)
	if err != nil {
		return "", false
	}
	defer f.Close()
	cur, val, found := "", "", false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if line[0] == '[' {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				continue
			}
			cur = strings.ToLower(strings.Fields(line[1:end] + " ")[0])
			line = strings.TrimSpace(line[end+1:])
			if line == "" {
				continue
			}
		}
		if cur != section {
			continue
		}
		k, v, hasEq := strings.Cut(line, "=")
		if strings.ToLower(strings.TrimSpace(k)) != key {
			continue
		}
		found = true
		if !hasEq {
			val = ""
			continue
		}
		v = strings.TrimSpace(v)
		if i := strings.IndexAny(v, "#;"); i >= 0 && !strings.HasPrefix(v, "\"") {
			v = strings.TrimSpace(v[:i])
		}
		val = strings.Trim(v, "\"")
	}
	return val, found
}
