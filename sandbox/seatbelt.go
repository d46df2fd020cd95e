package sandbox

// The macOS backend: a Seatbelt profile for /usr/bin/sandbox-exec, made
// from the same Plan that drives bubblewrap on Linux. This file is portable
// (no build tag) so the profile is tested on Linux; seatbelt_darwin.go runs it.
//
// Two rules shape the generator:
//
//   - No path ever enters the profile text. Every path becomes a parameter
//     (sandbox-exec -D P3=/the/path) and the text names it as (param "P3").
//     The text depends only on the plan's shape (which mount ops, in which
//     order) and on numbers kusaw chose itself (ports), so a worktree called
//     `")(allow default)(` or one with a newline cannot change what the
//     profile means. Not even a comment carries plan text.
//
//   - Later rules win in Seatbelt (the usual reading; the tests also check
//     the "most specific wins" one), as later mounts cover earlier ones in
//     bubblewrap. The plan's mounts are translated one by one, in order, so
//     both backends reach the same decision for every path; the move
//     blocking rules come last so that nothing can re-open them.
//
// Why (allow default) and not (deny default): kusaw's profile starts from
// deny for what it protects (every file write, all network, reading the
// hidden paths) and denies by name the system services that would act
// outside the sandbox for the process. A (deny default) profile needs an
// allow list of Mach services, IOKit classes and sysctls that differs
// between macOS releases and between tools (Node, Go, git, Python, an
// agent CLI); an incomplete list breaks tools in ways that push users to
// `sandbox: off`, which protects nothing. The price is a documented limit:
// a system service not on the deny list that does file or network work for
// its caller is not stopped (docs/sandbox-macos.md, sandbox check --verbose).

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// SandboxExecPath is the only sandbox-exec kusaw runs: never found through
// PATH, where a writable folder could put a fake in front of it.
const SandboxExecPath = "/usr/bin/sandbox-exec"

// SeatbeltOptions are what the macOS backend needs beyond the plan.
type SeatbeltOptions struct {
	// Ports are loopback ports the step may connect to besides the plan's
	// ProxyPort (the egress lease's listener: macOS has no network
	// namespace, so the lease is a port on the host's loopback). An
	// allowlist plan needs at least one; ignored when the network is open.
	Ports []int
	// LocalBind lets the step bind and accept on loopback (a local test
	// server). Connecting to other loopback ports stays refused, so this
	// exposes nothing of the host.
	LocalBind bool
	// TTY is the pseudo-terminal device the step's stdio is on, when kusaw
	// gave it one; "" otherwise.
	TTY string
	// UserTempDir is the user's own temp folder (getconf
	// DARWIN_USER_TEMP_DIR). It stays hidden like the rest of
	// /private/var/folders except the cache files of xcrun, which Apple's
	// tool shims (/usr/bin/git, cc, make) write on every run; its path
	// answers stat so that confstr finds it. "" leaves it wholly hidden.
	UserTempDir string
}

// SeatbeltParam is one -D NAME=VALUE of sandbox-exec.
type SeatbeltParam struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SeatbeltProfile is a generated profile: text with no path in it, and the
// parameters that carry every path.
type SeatbeltProfile struct {
	Text   string          `json:"text"`
	Params []SeatbeltParam `json:"params"`
}

// Args are sandbox-exec's arguments before the command: -D pairs, then the
// profile. The caller appends "--" and the command.
func (s *SeatbeltProfile) Args() []string {
	a := make([]string, 0, 2*len(s.Params)+2)
	for _, p := range s.Params {
		a = append(a, "-D", p.Name+"="+p.Value)
	}
	return append(a, "-p", s.Text)
}

// Mach services denied by name. With (allow default) these are the system
// services that would otherwise act for the sandboxed process outside the
// sandbox: read the Keychain or other credential stores, open apps and
// URLs, send Apple Events, read or fill the pasteboard, fetch URLs in the
// background, start launchd jobs or login items.
var seatbeltDeniedServices = []struct{ filter, name, why string }{
	{"global-name", "com.apple.SecurityServer", "the Keychain (securityd)"},
	{"global-name-prefix", "com.apple.securityd", "the Keychain (securityd's XPC services)"},
	{"global-name", "com.apple.secd", "the data-protection and iCloud Keychain"},
	{"global-name", "com.apple.security.agent", "Keychain and authorization prompts"},
	{"global-name", "com.apple.security.authhost", "authorization prompts"},
	{"global-name-prefix", "com.apple.accountsd", "Internet Accounts (stored logins)"},
	{"global-name", "com.apple.GSSCred", "Kerberos credentials"},
	{"global-name", "com.apple.coreservices.launchservicesd", "LaunchServices (opening apps, files and URLs)"},
	{"global-name", "com.apple.coreservices.appleevents", "Apple Events"},
	{"global-name", "com.apple.pasteboard.1", "the pasteboard"},
	{"global-name", "com.apple.pbs.fetch_services", "the pasteboard's services"},
	{"global-name-prefix", "com.apple.coreservices.uasharedpasteboard", "the shared (Handoff) pasteboard"},
	{"global-name-prefix", "com.apple.nsurlsessiond", "background URL sessions (downloads and uploads made by a daemon)"},
	{"global-name", "com.apple.xpc.smd", "ServiceManagement (login items, launchd jobs)"},
	{"global-name-prefix", "com.apple.backgroundtaskmanagement", "background items"},
	{"global-name", "com.apple.coreservices.sharedfilelistd", "login items and recent-items lists"},
	{"global-name-prefix", "com.apple.windowserver", "the window server: screen capture and synthetic keystrokes, with your terminal's permissions"},
}

// IOKit user clients denied by class: reading the keyboard and posting
// input events (with the terminal's Input Monitoring or Accessibility
// permission, a step could log keys or type into another window).
var seatbeltDeniedIOKit = []string{"IOHIDLibUserClient", "IOHIDParamUserClient"}

// Devices a step writes as a matter of course. They are fixed system
// paths, not plan paths, so they appear in the text.
var seatbeltDevices = []string{"/dev/null", "/dev/zero", "/dev/dtracehelper", "/dev/stdout", "/dev/stderr"}

// seatbeltExtraHidden are macOS places that hold other programs' private
// files and that no plan mount covers: the per-user temp and cache folders
// of every app. The step has its own TMPDIR.
var seatbeltExtraHidden = []string{"/private/var/folders"}

type sbGen struct {
	lines  []string
	params []SeatbeltParam
	byPath map[string]string
	// protected collects read-only and hidden paths: each and its
	// ancestors get move blocking at the end.
	protected []string
	// visible collects paths that are readable after a hide (worktrees in
	// a hidden home): their ancestors get metadata reads so that realpath
	// and getcwd work.
	visible  []seqPath
	hidden   []seqPath
	writable []string
	seq      int // rule order, so only hides that come before a visible path count
}

type seqPath struct {
	seq  int
	path string
}

func (g *sbGen) add(format string, args ...any) {
	g.lines = append(g.lines, fmt.Sprintf(format, args...))
}

// param returns the parameter naming path p, one per distinct path.
func (g *sbGen) param(p string) string {
	if n, ok := g.byPath[p]; ok {
		return n
	}
	n := fmt.Sprintf("P%d", len(g.params))
	g.byPath[p] = n
	g.params = append(g.params, SeatbeltParam{Name: n, Value: p})
	return n
}

// filters returns "(kind (param "Pn")) ..." for every variant of each path.
func (g *sbGen) filters(kind string, paths ...string) string {
	return strings.Join(g.filterList(kind, "%s", paths...), " ")
}

// filterList returns one filter per variant of each path, each wrapped by
// the format wrap (which has one %s).
func (g *sbGen) filterList(kind, wrap string, paths ...string) []string {
	var parts []string
	for _, p := range paths {
		for _, v := range macVariants(p) {
			parts = append(parts, fmt.Sprintf(wrap, fmt.Sprintf("(%s (param %q))", kind, g.param(v))))
		}
	}
	return parts
}

// macVariants: /tmp, /var and /etc are links to /private/... on macOS and
// Seatbelt matches the resolved path, so a rule names both spellings.
// Plan paths made on the Mac are resolved already; the base paths
// (/tmp, /run) are not.
func macVariants(p string) []string {
	out := []string{p}
	for _, l := range []string{"/tmp", "/var", "/etc"} {
		if p == l || strings.HasPrefix(p, l+"/") {
			out = append(out, "/private"+p)
		}
		// The other way too: a Unix socket's address is the path the
		// client wrote, which may be the short spelling.
		if pl := "/private" + l; p == pl || strings.HasPrefix(p, pl+"/") {
			out = append(out, strings.TrimPrefix(p, "/private"))
		}
	}
	for _, v := range kernelSpelling(p) {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// kernelSpelling returns how the kernel spells p when that differs from p:
// on macOS's case-insensitive file systems `~/Code/App` may be `~/code/app`
// on disk, and Seatbelt matches the kernel's spelling. Nothing elsewhere
// (seatbelt_darwin.go asks the kernel). The number of filters may grow;
// the text still holds no path.
var kernelSpelling = func(p string) []string { return nil }

// checkPath refuses what cannot be a parameter value: a relative path or
// one with a NUL byte (an exec argument cannot carry it, and it would cut
// the path short).
func checkPath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", refuse("rename the file or folder", "path %q contains a NUL byte; it cannot be passed to sandbox-exec", p)
	}
	if !filepath.IsAbs(p) {
		return "", refuse("give an absolute path", "path %q is not absolute; Seatbelt matches absolute paths only", p)
	}
	return filepath.Clean(p), nil
}

// Seatbelt returns the macOS profile of the plan.
func (p *Plan) Seatbelt(opt SeatbeltOptions) (*SeatbeltProfile, error) {
	g := &sbGen{byPath: map[string]string{}}
	ports := opt.Ports
	if p.ProxyPort != 0 {
		ports = append([]int{p.ProxyPort}, ports...)
	}
	ports, err := checkPorts(ports)
	if err != nil {
		return nil, err
	}
	switch p.Network {
	case NetworkOpen, NetworkNone:
	case NetworkAllowlist:
		if len(ports) == 0 {
			return nil, refuse("lease the egress proxy on a loopback port and pass it in SeatbeltOptions.Ports",
				"network allowlist on macOS needs the lease's loopback port (there is no network namespace to bridge into)")
		}
	default:
		return nil, refuse("use open, none or allowlist", "unknown network mode %q", p.Network)
	}
	if len(p.WrapArgv) > 0 {
		return nil, refuse("lease the proxy with a loopback listener on macOS, not the bridge",
			"the plan wraps the step in %d bridge argument(s); the egress bridge exists only on Linux", len(p.WrapArgv))
	}

	g.add("(version 1)")
	g.add(";; kusaw: every path is a parameter (-D Pn=path); none is in this text. Later rules win.")
	g.add(";; Start from allow and deny what kusaw protects: see docs/sandbox-macos.md for why.")
	g.add("(allow default)")
	g.add("")
	g.add(";; Processes: signals and process details only within this sandbox; no command lines of others.")
	g.add("(deny signal)")
	g.add("(allow signal (target same-sandbox))")
	g.add("(deny process-info*)")
	g.add("(allow process-info* (target same-sandbox))")
	g.add(`(deny sysctl-read (sysctl-name "kern.procargs") (sysctl-name "kern.procargs2"))`)
	g.add("")
	g.add(";; System services that would act for the process outside the sandbox.")
	g.add("(deny appleevent-send)")
	g.add("(deny lsopen)")
	g.add("(deny job-creation)")
	g.add("(deny user-preference-write)")
	g.add("(deny mach-lookup")
	for _, s := range seatbeltDeniedServices {
		g.add("  (%s %q) ; %s", s.filter, s.name, s.why)
	}
	g.add(")")
	var hid []string
	for _, c := range seatbeltDeniedIOKit {
		hid = append(hid, fmt.Sprintf("(iokit-user-client-class %q)", c))
	}
	g.add(";; the keyboard and input events")
	g.add("(deny iokit-open %s)", strings.Join(hid, " "))
	g.add("")
	g.add(";; Files: no writes but the plan's writable paths; the plan's mounts follow in order.")
	g.add("(deny file-write*)")
	var devs []string
	for _, d := range seatbeltDevices {
		devs = append(devs, fmt.Sprintf("(literal %q)", d))
	}
	g.add("(allow file-write* %s (subpath \"/dev/fd\"))", strings.Join(devs, " "))
	// Terminals are the user's: a step that opened one could read the
	// keys typed into it or push its own. The controlling terminal
	// (/dev/tty) is denied too unless it is the step's own pty.
	g.add(";; Terminals: none but the step's own pseudo-terminal.")
	// /dev/tty is named once, in the rule that decides it, so no reading of
	// Seatbelt's rule order (last match, or most specific with deny on a
	// tie) can turn it around.
	const terminals = `(regex #"^/dev/ttys[0-9]+$") (regex #"^/dev/pty") (regex #"^/dev/(tty|cu)[.]") (literal "/dev/console")`
	if opt.TTY == "" {
		g.add(`(deny file-read* file-write* file-ioctl (literal "/dev/tty") %s)`, terminals)
	} else {
		t, err := checkPath(opt.TTY)
		if err != nil {
			return nil, err
		}
		g.add(`(deny file-read* file-write* file-ioctl %s)`, terminals)
		g.add(`(allow file-read* file-write* file-ioctl (literal "/dev/tty") %s)`, g.filters("literal", t))
	}
	g.add(";; macOS: other programs' temp and cache folders")
	for _, h := range seatbeltExtraHidden {
		g.hide(h)
	}
	if opt.UserTempDir != "" {
		t, err := checkPath(opt.UserTempDir)
		if err != nil {
			return nil, err
		}
		g.add(";; ...but for xcrun's cache files in the user's temp folder (Apple's tool shims write them)")
		g.add(`(allow file-read* file-write* (require-all (require-any %s) (regex #"/xcrun_db[^/]*$")))`, g.filters("subpath", t))
		g.see(filepath.Join(t, "xcrun_db"))
	}

	for i, m := range p.Mounts {
		if err := g.mount(i, m); err != nil {
			return nil, err
		}
	}

	g.add("")
	g.add(";; Folders that lead to visible paths inside hidden ones: their metadata only (realpath, getcwd).")
	anc := g.visibleAncestors()
	if len(anc) > 0 {
		g.add("(allow file-read-metadata %s)", g.filters("literal", anc...))
	}

	g.network(p.Network, ports, opt.LocalBind)

	g.add("")
	g.add(";; Move blocking, last so nothing re-opens it: a protected or hidden path and every folder")
	g.add(";; above it cannot be renamed or removed, so none can be moved out of reach or replaced.")
	if len(g.protected) > 0 {
		g.add("(deny file-write-unlink file-link %s)", g.filters("literal", g.protected...))
	}
	if a := ancestors(g.protected); len(a) > 0 {
		g.add("(deny file-write-unlink %s)", g.filters("literal", a...))
	}
	return &SeatbeltProfile{Text: strings.Join(g.lines, "\n") + "\n", Params: g.params}, nil
}

// mount translates one plan mount. The comment names the op and the
// mount's index, never its path or reason (they are plan text).
func (g *sbGen) mount(i int, m Mount) error {
	dst, err := checkPath(m.Dst)
	if err != nil {
		return err
	}
	src := ""
	if m.Src != "" {
		if src, err = checkPath(m.Src); err != nil {
			return err
		}
	}
	switch m.Op {
	case "dev", "proc", "remount-ro":
		// /dev and /proc are the host's on macOS; read-only is the default.
		return nil
	case "ro-bind":
		if dst == "/" {
			// The system, read-only: reads are allowed and writes denied already.
			return nil
		}
		g.add(";; mount %d: %s", i, mountKind(m))
		if src == "/dev/null" || isHideReason(m.Reason) {
			g.hide(dst)
			return nil
		}
		paths := []string{dst}
		if src != "" && src != dst {
			paths = append(paths, src)
		}
		g.add("(allow file-read* %s)", g.filters("subpath", paths...))
		g.add("(deny file-write* file-link %s)", g.filters("subpath", paths...))
		g.protected = append(g.protected, paths...)
		g.see(paths...)
	case "bind":
		g.add(";; mount %d: writable", i)
		paths := []string{dst}
		if src != "" && src != dst {
			paths = append(paths, src)
		}
		g.add("(allow file-read* file-write* file-link %s)", g.filters("subpath", paths...))
		g.see(paths...)
		g.writable = append(g.writable, paths...)
	case "empty-file":
		// A protected file that does not exist: nothing may create it.
		g.add(";; mount %d: read-only (missing file)", i)
		g.add("(deny file-write* file-link %s)", g.filters("subpath", dst))
		g.protected = append(g.protected, dst)
	case "tmpfs":
		if isHideReason(m.Reason) {
			g.add(";; mount %d: hidden", i)
			g.hide(dst)
			return nil
		}
		// An empty read-only stand-in on Linux; here the folder is left as
		// it is (missing) and nothing may be created in it.
		g.add(";; mount %d: read-only (missing folder)", i)
		g.add("(deny file-write* file-link %s)", g.filters("subpath", dst))
		g.protected = append(g.protected, dst)
	default:
		// Fail closed: a mount this backend does not know is not skipped.
		return refuse("update the seatbelt backend for the new mount kind",
			"mount %d has op %q, which the macOS backend does not know", i, m.Op)
	}
	return nil
}

func mountKind(m Mount) string {
	if m.Src == "/dev/null" || isHideReason(m.Reason) {
		return "hidden"
	}
	return "read-only"
}

// hide makes p unreadable and unwritable. Linking or cloning it would copy
// it out of reach, so those are refused too.
func (g *sbGen) hide(p string) {
	g.add("(deny file-read* file-write* file-link file-clone %s)", g.filters("subpath", p))
	g.protected = append(g.protected, p)
	g.seq++
	g.hidden = append(g.hidden, seqPath{g.seq, p})
}

// see records paths made readable by the rule just written.
func (g *sbGen) see(paths ...string) {
	g.seq++
	for _, p := range paths {
		g.visible = append(g.visible, seqPath{g.seq, p})
	}
}

// visibleAncestors are the folders strictly between a hidden path and a
// visible path below it, plus the hidden path itself. In first-seen order:
// sorting by value would let a path's spelling reorder the text.
func (g *sbGen) visibleAncestors() []string {
	var out []string
	seen := map[string]bool{}
	for _, v := range g.visible {
		for _, h := range g.hidden {
			if h.seq > v.seq || v.path == h.path || !within(h.path, v.path) {
				continue
			}
			var chain []string
			for d := filepath.Dir(v.path); within(h.path, d); d = filepath.Dir(d) {
				chain = append(chain, d)
				if d == h.path || d == "/" {
					break
				}
			}
			for i := len(chain) - 1; i >= 0; i-- {
				if !seen[chain[i]] {
					seen[chain[i]] = true
					out = append(out, chain[i])
				}
			}
		}
	}
	return out
}

// ancestors returns every folder above the given paths, without "/", in
// first-seen order, outermost first.
func ancestors(paths []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range paths {
		var chain []string
		for d := filepath.Dir(p); d != "/" && d != "."; d = filepath.Dir(d) {
			chain = append(chain, d)
		}
		for i := len(chain) - 1; i >= 0; i-- {
			if !seen[chain[i]] {
				seen[chain[i]] = true
				out = append(out, chain[i])
			}
		}
	}
	return out
}

func (g *sbGen) network(mode string, ports []int, localBind bool) {
	g.add("")
	g.add(";; Network.")
	switch mode {
	case NetworkOpen:
		g.add("(allow network*)")
		g.add(";; Unix sockets only in the writable paths (ssh-agent, Docker and the like stay outside);")
		g.add(";; the DNS resolver's socket stays, or open network could not resolve names.")
		g.add(`(deny network-outbound (remote unix-socket (path-regex #"^/")))`)
		g.add(`(deny network-bind (local unix-socket (path-regex #"^/")))`)
		g.add(`(allow network-outbound (remote unix-socket (path-literal "/private/var/run/mDNSResponder")) (remote unix-socket (path-literal "/var/run/mDNSResponder")))`)
	default:
		g.add("(deny network*)")
		if mode == NetworkAllowlist {
			g.add(";; the egress lease's loopback port: the only way out (no DNS either)")
			for _, port := range ports {
				g.add(`(allow network-outbound (remote ip "localhost:%d"))`, port)
			}
		}
		if localBind {
			g.add(";; local servers: bind and accept on loopback")
			g.add(`(allow network-bind network-inbound (local ip "localhost:*"))`)
		}
		g.add(";; Unix sockets only in the writable paths")
	}
	if len(g.writable) > 0 {
		local := g.filterList("subpath", "(local unix-socket %s)", g.writable...)
		remote := g.filterList("subpath", "(remote unix-socket %s)", g.writable...)
		g.add("(allow network-bind %s)", strings.Join(local, " "))
		g.add("(allow network-outbound %s)", strings.Join(remote, " "))
	}
}

// checkPorts validates and sorts the loopback ports; they are numbers
// kusaw formats itself, so they may appear in the text.
func checkPorts(ports []int) ([]int, error) {
	var out []int
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return nil, refuse("pass the lease's listening port", "loopback port %d is out of range", p)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out, nil
}

// seatbeltHome is the attempt's fresh, empty HOME: inside its private temp
// folder, so it is writable and removed with it.
func seatbeltHome(p *Plan) (string, error) {
	tmp := envValue(p.Env, "TMPDIR")
	if tmp == "" || !filepath.IsAbs(tmp) {
		return "", refuse("build the plan with the attempt's tmp folder", "the plan has no absolute TMPDIR to put the fresh HOME in")
	}
	// The folder is emptied before each start: it must be the attempt's
	// own temp folder, one the plan makes writable, never anything else.
	tmp = filepath.Clean(tmp)
	for _, m := range p.Mounts {
		if m.Op == "bind" && filepath.Clean(m.Dst) == tmp && tmp != "/" {
			return filepath.Join(tmp, "home"), nil
		}
	}
	return "", refuse("build the plan with BuildPlan", "TMPDIR %s is not a writable folder of the plan; the fresh HOME goes only in the attempt's temp folder", tmp)
}

// seatbeltEnv is the plan's environment with HOME replaced by the fresh
// one. CFFIXED_USER_HOME does the same for Apple's frameworks, which take
// the home from the user database rather than from HOME.
func seatbeltEnv(p *Plan, home string) []string {
	env := make([]string, 0, len(p.Env)+2)
	for _, kv := range p.Env {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "CFFIXED_USER_HOME" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "CFFIXED_USER_HOME="+home)
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// SeatbeltProtections is what the macOS backend protects, in kusaw's words;
// `kusaw sandbox check --verbose` prints it on macOS.
var SeatbeltProtections = []string{
	"Writes reach only the attempt's worktrees, the git folders they need, artifacts/, the private temp folder (TMPDIR, XDG_CACHE_HOME, XDG_RUNTIME_DIR, and the fresh HOME inside it) and what allow_write names; the profile denies every other file write.",
	"Git control files and the settings that start programs later (.claude/settings*.json, .claude/{hooks,commands,agents,skills}/, .cursor/, .mcp.json, .vscode/{tasks,settings}.json, .devcontainer/, .husky/, core.hooksPath) stay read-only inside the worktree, also when they do not exist yet.",
	"A protected path and every folder above it cannot be renamed or removed, so none can be moved out of reach and replaced; a protected or hidden file cannot be hard-linked.",
	"The real home, ~/.ssh, ~/.gnupg, ~/.aws and other credential folders, kusaw's secret store and key folders, the repositories' own checkouts, /tmp and other apps' temp folders (/private/var/folders) cannot be read.",
	"Each attempt gets a fresh, empty HOME inside its temp folder, removed with it; the agent signs in with a token kept as a step secret.",
	"Network: in allowlist mode only the egress lease's loopback port is reachable (no DNS, no other local port); Unix sockets only inside the writable paths, so ssh-agent, Docker and similar sockets stay outside.",
	"The Keychain, other credential stores (Internet Accounts, Kerberos), LaunchServices, Apple Events, the pasteboard, background URL sessions, launchd jobs, login items, preference writes, the window server (screen capture, synthetic keystrokes) and the keyboard's HID devices are denied, whatever permissions your terminal holds.",
	"Signals and process details only reach the sandbox's own processes; the command lines of other processes cannot be read.",
	"Terminals: the step cannot open /dev/tty or any other terminal (reading your keys or pushing its own); with a terminal it gets a pseudo-terminal of its own that kusaw relays.",
	"sandbox-exec is taken only from /usr/bin/sandbox-exec, root-owned and not writable by others, never through PATH.",
}

// SeatbeltNotProtected is what the macOS backend does not protect.
var SeatbeltNotProtected = []string{
	"Kernel escapes: a shared-kernel process sandbox, weaker than a VM.",
	"System services by a deny list: a service that is not on kusaw's list and that does file or network work for its caller is not stopped (the profile starts from allow; see docs/sandbox-macos.md).",
	"Process listing: there is no PID namespace; other processes' ids and names can be listed, although they cannot be signalled or inspected. Paths outside the sandbox can be checked for existence, size and dates where their folder is not hidden.",
	"Detached processes: a process that calls setsid survives the attempt, still under the profile.",
	"The network when network is open: every host and every service on the host's localhost.",
	"The agent's login token, which is in that step's environment.",
	"Tools that ignore HTTP(S)_PROXY fail closed in allowlist mode; clients on IPv6 dual-stack sockets may not reach the proxy (Seatbelt's localhost does not match ::ffff:127.0.0.1).",
	"Tools that ignore TMPDIR fail: /tmp is not writable (Linux gives an empty private /tmp; macOS cannot).",
	"Programs that open a pseudo-terminal inside the step (script, expect, terminal emulators in tests) fail: every terminal but the step's own is denied.",
	"Whatever sandbox.allow_read and sandbox.allow_write name.",
	"sandbox-exec is deprecated by Apple; it still works and Apple's own tools use the same engine.",
}

// seatbeltProbePlan is a small plan that uses every rule kind the
// generator writes (hidden, read-only, writable, missing file and folder,
// allowlist): `sandbox check` runs /usr/bin/true under its profile, so a
// macOS release that rejects one of kusaw's operations or filters is found
// before any attempt starts. dir is an existing, empty temp folder.
func seatbeltProbePlan(dir string) *Plan {
	home := filepath.Join(dir, "home")
	wt := filepath.Join(dir, "wt")
	tmp := filepath.Join(dir, "tmp")
	return &Plan{
		Backend: "seatbelt",
		Network: NetworkAllowlist,
		Workdir: wt,
		Mounts: []Mount{
			{Op: "ro-bind", Src: "/", Dst: "/", Reason: "the system, read-only"},
			{Op: "tmpfs", Dst: "/tmp", Reason: "private /tmp"},
			{Op: "tmpfs", Dst: home, Reason: "hidden: a home"},
			{Op: "ro-bind", Src: "/dev/null", Dst: filepath.Join(home, ".netrc"), Reason: "hidden: a credential file"},
			{Op: "bind", Src: wt, Dst: wt, Reason: "a worktree"},
			{Op: "bind", Src: tmp, Dst: tmp, Reason: "the temp folder"},
			{Op: "ro-bind", Src: filepath.Join(wt, ".git"), Dst: filepath.Join(wt, ".git"), Reason: "a control file"},
			{Op: "empty-file", Src: filepath.Join(dir, ".sandbox-empty"), Dst: filepath.Join(wt, ".mcp.json"), Reason: "a missing file"},
			{Op: "tmpfs", Dst: filepath.Join(wt, ".cursor"), Reason: "a missing folder"},
		},
		Env: []string{"PATH=/usr/bin:/bin", "TMPDIR=" + tmp},
	}
}

// ProtectionLists returns what the named backend protects and what it does
// not, for `kusaw sandbox check --verbose` and `kusaw sandbox doctor`.
func ProtectionLists(backend string) (protects, notProtected []string) {
	if backend == "seatbelt" {
		return SeatbeltProtections, SeatbeltNotProtected
	}
	return Protections, NotProtected
}

// LoopbackProxy is the Proxy of a lease that listens on the host's
// loopback (macOS: there is no network namespace to bridge into). addr is
// the lease's listen address ("127.0.0.1:PORT"); env its proxy variables.
// The Seatbelt profile admits "localhost:PORT" only, so any other host is
// refused here rather than silently unreachable.
func LoopbackProxy(addr string, env []string) (*Proxy, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, refuse("lease the proxy on 127.0.0.1:0", "lease address %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() || (ip.To4() != nil && !ip.Equal(net.IPv4(127, 0, 0, 1))) {
		return nil, refuse("lease the proxy on 127.0.0.1:0", "lease address %q is not 127.0.0.1 or ::1; the macOS profile admits only localhost", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return nil, refuse("lease the proxy on 127.0.0.1:0", "lease address %q has no usable port", addr)
	}
	return &Proxy{Port: n, Env: append([]string(nil), env...)}, nil
}
