package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/kusaw/kusaw/sandbox/confine"
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
	// Layer, when set (Linux, a writable worktree), is an absolute folder
	// holding two empty folders upper/ and work/ on one filesystem: the
	// step then sees Path as an overlay (lower: the tree, read-only
	// underneath; upper: Layer/upper, which receives every change), with
	// every protection inside the tree on top as without it. The step
	// never sees Layer itself and holds no capability (write_layer.go).
	Layer string
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
	// LoginSession carries the agent's session from one attempt of a run
	// to the next (continue_session); nil: session state goes with the
	// attempt's login copy.
	LoginSession *LoginSession
	// CredentialRules are how the agent CLI's refresh changes its
	// credentials files (credentials.go): a file without one is never
	// carried back.
	CredentialRules []CredentialRule

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
	// Argv is the step's command: the files it names by absolute path
	// (a script in the factory's folder) are shown read-only.
	Argv []string
	Host *Host // nil: DetectHost()
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
	// Origin is the part of the plan that added it (OriginSystem, ...).
	Origin string `json:"origin,omitempty"`
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
	// Toolchains are the folders shown because the step's PATH needs them.
	Toolchains []Toolchain `json:"toolchains,omitempty"`
	// LoginCopies are the attempt's own copies of the agent's login
	// folders: Prepare makes them, Cleanup carries the credentials back.
	LoginCopies []LoginCopy `json:"login_copies,omitempty"`
	// Reached, set by the caller before Cleanup, reports whether the step
	// made a connection that got an answer to a host (its egress log);
	// nil: nothing is known of the step's network, so no credentials
	// file is carried back. Carried is what Cleanup did with each
	// credentials file the step changed.
	// LayersMissing names the kernel layers an attempt of this plan runs
	// without, and why (Linux: no confinement stage).
	LayersMissing []string               `json:"layers_missing,omitempty"`
	Reached       func(host string) bool `json:"-"`
	Carried       []CredentialOutcome    `json:"-"`
	// GitExcludes are the private info/exclude files that hide the
	// stand-ins from the step's git (standins_git.go); Prepare writes them.
	GitExcludes []GitExclude `json:"git_excludes,omitempty"`
	Socket      string       `json:"proxy_socket,omitempty"`
	ProxyPort   int          `json:"proxy_port,omitempty"` // macOS: the lease's loopback port
	// LocalPorts are the leased local-service ports (macOS: admitted by
	// the profile; Linux: forwarded by the bridge).
	LocalPorts []int `json:"local_ports,omitempty"`
	// WriteLayers are the worktrees seen through an overlay (Worktree.Layer):
	// Command mounts them before bwrap starts (confine.RunLayer).
	WriteLayers []confine.Layer `json:"write_layers,omitempty"`
	// Home and AttemptDir as resolved (for probes and doctor).
	Home       string `json:"home,omitempty"`
	AttemptDir string `json:"attempt_dir,omitempty"`

	// Env is the exact environment of the step (NAME=value). Never printed.
	Env []string `json:"-"`
	// mkdirs are folders Command creates before the start (temp subfolders).
	mkdirs []string
	// standInDirs are the stand-ins that are folders:
	// Command takes them from the pool of spare folders (standinpool*.go).
	standInDirs []string
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
	".cargo/credentials.toml", ".cargo/credentials", ".local/share/keyrings", ".password-store",
}

// System folders allow_write may never name, contain or lie in.
var systemDirs = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/sys", "/usr"}

// Folders allow_write may lie in (a cache under /var/cache) but never name
// or contain.
var systemRoots = []string{"/var", "/opt", "/srv", "/home", "/mnt", "/media", "/root", "/tmp"}

func refuse(fix, format string, args ...any) error {
	return &status.Error{Reason: status.ReasonSandboxPlanRefused, Msg: fmt.Sprintf(format, args...), Fix: fix}
}

// builder accumulates mounts in tiers. On Linux the backend's order is
// decided afterwards by ordered (folders before what lies in them); the
// tiers keep the order of mounts at one path, and are macOS's order.
type builder struct {
	in Input
	// laterHooks are core.hooksPath folders outside a worktree ({worktree,
	// folder}), protected once allow_write is mounted.
	laterHooks [][2]string
	host       *Host
	plan       *Plan
	base       []Mount // the system folders, /dev, /proc, /tmp, the home
	hide       []Mount // the repositories' own checkouts
	reads      []Mount // toolchains, allow_read, binaries, read-only worktrees
	writes     []Mount // worktrees, git folders, artifacts, tmp, login state, allow_write
	secrets    []Mount // credential folders and the caller's hidden paths
	protect    []Mount // control files and settings, read-only on top
	remount    []Mount
	mounted    map[string]bool // destinations already given a mount
	home       string          // the resolved home
	visible    []string        // every bind destination (for conflict checks)
	objDir     string          // the private object folder, or ""
	alts       []string        // the repositories' objects/ folders (GIT_ALTERNATE_OBJECT_DIRECTORIES)
	origin     string          // the origin given to the mounts being added

	attempt, tmp, artifacts string // resolved folders of the attempt
	private                 bool   // the temp folder is the sandbox's own (Input.PrivateTmp)
}

// BuildPlan resolves the sandbox of one attempt. It reads the filesystem
// (to resolve links and see what exists) but changes nothing.
func BuildPlan(in Input) (*Plan, error) {
	warmProcessStart()
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
	if p.Backend == "bubblewrap" {
		// The kernel layers the confinement stage sets up are named when
		// missing, in the plan the attempt records; refused where the
		// program was set up with a stage (confineGap).
		gap, stop := confineGap()
		if stop {
			return nil, &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: "sandbox: missing " + gap,
				Fix: "put kusaw-bridge beside " + executable() + " (make build puts both in bin/), or reinstall kusaw"}
		}
		if gap != "" {
			p.LayersMissing = append(p.LayersMissing, gap)
		}
	}
	var all []Mount
	for _, tier := range [][]Mount{b.base, b.hide, b.reads, b.writes, b.secrets, b.protect} {
		all = append(all, tier...)
	}
	if p.Backend == "bubblewrap" {
		p.Mounts = ordered(all, b.remount, true)
	} else {
		p.Mounts = append(all, b.remount...)
	}
	if err := b.layersHidden(); err != nil {
		return nil, err
	}
	p.classify()
	return p, nil
}

// warmProcessStart has os/exec's one-time check of pidfd support (a child
// process that exits at once) done while the plan is built, instead of in
// the first Command's Start, where it delays the step's start. Not while
// an early start waits for this plan: its bwrap was started without
// os/exec, and the check would only take CPU from the plan.
func warmProcessStart() {
	if earlyStarted.Load() {
		return
	}
	warmStartOnce.Do(func() {
		go func() {
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				p.Release()
			}
		}()
	})
}

var (
	warmStartOnce sync.Once
	earlyStarted  atomic.Bool // an early start of this process was made (StartEarly)
)

// classify fills the writable, read-only and hidden lists from the mounts.
func (p *Plan) classify() {
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
}

func isHideReason(r string) bool {
	return strings.HasPrefix(r, "hidden") || strings.HasPrefix(r, "private")
}

// build runs the parts of the plan in order; each adds to its own tier.
func (b *builder) build() error {
	for _, part := range []func() error{
		b.checkInput,   // the network, the attempt's folders, the home
		b.system,       // base: the system folders, /dev, /proc, /tmp, the home
		b.toolchains,   // read-only: the folders of the PATH's programs
		b.readOnly,     // read-only: allow_read, binaries
		b.commandFiles, // read-only: the files the step's command names
		b.writable,     // worktrees and git folders, temp, artifacts, login state, allow_write, checkouts, the proxy socket
		b.hideSecrets,  // hidden on top: credential folders, the caller's hidden paths, the checkouts
		b.gitExcludes,  // read-only on top: each repository's info/exclude naming the stand-ins
		b.workdir,      // where the process starts
		b.env,          // the step's environment
	} {
		if err := part(); err != nil {
			return err
		}
	}
	return nil
}

// abs resolves an absolute path of the input ("" stays "").
func abs(what, p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if !filepath.IsAbs(p) {
		return "", refuse("give an absolute path", "%s %q is not an absolute path", what, p)
	}
	return resolve(p), nil
}

// checkInput checks the input and resolves the attempt's folders, the
// network and the home once.
func (b *builder) checkInput() error {
	in := b.in
	for _, w := range in.SettingsScriptsWritable {
		c := filepath.ToSlash(filepath.Clean(w))
		if filepath.IsAbs(w) || c == "." || c == ".." || strings.HasPrefix(c, "../") || c == ".git" || strings.HasPrefix(c, ".git/") {
			return refuse("list paths inside the repository, relative to its top, outside .git", "sandbox.settings_scripts_writable: %q is not a path inside the worktree (or it is git's own folder)", w)
		}
	}
	if err := b.network(); err != nil {
		return err
	}
	if in.AttemptDir == "" || in.TmpDir == "" {
		return refuse("pass the attempt folder and its tmp folder", "the plan needs AttemptDir and TmpDir")
	}
	var err error
	if b.attempt, _ = abs("attempt dir", in.AttemptDir); b.attempt == "" {
		return refuse("give an absolute path", "attempt dir %q is not an absolute path", in.AttemptDir)
	}
	if b.tmp, err = abs("tmp dir", in.TmpDir); err != nil {
		return err
	}
	if b.artifacts, err = abs("artifacts dir", in.ArtifactsDir); err != nil {
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
	if b.home, err = abs("home", homeIn); err != nil {
		return err
	}
	b.plan.Home, b.plan.AttemptDir = b.home, b.attempt
	// bwrap makes the read-only empty file of a missing protected file
	// itself (--ro-bind-data), so nothing is created on the host for it.
	if b.plan.Backend != "bubblewrap" {
		b.plan.EmptyFile = filepath.Join(b.attempt, ".sandbox-empty")
	}
	b.private = in.PrivateTmp && b.plan.Backend == "bubblewrap"
	b.plan.privateTmp = b.private
	for k, v := range in.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return refuse("fix the variable's name or value in the step's env", "env variable %q has an empty name, or a '=' or NUL byte in it", k)
		}
	}
	return nil
}

func (b *builder) network() error {
	in := b.in
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
	return nil
}

// readOnly adds allow_read and the binaries the step needs.
func (b *builder) readOnly() error {
	b.origin = OriginAllowRead
	for _, p := range b.in.AllowRead {
		r, err := abs("allow_read entry", p)
		if err != nil {
			return err
		}
		if b.home != "" && within(r, b.home) {
			return refuse("name a folder inside the home instead of the home itself", "allow_read %q would expose the whole home", p)
		}
		if c := b.credential(r, b.home, false); c != "" {
			return refuse("remove it from sandbox.allow_read", "allow_read %q names a credential folder (%s)", p, c)
		}
		if !exists(r) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("allow_read %s does not exist; not mounted", r))
			continue
		}
		b.addBind(&b.reads, "ro-bind", r, r, "allow_read (not protected: the factory chose to show it)")
	}
	b.origin = OriginBinary
	bins := append(append([]string{}, b.in.ExtraBinaries...), confineBinaries()...)
	if b.in.Proxy != nil {
		bins = append(bins, b.in.Proxy.Binaries...)
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
	return nil
}

// writable adds what the step may write, each with what stays read-only in it.
func (b *builder) writable() error {
	b.origin = OriginWorktree
	if err := b.objectDir(); err != nil {
		return err
	}
	for _, w := range b.in.Worktrees {
		if err := b.worktree(w); err != nil {
			return err
		}
	}
	b.origin = OriginAttempt
	if b.objDir != "" {
		b.addBind(&b.writes, "bind", b.objDir, b.objDir, "the attempt's private git object folder: new objects go here (GIT_OBJECT_DIRECTORY); kusaw imports them outside, re-hashing each")
	}
	if err := b.tempFolders(); err != nil {
		return err
	}
	b.origin = OriginLogin
	if err := b.login(); err != nil {
		return err
	}
	b.origin = OriginAllowWrite
	if err := b.allowWrite(); err != nil {
		return err
	}
	b.origin = OriginWorktree
	if err := b.protectLaterHooks(); err != nil {
		return err
	}
	b.origin = OriginCheckout
	for _, c := range b.in.Checkouts {
		if err := b.checkout(c); err != nil {
			return err
		}
	}
	b.origin = OriginProxy
	if px := b.in.Proxy; px != nil && b.plan.Network == NetworkAllowlist {
		if px.SocketPath != "" {
			s := resolve(px.SocketPath)
			b.addBind(&b.writes, "bind", s, s, "the egress lease's socket (the only way out)")
			b.plan.Socket = s
		}
		b.plan.ProxyPort = px.Port
		b.plan.LocalPorts = append([]int(nil), px.LocalPorts...)
		b.plan.WrapArgv = append([]string{}, px.WrapArgv...)
	}
	return nil
}

func (b *builder) objectDir() error {
	objDir, err := abs("object dir", b.in.ObjectDir)
	if err != nil || objDir == "" {
		return err
	}
	if !isDir(objDir) {
		return refuse("create the attempt's object folder first", "object folder %s does not exist", objDir)
	}
	if !within(b.attempt, objDir) || objDir == b.attempt {
		return refuse("put the object folder inside the attempt folder", "object folder %s is not inside the attempt folder %s", objDir, b.attempt)
	}
	b.objDir = objDir
	return nil
}

// tempFolders adds artifacts/ and the temp folder: on the host, or (a
// private temp folder) in the sandbox's memory.
func (b *builder) tempFolders() error {
	tmp, artifacts := b.tmp, b.artifacts
	if b.private {
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
		return nil
	}
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
	return nil
}

func (b *builder) allowWrite() error {
	for _, p := range b.in.AllowWrite {
		r, err := abs("allow_write entry", p)
		if err != nil {
			return err
		}
		if err := b.checkAllowWrite(p, r, b.home, b.attempt); err != nil {
			return err
		}
		if !exists(r) {
			b.plan.Notes = append(b.plan.Notes, fmt.Sprintf("allow_write %s does not exist; not mounted", r))
			continue
		}
		b.addBind(&b.writes, "bind", r, r, "allow_write (not protected: the factory chose to open it)")
	}
	return nil
}

// secrets hides, on top of every bind, the credential folders and the
// caller's hidden paths that lie in something visible, and the
// repositories' own checkouts.
func (b *builder) hideSecrets() error {
	b.origin = OriginHidden
	b.hideCheckouts()
	if home := b.home; home != "" && home != "/" {
		for _, c := range credentialDirs {
			p := filepath.Join(home, c)
			if exists(p) && b.underBind(p) {
				b.hidePath(p, "hidden: credential folder "+c)
			}
		}
	}
	for _, p := range b.in.HiddenPaths {
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
	return b.hideStandInPool()
}

// hideStandInPool hides kusaw's own cache folder (<user cache>/kusaw: the
// sandbox check and the walk of /etc it remembers, the spare stand-in
// folders) and the pool of
// spare stand-in folders from a plan that would show them (a writable
// ~/.cache, say): a step that could write into a spare folder could fill
// another attempt's stand-in, and one that could write the remembered
// check could make the next kusaw take bwrap for an older one and drop
// --disable-userns. A folder of them that holds a folder the step sees
// cannot be hidden: the plan is refused (turning the pool off in this
// process alone left it to kusaw's other processes).
func (b *builder) hideStandInPool() error {
	if b.plan.Backend != "bubblewrap" {
		return nil
	}
	type place struct{ dir, what string }
	var places []place
	own := ""
	if c, err := os.UserCacheDir(); err == nil && filepath.IsAbs(c) {
		own = filepath.Join(c, "kusaw")
		places = append(places, place{own, "kusaw's own cache folder"})
	}
	if d := standInPoolDir(); d != "" && (own == "" || !within(own, d)) {
		places = append(places, place{d, "kusaw's spare stand-in folders"})
	}
	// The remembered walk of /etc is not in the cache folder this
	// process's environment names: a step that could write it would
	// leave /etc's secrets out of every later plan.
	if d := walkCacheFolder(); d != "" && (own == "" || !within(own, d)) {
		places = append(places, place{d, "kusaw's remembered walk of /etc"})
	}
	for _, pl := range places {
		if err := b.hideKusawFolder(pl.dir, pl.what); err != nil {
			return err
		}
	}
	return nil
}

// hideKusawFolder hides d, a folder of kusaw's own (what), when the plan
// shows it, with the folders leading to it fixed in place.
func (b *builder) hideKusawFolder(d, what string) error {
	if err := b.poolLinksFixed(d, what); err != nil {
		return err
	}
	r := resolve(d)
	shown := false
	for _, tier := range [][]Mount{b.base, b.hide, b.reads, b.writes, b.secrets, b.protect} {
		for _, m := range tier {
			if m.Op != "bind" && m.Op != "ro-bind" {
				continue
			}
			if within(r, m.Src) || within(r, m.Dst) {
				return refuse("name a folder outside it, or set the stand-in pool elsewhere or off", "%s is shown to the step but lies in %s %s, which a step must never reach", m.Dst, what, r)
			}
			shown = shown || within(m.Src, r) || within(m.Dst, r)
		}
	}
	if !shown {
		return nil
	}
	if err := os.MkdirAll(r, 0o700); err != nil {
		poolUnsafe.Store(true)
		return nil
	}
	b.pinPoolFolders(r)
	b.hideKnown(r, true, "hidden: "+what)
	return nil
}

// poolLinksFixed refuses a plan in which the step may replace a link on
// the pool's path d: hiding and pinning reach the resolved path, not the
// link, and with a folder of its own in the link's place the step would
// hold the pool of every kusaw process of the user (which uses no pool
// while a link is on the way, and this one after).
func (b *builder) poolLinksFixed(d, what string) error {
	for cur := filepath.Clean(d); cur != "/" && cur != "."; cur = filepath.Dir(cur) {
		if fi, err := os.Lstat(cur); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		if m := b.deepestMount(filepath.Dir(cur)); m != nil && m.Op == "bind" {
			return refuse("make "+cur+" a folder, or take "+m.Dst+" out of the step's writable folders", "%s %s is reached through the link %s in the step's writable folder %s", what, d, cur, m.Dst)
		}
	}
	return nil
}

// deepestMount is the mount through which the step sees p; nil when none.
func (b *builder) deepestMount(p string) *Mount {
	var in *Mount
	for _, tier := range [][]Mount{b.base, b.hide, b.reads, b.writes, b.secrets, b.protect} {
		for i, m := range tier {
			if within(m.Dst, p) && (in == nil || len(m.Dst) >= len(in.Dst)) {
				in = &tier[i]
			}
		}
	}
	return in
}

// pinPoolFolders binds each folder the step sees on the way to the pool r
// on itself, shallowest first, as it sees it (writable or not). A step
// that could rename one (<cache>/kusaw in a writable cache folder) could
// put a pool of its own at r's path, with spares it holds open, for
// every kusaw process of the user; a mount point cannot be renamed.
func (b *builder) pinPoolFolders(r string) {
	var lead []string
	for cur := filepath.Dir(r); cur != "/" && cur != "."; cur = filepath.Dir(cur) {
		lead = append([]string{cur}, lead...)
	}
	for _, cur := range lead {
		if b.mounted[cur] {
			continue
		}
		in := b.deepestMount(cur)
		if in == nil || (in.Op != "bind" && in.Op != "ro-bind") {
			continue // not seen, or in the sandbox's own tmpfs
		}
		src := filepath.Join(in.Src, strings.TrimPrefix(cur, in.Dst))
		b.secrets = append(b.secrets, Mount{Op: in.Op, Src: src, Dst: cur, Reason: "a folder leading to kusaw's spare stand-in folders: bound on itself so it cannot be moved or replaced", Origin: OriginHidden})
		b.mounted[cur] = true
	}
}

// hideCheckouts hides each repository's own checkout (uncommitted files,
// .env) around its .git, which the worktrees need.
func (b *builder) hideCheckouts() {
	for _, w := range b.in.Worktrees {
		c := resolve(w.CommonDir)
		if filepath.Base(c) != ".git" {
			continue
		}
		if checkout := filepath.Dir(c); !b.mounted[checkout] && checkout != "/" {
			b.addTmpfs(&b.hide, checkout, fmt.Sprintf("hidden: repo %s's own checkout (uncommitted files, .env); only its .git is mounted", w.Repo))
		}
	}
}

// workdir is where the process starts: the first writable worktree by default.
func (b *builder) workdir() error {
	in := b.in
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
		wd = b.tmp
	}
	wdr, err := abs("workdir", wd)
	if err != nil {
		return err
	}
	b.plan.Workdir = wdr
	return nil
}

func (b *builder) env() error {
	b.buildEnv(b.home, b.tmp)
	return nil
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

// writableTop is the deepest writable mount p lies in (writableAt(p)).
func (b *builder) writableTop(p string) string {
	best := ""
	for _, tier := range [][]Mount{b.writes, b.protect} {
		for _, m := range tier {
			if (m.Op == "bind" || m.Op == "ro-bind" || m.Op == "tmpfs" || m.Op == "tmpfs-rw" || m.Op == "empty-file") && within(m.Dst, p) && len(m.Dst) >= len(best) {
				best = m.Dst
			}
		}
	}
	return best
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

// originOf is the origin of a mount added to tier now.
func (b *builder) originOf(tier *[]Mount) string {
	switch tier {
	case &b.protect:
		return OriginProtected
	case &b.secrets:
		return OriginHidden
	}
	return b.origin
}

func (b *builder) addBind(tier *[]Mount, op, src, dst, why string) {
	*tier = append(*tier, Mount{Op: op, Src: src, Dst: dst, Reason: why, Origin: b.originOf(tier)})
	b.mounted[dst] = true
	if op == "bind" || op == "ro-bind" {
		b.visible = append(b.visible, dst)
	}
}

func (b *builder) addTmpfs(tier *[]Mount, dst, why string) {
	o := b.originOf(tier)
	*tier = append(*tier, Mount{Op: "tmpfs", Dst: dst, Reason: why, Origin: o})
	b.mounted[dst] = true
	b.remount = append(b.remount, Mount{Op: "remount-ro", Dst: dst, Reason: "nothing can be created in it", Origin: o})
}

// addPrivateDir mounts a writable, empty in-memory folder at dst: it is
// made inside the sandbox, never on the host.
func (b *builder) addPrivateDir(dst, why string) {
	b.writes = append(b.writes, Mount{Op: "tmpfs-rw", Dst: dst, Reason: why, Size: b.in.PrivateTmpSize, Origin: OriginAttempt})
	b.mounted[dst] = true
}

func (b *builder) addTmpfsStandIn(dst, why string) {
	b.addTmpfs(&b.protect, dst, why)
	b.plan.StandIns = append(b.plan.StandIns, dst)
	b.plan.standInDirs = append(b.plan.standInDirs, dst)
}

func (b *builder) addEmptyFile(dst, why string) {
	b.protect = append(b.protect, Mount{Op: "empty-file", Src: b.plan.EmptyFile, Dst: dst, Reason: why, Origin: OriginProtected})
	b.mounted[dst] = true
	b.plan.StandIns = append(b.plan.StandIns, dst)
}

func (b *builder) hidePath(p, why string) { b.hideKnown(p, isDir(p), why) }

// hideKnown is hidePath for a path whose type the caller knows.
func (b *builder) hideKnown(p string, dir bool, why string) {
	if dir {
		b.secrets = append(b.secrets, Mount{Op: "tmpfs", Dst: p, Reason: why, Origin: OriginHidden})
		b.remount = append(b.remount, Mount{Op: "remount-ro", Dst: p, Reason: "nothing can be created in it", Origin: OriginHidden})
	} else {
		b.secrets = append(b.secrets, Mount{Op: "ro-bind", Src: "/dev/null", Dst: p, Reason: why, Origin: OriginHidden})
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
		set("PATH", defaultPath, "base (default)")
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
			b.writes = append(b.writes, Mount{Op: "dir", Dst: d, Reason: "a folder of the private temp folder", Origin: OriginAttempt})
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
	if p.Backend == "bubblewrap" {
		fmt.Fprintf(&sb, "view (in mount order; nothing else exists inside):\n")
		for _, l := range p.View() {
			fmt.Fprintf(&sb, "  %s\n", l)
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
	if len(p.LoginCopies) > 0 {
		fmt.Fprintf(&sb, "login state (the attempt's own copies; only credentials are carried back):\n")
		for _, c := range p.LoginCopies {
			fmt.Fprintf(&sb, "  %s  (copy of %s", c.Dst, c.Src)
			for _, n := range c.Credentials {
				if r := c.rule(n); r != nil {
					fmt.Fprintf(&sb, "; %s carried back only as a refresh against %s changes it", n, strings.Join(r.Hosts, " or "))
				} else {
					fmt.Fprintf(&sb, "; %s never carried back (no refresh rule)", n)
				}
			}
			fmt.Fprintf(&sb, ")\n")
		}
	}
	if len(p.Toolchains) > 0 {
		fmt.Fprintf(&sb, "toolchains (added for the step's PATH):\n")
		for _, t := range p.Toolchains {
			fmt.Fprintf(&sb, "  %s  (%s)\n", t.Path, t.From)
		}
	}
	for _, l := range p.LayersMissing {
		fmt.Fprintf(&sb, "layer missing: %s\n", l)
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

// Cleanup removes the stand-in mount points the backend left on disk
// (an empty folder goes back to the pool of spare folders when it can:
// standinpool*.go),
// carries the agent's refreshed credentials back from the attempt's login
// copies and removes the copies; call it after the process has ended and
// before committing the worktree. Only
// empty files and empty folders are removed. The deepest go first; those
// of one depth are removed at the same time when there is no pool: on a
// busy disk one removal can wait milliseconds for the journal, and
// waiting for each in turn made this the largest part of a short sandbox
// exec after bwrap itself.
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
	pool := openStandInPool(len(p.StandIns))
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
			if pool.giveBack(s) {
				return
			}
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
		if len(group) == 1 || pool != nil {
			// Back to the pool, a rename each, one after another: eight
			// goroutines cost more than they save (0.86 -> 0.60 ms for a
			// plain folder's eight: docs/benchmarks.md, "Lean start,
			// seventh pass (issue 25)").
			for _, s := range group {
				remove(s)
			}
			continue
		}
		var wg sync.WaitGroup
		for _, s := range group {
			wg.Add(1)
			go func() { defer wg.Done(); remove(s) }()
		}
		wg.Wait()
	}
	if err := p.finishLogin(); err != nil {
		errs = append(errs, err.Error())
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
