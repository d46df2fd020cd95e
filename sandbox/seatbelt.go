package sandbox

// The macOS backend: a Seatbelt profile for /usr/bin/sandbox-exec, made
// from the same Plan that drives bubblewrap on Linux. This file is portable
// (no build tag) so the profile is tested on Linux; seatbelt_darwin.go runs it.
//
// Three rules shape the generator:
//
//   - No path ever enters the profile text. Every path becomes a parameter
//     (sandbox-exec -D P3=/the/path) and the text names it as (param "P3").
//     The text depends only on the plan's shape (which mount ops, in which
//     order) and on numbers kusaw chose itself (ports), so a worktree called
//     `")(allow default)(` or one with a newline cannot change what the
//     profile means. Not even a comment carries plan text.
//
//   - Seatbelt's precedence: the rules written for an operation itself
//     (file-write-data, mach-lookup) are tried before those written for
//     its family (file-write*, file*, then default), whatever their order;
//     among the rules of one operation the later wins. The generator writes
//     every rule so that the plain "later wins" reading gives the same
//     answer, and the tests evaluate both. The plan's mounts are translated
//     one by one, in order, as later mounts cover earlier ones in
//     bubblewrap; the move blocking rules come last.
//
//   - Services start from deny. File reads start from allow (a step reads
//     the system, its tools and the worktree; what is secret is hidden by
//     name), and so do the operations that only touch the process itself.
//     Everything that asks the system to act for the process starts from
//     deny with a short allow list, each entry with its reason: Mach
//     services, IOKit user clients, socket families, mounts, NVRAM, sysctl
//     writes and reads, devices. The list is the one Codex CLI's and
//     sandbox-runtime's deny-default profiles share; what a tool needs
//     beyond it fails with a refusal tagged "kusaw" that `log stream`
//     finds (docs/sandbox-macos.md).

import (
	"fmt"
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
	// /private/var/folders; only its path answers stat, so that confstr
	// finds it. "" leaves it wholly hidden.
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

// SeatbeltDenyMessage tags every refusal of kusaw's profile in the system
// log, so a first run on a Mac can trace one:
// log stream --style compact --predicate 'eventMessage CONTAINS "kusaw"'.
const SeatbeltDenyMessage = "kusaw"

// sbEntry is one entry of an allow or deny list: a filter, its argument and
// why it is there (the why becomes the comment at the end of its line).
type sbEntry struct{ filter, arg, why string }

// Mach services every step may look up: the list that Codex CLI's and
// sandbox-runtime's deny-default profiles share. Every other service is
// refused.
var seatbeltAllowedServices = []sbEntry{
	{"global-name", "com.apple.system.opendirectoryd.libinfo", "user and group names (getpwuid): shells, git, ssh-keygen"},
	{"global-name", "com.apple.system.opendirectoryd.membership", "group membership, for access checks"},
	{"global-name", "com.apple.cfprefsd.daemon", "reading preferences (user-preference-write stays denied)"},
	{"global-name", "com.apple.cfprefsd.agent", "reading the user's preferences; the fresh HOME has none"},
	{"local-name", "com.apple.cfprefsd.agent", "the same, in the session's namespace"},
	{"global-name", "com.apple.logd", "os_log: the process's own log lines"},
	{"global-name", "com.apple.system.logger", "the older logging interface (asl)"},
	{"global-name", "com.apple.system.notification_center", "notify(3): time-zone and network notices libSystem watches"},
	{"global-name", "com.apple.PowerManagement.control", "power assertions (caffeinate keeping a long build awake)"},
	{"global-name", "com.apple.bsd.dirhelper", "confstr: the name of the per-user temp folder"},
}

// Network services, only when the network is open: then the step reaches
// the network directly, so a daemon that resolves or fetches for it is no
// way around a proxy.
var seatbeltOpenNetworkServices = []sbEntry{
	{"global-name", "com.apple.dnssd.service", "DNS through mDNSResponder (getaddrinfo)"},
	{"global-name", "com.apple.SystemConfiguration.DNSConfiguration", "the resolver's configuration"},
	{"global-name", "com.apple.SystemConfiguration.configd", "network configuration"},
	{"global-name", "com.apple.networkd", "Network.framework"},
	{"global-name", "com.apple.trustd.agent", "certificate checks (Go's and Security.framework's TLS)"},
	{"global-name", "com.apple.trustd", "certificate checks against the system's trust store"},
	{"global-name", "com.apple.ocspd", "certificate revocation checks"},
}

// Mach services refused by name after the allow lists, so no allow, now
// or added later, reaches them. Deny-by-default refuses them already; the
// names say why each matters, and the tests ask for each. outsideOpen
// marks the network services, refused unless the network is open.
var seatbeltDeniedServices = []struct {
	sbEntry
	outsideOpen bool
}{
	{sbEntry{"global-name", "com.apple.SecurityServer", "the Keychain (securityd)"}, false},
	{sbEntry{"global-name-prefix", "com.apple.securityd", "the Keychain (securityd's XPC services)"}, false},
	{sbEntry{"global-name", "com.apple.secd", "the data-protection and iCloud Keychain"}, false},
	{sbEntry{"global-name", "com.apple.security.agent", "Keychain and authorization prompts"}, false},
	{sbEntry{"global-name", "com.apple.security.authhost", "authorization prompts"}, false},
	{sbEntry{"global-name-prefix", "com.apple.accountsd", "Internet Accounts (stored logins)"}, false},
	{sbEntry{"global-name", "com.apple.GSSCred", "Kerberos credentials"}, false},
	{sbEntry{"global-name", "com.apple.coreservices.launchservicesd", "LaunchServices (opening apps, files and URLs)"}, false},
	{sbEntry{"global-name-prefix", "com.apple.lsd.", "the LaunchServices database: registering an app in the worktree as a URL or file handler"}, false},
	{sbEntry{"global-name", "com.apple.CoreServices.coreservicesd", "CoreServices (launching and registering apps)"}, false},
	{sbEntry{"global-name-prefix", "com.apple.coreservices.quarantine-resolver", "the quarantine resolver"}, false},
	{sbEntry{"global-name", "com.apple.coreservices.appleevents", "Apple Events"}, false},
	{sbEntry{"global-name", "com.apple.pasteboard.1", "the pasteboard"}, false},
	{sbEntry{"global-name", "com.apple.pbs.fetch_services", "the pasteboard's services"}, false},
	{sbEntry{"global-name-prefix", "com.apple.coreservices.uasharedpasteboard", "the shared (Handoff) pasteboard"}, false},
	{sbEntry{"global-name-prefix", "com.apple.nsurlsessiond", "background URL sessions (a daemon downloads and uploads)"}, false},
	{sbEntry{"global-name", "com.apple.xpc.smd", "ServiceManagement (login items, launchd jobs)"}, false},
	{sbEntry{"global-name-prefix", "com.apple.backgroundtaskmanagement", "background items"}, false},
	{sbEntry{"global-name", "com.apple.coreservices.sharedfilelistd", "login items and recent-items lists"}, false},
	{sbEntry{"global-name-prefix", "com.apple.DiskArbitration", "DiskArbitration: mounting a disk image over a folder outside the sandbox"}, false},
	{sbEntry{"global-name-prefix", "com.apple.diskimages", "the disk image helpers behind hdiutil attach"}, false},
	{sbEntry{"global-name-prefix", "com.apple.windowserver", "the window server: screen capture and synthetic keystrokes, with your terminal's permissions"}, false},
	{sbEntry{"global-name", "com.apple.replayd", "screen recording"}, false},
	{sbEntry{"global-name-prefix", "com.apple.locationd", "Location Services"}, false},
	{sbEntry{"global-name-prefix", "com.apple.cmio", "cameras (CoreMediaIO)"}, false},
	{sbEntry{"global-name", "com.apple.audio.audiohald", "microphones and speakers (coreaudiod)"}, false},
	{sbEntry{"global-name-prefix", "com.apple.tccd", "privacy permissions (TCC) and their prompts"}, false},
	{sbEntry{"global-name", "com.apple.dnssd.service", "DNS: a lookup of <secret>.attacker.example leaves the machine"}, true},
	{sbEntry{"global-name-prefix", "com.apple.mDNSResponder", "DNS and Bonjour"}, true},
	{sbEntry{"global-name-prefix", "com.apple.trustd", "certificate checks fetch the AIA, OCSP and CRL addresses a certificate names"}, true},
	{sbEntry{"global-name", "com.apple.ocspd", "revocation checks fetch the addresses a certificate names"}, true},
	{sbEntry{"global-name", "com.apple.networkd", "Network.framework's daemon"}, true},
}

// IOKit user clients a step may open: power management only (the same
// assertions as com.apple.PowerManagement.control).
var seatbeltAllowedIOKit = []sbEntry{
	{"iokit-registry-entry-class", "RootDomainUserClient", "power management: sleep assertions"},
}

// IOKit user clients refused by name after the allow list: reading the
// keyboard and posting input events (with the terminal's Input Monitoring
// or Accessibility permission, a step could log keys or type into another
// window).
var seatbeltDeniedIOKit = []sbEntry{
	{"iokit-user-client-class", "IOHIDLibUserClient", "reading the keyboard"},
	{"iokit-user-client-class", "IOHIDParamUserClient", "posting input events"},
}

// sysctls a step may read: what language runtimes, compilers, uname and
// ps read about the machine and the step's own processes. Other
// processes' command lines (kern.procargs*), which can hold tokens, are
// not on it.
var seatbeltSysctlReads = []sbEntry{
	{"sysctl-name-prefix", "hw.optional.", "CPU features (Homebrew, rustup, compilers)"},
	{"sysctl-name-prefix", "hw.perflevel", "performance and efficiency cores"},
	{"sysctl-name-prefix", "machdep.cpu.", "the CPU's name and features"},
	{"sysctl-name", "hw.activecpu", "CPU counts"},
	{"sysctl-name", "hw.ncpu", ""},
	{"sysctl-name", "hw.logicalcpu", ""},
	{"sysctl-name", "hw.logicalcpu_max", ""},
	{"sysctl-name", "hw.physicalcpu", ""},
	{"sysctl-name", "hw.physicalcpu_max", ""},
	{"sysctl-name", "hw.nperflevels", ""},
	{"sysctl-name", "hw.packages", ""},
	{"sysctl-name", "hw.byteorder", "the machine's shape: architecture, memory, caches, page size"},
	{"sysctl-name", "hw.machine", ""},
	{"sysctl-name", "hw.model", ""},
	{"sysctl-name", "hw.cputype", ""},
	{"sysctl-name", "hw.cpusubtype", ""},
	{"sysctl-name", "hw.cpufamily", ""},
	{"sysctl-name", "hw.cpufrequency", ""},
	{"sysctl-name", "hw.cpufrequency_compat", ""},
	{"sysctl-name", "hw.busfrequency_compat", ""},
	{"sysctl-name", "hw.tbfrequency", ""},
	{"sysctl-name", "hw.tbfrequency_compat", ""},
	{"sysctl-name", "hw.memsize", ""},
	{"sysctl-name", "hw.pagesize", ""},
	{"sysctl-name", "hw.pagesize_compat", ""},
	{"sysctl-name", "hw.vectorunit", ""},
	{"sysctl-name", "hw.cacheconfig", ""},
	{"sysctl-name", "hw.cachelinesize", ""},
	{"sysctl-name", "hw.cachelinesize_compat", ""},
	{"sysctl-name", "hw.l1dcachesize", ""},
	{"sysctl-name", "hw.l1dcachesize_compat", ""},
	{"sysctl-name", "hw.l1icachesize", ""},
	{"sysctl-name", "hw.l1icachesize_compat", ""},
	{"sysctl-name", "hw.l2cachesize", ""},
	{"sysctl-name", "hw.l2cachesize_compat", ""},
	{"sysctl-name", "hw.l3cachesize", ""},
	{"sysctl-name", "hw.l3cachesize_compat", ""},
	{"sysctl-name", "kern.ostype", "the system's name and version (uname, sw_vers, runtimes)"},
	{"sysctl-name", "kern.osrelease", ""},
	{"sysctl-name", "kern.osversion", ""},
	{"sysctl-name", "kern.osproductversion", ""},
	{"sysctl-name", "kern.osvariant_status", ""},
	{"sysctl-name", "kern.version", ""},
	{"sysctl-name", "kern.hostname", ""},
	{"sysctl-name", "kern.secure_kernel", ""},
	{"sysctl-name", "kern.bootargs", "boot arguments, which the allocator reads on some releases"},
	{"sysctl-name", "kern.willshutdown", "whether the machine is shutting down"},
	{"sysctl-name", "security.mac.lockdown_mode_state", "whether Lockdown Mode is on (JavaScriptCore, Security.framework)"},
	{"sysctl-name", "machdep.ptrauth_enabled", "pointer authentication (arm64e)"},
	{"sysctl-name", "kern.boottime", "uptime"},
	{"sysctl-name", "kern.argmax", "process limits (xargs, shells)"},
	{"sysctl-name", "kern.maxfiles", ""},
	{"sysctl-name", "kern.maxfilesperproc", ""},
	{"sysctl-name", "kern.maxproc", ""},
	{"sysctl-name", "kern.ngroups", ""},
	{"sysctl-name", "kern.usrstack64", "the stack's address (runtimes)"},
	{"sysctl-name", "kern.tcsm_available", "V8's side-channel mitigation"},
	{"sysctl-name", "kern.tcsm_enable", ""},
	{"sysctl-name", "sysctl.proc_cputype", "the process's architecture"},
	{"sysctl-name", "sysctl.proc_translated", "whether it runs under Rosetta"},
	{"sysctl-name", "vm.loadavg", "load average"},
	{"sysctl-name-prefix", "user.", "POSIX limits and the default PATH (getconf)"},
	{"sysctl-name-prefix", "net.routetable.", "the network interfaces (getifaddrs)"},
	{"sysctl-name-prefix", "kern.proc.pid.", "one process's id, name and state (ps -p); not its command line"},
	{"sysctl-name-prefix", "kern.proc.pgrp.", "a process group's members"},
	{"sysctl-name", "kern.proc.all", "the process list (pgrep, ps -A, tree-kill): ids and names, a documented limit"},
}

// sysctls a step may write: two that are reads in disguise (the value is
// passed in the write buffer) and that change nothing outside the process.
var seatbeltSysctlWrites = []sbEntry{
	{"sysctl-name", "kern.grade_cputype", "the JVM asks which CPU type runs best"},
	{"sysctl-name", "kern.tcsm_enable", "V8 turns the mitigation on for its own threads"},
}

// Devices a step writes as a matter of course. They are fixed system
// paths, not plan paths, so they appear in the text. /dev/ptmx makes a
// new pseudo-terminal pair; it reaches no existing terminal.
var seatbeltDevices = []string{"/dev/null", "/dev/zero", "/dev/dtracehelper", "/dev/stdout", "/dev/stderr", "/dev/ptmx"}

// seatbeltExtraHidden are macOS places that no plan mount covers and
// that must not be read or written:
//   - /private/var/folders: every app's per-user temp and cache folders
//     (the step has its own TMPDIR);
//   - /System/Volumes/Data: the data volume, where /Users, /private/var
//     and the rest of the writable system are a second time, under a
//     second spelling that the plan's rules do not name
//     (/System/Volumes/Data/Users/dev/.ssh is ~/.ssh). Denying the whole
//     spelling covers every hidden and protected path at once; nothing a
//     step needs is reached that way.
var seatbeltExtraHidden = []string{"/private/var/folders", "/System/Volumes/Data"}

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
	// statOnly are paths inside hidden folders that answer stat
	// themselves (the user's temp folder, for confstr).
	statOnly []string
	seq      int // rule order, so only hides that come before a visible path count
}

type seqPath struct {
	seq  int
	path string
}

func (g *sbGen) add(format string, args ...any) {
	g.lines = append(g.lines, fmt.Sprintf(format, args...))
}

// deny writes a deny rule tagged with kusaw's message: ops, then the
// filters (already formatted), each filter on the same line.
func (g *sbGen) deny(ops string, filters ...string) {
	g.lines = append(g.lines, "(deny "+strings.Join(append([]string{ops}, filters...), " ")+fmt.Sprintf(" (with message %q))", SeatbeltDenyMessage))
}

// list writes one rule whose filters are a table, one per line with its
// reason as a comment; a deny carries kusaw's message.
func (g *sbGen) list(action, ops string, rules []sbEntry) {
	g.add("(%s %s", action, ops)
	for _, r := range rules {
		if r.why == "" {
			g.add("  (%s %q)", r.filter, r.arg)
		} else {
			g.add("  (%s %q) ; %s", r.filter, r.arg, r.why)
		}
	}
	if action == "deny" {
		g.add("  (with message %q))", SeatbeltDenyMessage)
	} else {
		g.add(")")
	}
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
	ports := append(append([]int(nil), opt.Ports...), p.LocalPorts...)
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
	g.add(";; kusaw: every path is a parameter (-D Pn=path); none is in this text.")
	g.add(";; An operation's own rules rank above its family's (file-write-data above file-write*),")
	g.add(";; and a later rule above an earlier one; kusaw writes them so that order alone agrees.")
	g.add(";; File reads and the process's own work start from allow; services start from deny below.")
	g.add(";; Every refusal is logged with the message %q (docs/sandbox-macos.md).", SeatbeltDenyMessage)
	g.add("(allow default)")
	g.processes()
	g.services(p.Network)
	if err := g.files(p, opt); err != nil {
		return nil, err
	}
	g.network(p.Network, ports, opt.LocalBind)

	g.add("")
	g.add(";; Move blocking, last so nothing re-opens it: a protected or hidden path and every folder")
	g.add(";; above it cannot be renamed or removed, so none can be moved out of reach or replaced.")
	if len(g.protected) > 0 {
		g.deny("file-write-unlink file-link", g.filters("literal", g.protected...))
	}
	if a := ancestors(g.protected); len(a) > 0 {
		g.deny("file-write-unlink", g.filters("literal", a...))
	}
	return &SeatbeltProfile{Text: strings.Join(g.lines, "\n") + "\n", Params: g.params}, nil
}

// processes: signals, process details and task ports reach only the
// sandbox's own processes; sysctls from a named list.
func (g *sbGen) processes() {
	g.add("")
	g.add(";; Processes: signals, details and task ports only within this sandbox (no debugger")
	g.add(";; attaches to a process outside, no command lines of others).")
	g.deny("signal")
	g.add("(allow signal (target same-sandbox))")
	g.deny("process-info*")
	g.add("(allow process-info* (target same-sandbox))")
	g.deny("mach-priv* mach-task-name")
	g.add("(allow mach-priv-task-port mach-task-name (target same-sandbox))")
	g.add(";; sysctls: reads from a named list, writes from a shorter one.")
	g.deny("sysctl-read")
	g.list("allow", "sysctl-read", seatbeltSysctlReads)
	g.deny("sysctl-write")
	g.list("allow", "sysctl-write", seatbeltSysctlWrites)
}

// services: what would act for the process outside the sandbox starts
// from deny. Each family is denied whole, then its allow list, then the
// names that must stay refused whatever the list says.
func (g *sbGen) services(network string) {
	g.add("")
	g.add(";; Mach services: none but the list below.")
	g.deny("mach-lookup")
	g.list("allow", "mach-lookup", seatbeltAllowedServices)
	var never []sbEntry
	for _, s := range seatbeltDeniedServices {
		if !s.outsideOpen || network != NetworkOpen {
			never = append(never, s.sbEntry)
		}
	}
	if network == NetworkOpen {
		g.add(";; network: open, so the network's own services too")
		g.list("allow", "mach-lookup", seatbeltOpenNetworkServices)
	}
	g.add(";; Refused by name, after every allow: services that would act outside the sandbox.")
	g.list("deny", "mach-lookup", never)
	g.add("")
	g.add(";; IOKit: no device but power management; never the keyboard or input events.")
	g.deny("iokit-open")
	g.list("allow", "iokit-open", seatbeltAllowedIOKit)
	g.list("deny", "iokit-open", seatbeltDeniedIOKit)
	g.add("")
	g.add(";; Sockets: Unix, IPv4 and IPv6 only (the network rules below decide where they go);")
	g.add(";; no routing, kernel-control or raw families.")
	g.deny("system-socket")
	g.add("(allow system-socket (socket-domain AF_UNIX) (socket-domain AF_INET) (socket-domain AF_INET6))")
	if network == NetworkOpen {
		g.add(";; network: open: the kernel-control sockets the network stack queries")
		g.add("(allow system-socket (require-all (socket-domain AF_SYSTEM) (socket-protocol 2)))")
	}
	g.add("")
	g.add(";; No mounts (a disk image over a folder outside changes what runs later), no NVRAM,")
	g.add(";; no camera or microphone, no synthetic input.")
	g.deny("file-mount file-mount-update file-unmount")
	g.deny("nvram*")
	g.deny("device-camera device-microphone")
	g.deny("hid-control")
	g.add(";; No apps, Apple Events, launchd jobs or preference writes on the step's behalf.")
	g.deny("appleevent-send")
	g.deny("lsopen")
	g.deny("job-creation")
	g.deny("user-preference-write")
}

// files: no writes but the plan's writable paths, no terminal but the
// step's own, the macOS places no plan names, then the plan's mounts.
func (g *sbGen) files(p *Plan, opt SeatbeltOptions) error {
	g.add("")
	g.add(";; Files: no writes but the plan's writable paths; the plan's mounts follow in order.")
	g.deny("file-write*")
	var devs []string
	for _, d := range seatbeltDevices {
		devs = append(devs, fmt.Sprintf("(literal %q)", d))
	}
	g.add("(allow file-write* %s (subpath \"/dev/fd\"))", strings.Join(devs, " "))
	// Terminals are the user's: a step that opened one could read the
	// keys typed into it or push its own. The controlling terminal
	// (/dev/tty) is denied too unless it is the step's own pty.
	g.add(";; Terminals: none but the step's own pseudo-terminal and those it opens itself.")
	// /dev/tty is named once, in the rule that decides it, so no reading of
	// the rule order can turn it around.
	const terminals = `(regex #"^/dev/ttys[0-9]+$") (regex #"^/dev/pty") (regex #"^/dev/(tty|cu)[.]") (literal "/dev/console")`
	if opt.TTY == "" {
		g.deny("file-read* file-write* file-ioctl", `(literal "/dev/tty")`, terminals)
	} else {
		t, err := checkPath(opt.TTY)
		if err != nil {
			return err
		}
		g.deny("file-read* file-write* file-ioctl", terminals)
		g.add(`(allow file-read* file-write* file-ioctl (literal "/dev/tty") %s)`, g.filters("literal", t))
	}
	// The kernel gives the process that opens a new pty (openpty, script,
	// expect) an extension for its terminal side; no other process holds
	// it, so this reaches no terminal of the user's.
	g.add(`(allow file-read* file-write* file-ioctl (require-all (regex #"^/dev/ttys[0-9]+$") (extension "com.apple.sandbox.pty")))`)
	g.add(";; macOS: other programs' temp and cache folders, and the data volume's second spelling")
	for _, h := range seatbeltExtraHidden {
		g.hide(h)
	}
	if opt.UserTempDir != "" {
		t, err := checkPath(opt.UserTempDir)
		if err != nil {
			return err
		}
		// Only its name answers stat: confstr checks the folder exists.
		// Nothing in it is readable or writable: a cache there (xcrun's)
		// is read by programs outside the sandbox.
		g.statOnly = append(g.statOnly, t)
	}

	for i, m := range p.Mounts {
		if err := g.mount(i, m); err != nil {
			return err
		}
	}

	g.add("")
	g.add(";; Folders that lead to visible paths inside hidden ones: their metadata only (realpath, getcwd).")
	anc := g.visibleAncestors()
	if len(anc) > 0 {
		g.add("(allow file-read-metadata %s)", g.filters("literal", anc...))
	}
	return nil
}

// mount translates one plan mount. The comment names the op and the
// mount's index, never its path or reason (they are plan text).
func (g *sbGen) mount(i int, m Mount) error {
	if m.Op == "symlink" {
		// A system folder's link (Linux's merged /usr): the system is
		// readable as it is on macOS.
		return nil
	}
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
		// Cloning a file it may read is copying it; the write at the
		// clone's destination is decided there.
		g.add("(allow file-read* file-clone %s)", g.filters("subpath", paths...))
		g.deny("file-write* file-link", g.filters("subpath", paths...))
		g.protected = append(g.protected, paths...)
		g.see(paths...)
	case "bind":
		g.add(";; mount %d: writable", i)
		paths := []string{dst}
		if src != "" && src != dst {
			paths = append(paths, src)
		}
		g.add("(allow file-read* file-write* file-link file-clone %s)", g.filters("subpath", paths...))
		g.see(paths...)
		g.writable = append(g.writable, paths...)
	case "empty-file":
		// A protected file that does not exist: nothing may create it.
		g.add(";; mount %d: read-only (missing file)", i)
		g.deny("file-write* file-link", g.filters("subpath", dst))
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
		g.deny("file-write* file-link", g.filters("subpath", dst))
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
	g.deny("file-read* file-write* file-link file-clone", g.filters("subpath", p))
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
	// add puts from and the folders above it, up to and with top, outermost first.
	add := func(from, top string) {
		var chain []string
		for d := from; within(top, d); d = filepath.Dir(d) {
			chain = append(chain, d)
			if d == top || d == "/" {
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
	for _, v := range g.visible {
		for _, h := range g.hidden {
			if h.seq > v.seq || v.path == h.path || !within(h.path, v.path) {
				continue
			}
			add(filepath.Dir(v.path), h.path)
		}
	}
	// A stat-only path answers stat itself, as do the folders between it
	// and the hidden folder it is in.
	for _, s := range g.statOnly {
		for _, h := range g.hidden {
			if within(h.path, s) {
				add(s, h.path)
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
		g.deny("network-outbound", `(remote unix-socket (path-regex #"^/"))`)
		g.deny("network-bind", `(local unix-socket (path-regex #"^/"))`)
		g.add(`(allow network-outbound (remote unix-socket (path-literal "/private/var/run/mDNSResponder")) (remote unix-socket (path-literal "/var/run/mDNSResponder")))`)
	default:
		g.deny("network*")
		if mode == NetworkAllowlist {
			g.add(";; the egress lease's loopback port: the only way out (no DNS: its services are refused above)")
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
	"A protected path and every folder above it cannot be renamed or removed, so none can be moved out of reach and replaced; a protected or hidden file cannot be hard-linked or cloned.",
	"The real home, ~/.ssh, ~/.gnupg, ~/.aws and other credential folders, kusaw's secret store and key folders, the repositories' own checkouts, /tmp and other apps' temp folders (/private/var/folders, xcrun's cache included) cannot be read, nor reached by the data volume's spelling (/System/Volumes/Data/...).",
	"Each attempt gets a fresh, empty HOME inside its temp folder, removed with it; the agent signs in with a token kept as a step secret.",
	"Network: in allowlist mode only the egress lease's loopback port is reachable: no DNS (mDNSResponder's socket and Mach services are refused), no daemon that fetches for the step (trustd, ocspd, nsurlsessiond), no other local port; Unix sockets only inside the writable paths, so ssh-agent, Docker and similar sockets stay outside.",
	"System services start from deny: Mach services, IOKit devices, socket families, mounts, NVRAM and sysctl reads and writes are refused but for a short list, each entry with its reason (docs/sandbox-macos.md). Refused by name whatever the list says: the Keychain and other credential stores, LaunchServices and its database (no app in the worktree registered as a URL handler), CoreServices, Apple Events, the pasteboard, background URL sessions, launchd jobs and login items, DiskArbitration and disk images (no mounting over a folder outside), the window server and screen recording, Location Services, the camera and microphone, privacy prompts, the keyboard's HID devices, whatever permissions your terminal holds.",
	"Signals, process details and task ports only reach the sandbox's own processes: no debugger attaches to a process outside; the command lines of other processes cannot be read.",
	"Terminals: the step cannot open /dev/tty or any other terminal of yours (reading your keys or pushing its own); with a terminal it gets a pseudo-terminal of its own that kusaw relays, and it may open new ones for itself.",
	"Every refusal is logged with the message \"kusaw\", so `log stream --predicate 'eventMessage CONTAINS \"kusaw\"'` shows what a failing tool was refused.",
	"sandbox-exec is taken only from /usr/bin/sandbox-exec, root-owned and not writable by others, never through PATH.",
}

// SeatbeltNotProtected is what the macOS backend does not protect.
var SeatbeltNotProtected = []string{
	"Kernel escapes: a shared-kernel process sandbox, weaker than a VM.",
	"File reads outside the hidden paths: reads start from allow (the system, tools, the worktree); the home is hidden whole, but a secret outside it that file permissions let you read (in /opt, /usr/local, /Library, /Volumes) is readable.",
	"The services on the allow list (directory lookups, preferences reads, logging, notifications, power assertions, the temp-folder helper; with network open also DNS, network configuration and certificate checks): a flaw in one of them is a way out, and notify(3) lets a step post notices that programs outside watch.",
	"Not yet run on a Mac: the profile is proven by goldens and a rule evaluator on Linux; the first-run checklist in docs/sandbox-macos.md is what a Mac must confirm.",
	"Process listing: there is no PID namespace; other processes' ids and names can be listed (kern.proc.all, which pgrep and tree-kill need), although they cannot be signalled, inspected or debugged. Paths outside the sandbox can be checked for existence, size and dates where their folder is not hidden.",
	"Detached processes: a process that calls setsid survives the attempt, still under the profile.",
	"The network when network is open: every host and every service on the host's localhost.",
	"The agent's login token, which is in that step's environment.",
	"Tools that ignore HTTP(S)_PROXY fail closed in allowlist mode; clients on IPv6 dual-stack sockets may not reach the proxy (Seatbelt's localhost does not match ::ffff:127.0.0.1).",
	"TLS verified by macOS itself (Go programs, Security.framework, Rust's native-tls) fails in allowlist and none modes: trustd, which would fetch for it, is refused. Tools with their own CA bundle (curl, git, Node, Python) work.",
	"Tools that need a service off the list (GUI frameworks, fonts, audio, the GPU, Spotlight, possibly x86_64 programs under Rosetta) fail; the refusal is in the system log, tagged \"kusaw\".",
	"Tools that ignore TMPDIR fail: /tmp is not writable (Linux gives an empty private /tmp; macOS cannot).",
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
	// Parsed by hand, not with net or net/netip: they would make kusaw
	// sandbox exec initialise more before it starts (cmd/kusaw/early).
	i := strings.LastIndexByte(addr, ':')
	if i < 0 || (addr[:i] != "127.0.0.1" && addr[:i] != "[::1]") {
		return nil, refuse("lease the proxy on 127.0.0.1:0", "lease address %q is not 127.0.0.1 or ::1; the macOS profile admits only localhost", addr)
	}
	port := addr[i+1:]
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strings.TrimLeft(port, "0123456789") != "" {
		return nil, refuse("lease the proxy on 127.0.0.1:0", "lease address %q has no usable port", addr)
	}
	return &Proxy{Port: n, Env: append([]string(nil), env...)}, nil
}
