package sandbox

import (
	"os"
	"strings"
	"testing"
)

// The gaps of issue #18, one test each, asked of the profile of every
// network mode: the attack is refused, and its legitimate twin still works.
// e2e/escape_darwin_test.go asks the same of a real Mac.

type modeProfile struct {
	mode string
	pol  *sbPolicy
	text string
}

// modeProfiles are the agent plan's profile in each network mode.
func modeProfiles(t *testing.T) []modeProfile {
	t.Helper()
	var out []modeProfile
	for _, c := range []struct {
		mode string
		opt  SeatbeltOptions
	}{
		{NetworkNone, SeatbeltOptions{LocalBind: true}},
		{NetworkAllowlist, SeatbeltOptions{Ports: []int{49152}, UserTempDir: "/private/var/folders/xy/abc123/T"}},
		{NetworkOpen, SeatbeltOptions{TTY: "/dev/ttys004"}},
	} {
		prof, err := agentPlan(c.mode).Seatbelt(c.opt)
		if err != nil {
			t.Fatalf("%s: %v", c.mode, err)
		}
		out = append(out, modeProfile{c.mode, loadPolicy(t, prof), prof.Text})
	}
	return out
}

type verdict struct {
	what      string
	got, want bool
}

func checkVerdicts(t *testing.T, mode string, vs []verdict) {
	t.Helper()
	for _, v := range vs {
		if v.got != v.want {
			t.Errorf("%s: %s: allowed=%v, want %v", mode, v.what, v.got, v.want)
		}
	}
}

// Gap 1: the resolver reaches mDNSResponder through a Mach service too,
// not only its socket: outside open, a lookup of <secret>.attacker.example
// would leave the machine.
func TestSeatbeltGapDNS(t *testing.T) {
	for _, m := range modeProfiles(t) {
		open := m.mode == NetworkOpen
		checkVerdicts(t, m.mode, []verdict{
			{"DNS through com.apple.dnssd.service", m.pol.canLookup("com.apple.dnssd.service"), open},
			{"DNS through mDNSResponder's own service", m.pol.canLookup("com.apple.mDNSResponder"), false},
			{"DNS through mDNSResponder's socket", m.pol.canConnectUnix("/private/var/run/mDNSResponder"), open},
			{"the resolver's configuration", m.pol.canLookup("com.apple.SystemConfiguration.DNSConfiguration"), open},
			{"user lookups (the twin: not DNS)", m.pol.canLookup("com.apple.system.opendirectoryd.libinfo"), true},
		})
	}
}

// Gap 2: /System/Volumes/Data/Users/dev/.ssh is ~/.ssh under another
// spelling; the plan's rules name one spelling only.
func TestSeatbeltGapDataVolume(t *testing.T) {
	const data = "/System/Volumes/Data"
	for _, m := range modeProfiles(t) {
		checkVerdicts(t, m.mode, []verdict{
			{"read ~/.ssh by the data volume", m.pol.canRead(data + tHome + "/.ssh/id_ed25519"), false},
			{"stat it", m.pol.canStat(data + tHome + "/.ssh/id_ed25519"), false},
			{"read the user's .env by the data volume", m.pol.canRead(data + tRepo + "/.env"), false},
			{"read the secret store by the data volume", m.pol.canRead(data + tStore + "/store.json"), false},
			{"read other apps' temp folders by the data volume", m.pol.canRead(data + "/private/var/folders/xy/abc/T/x"), false},
			{"write .git/config by the data volume", m.pol.canWrite(data + tCommon + "/config"), false},
			{"write .claude/settings.json by the data volume", m.pol.canWrite(data + tWT + "/.claude/settings.json"), false},
			{"write /tmp by the data volume", m.pol.canWrite(data + "/private/tmp/x"), false},
			{"hard-link ~/.ssh by the data volume", m.pol.canLink(data + tHome + "/.ssh/id_ed25519"), false},
			{"clone ~/.ssh by the data volume", m.pol.allowed(query{op: "file-clone", path: data + tHome + "/.ssh/id_ed25519"}), false},
			// The twin: the usual spelling works.
			{"read the worktree", m.pol.canRead(tWT + "/README.md"), true},
			{"write the worktree", m.pol.canWrite(tWT + "/src/main.go"), true},
		})
	}
	// A plan path that is itself on the data volume (allow_read names it
	// so) is readable: the plan's rules come after the volume's.
	p := agentPlan(NetworkNone)
	p.Mounts = append(p.Mounts, Mount{Op: "ro-bind", Src: data + "/shared", Dst: data + "/shared", Reason: "allow_read"})
	prof, err := p.Seatbelt(SeatbeltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, prof)
	if !pol.canRead(data+"/shared/f") || pol.canWrite(data+"/shared/f") || pol.canRead(data+"/Users/dev/.ssh/x") {
		t.Errorf("a plan path on the data volume: read %v write %v", pol.canRead(data+"/shared/f"), pol.canWrite(data+"/shared/f"))
	}
}

// Gap 3: a disk image mounted over a folder outside the sandbox changes
// what runs later without writing a file.
func TestSeatbeltGapMount(t *testing.T) {
	for _, m := range modeProfiles(t) {
		var vs []verdict
		for _, target := range []string{tHome + "/Library/LaunchAgents", tCommon + "/hooks", tWT + "/mnt", tTmp + "/mnt", "/Volumes/x"} {
			for _, op := range []string{"file-mount", "file-mount-update", "file-unmount"} {
				vs = append(vs, verdict{op + " " + target, m.pol.allowed(query{op: op, path: target}), false})
			}
		}
		vs = append(vs,
			verdict{"DiskArbitration", m.pol.canLookup("com.apple.DiskArbitration.diskarbitrationd"), false},
			verdict{"the disk image helper", m.pol.canLookup("com.apple.diskimagesiod"), false},
			verdict{"the twin: make a folder where the image would go", m.pol.canWrite(tWT + "/mnt/x"), true},
		)
		checkVerdicts(t, m.mode, vs)
	}
}

// Gap 4: trustd and ocspd fetch the AIA, OCSP and CRL addresses of a
// certificate the caller hands them: a network path outside the proxy.
func TestSeatbeltGapFetchingDaemons(t *testing.T) {
	for _, m := range modeProfiles(t) {
		open := m.mode == NetworkOpen
		checkVerdicts(t, m.mode, []verdict{
			{"trustd", m.pol.canLookup("com.apple.trustd"), open},
			{"trustd's agent", m.pol.canLookup("com.apple.trustd.agent"), open},
			{"ocspd", m.pol.canLookup("com.apple.ocspd"), open},
			{"networkd", m.pol.canLookup("com.apple.networkd"), open},
			{"background URL sessions, even open", m.pol.canLookup("com.apple.nsurlsessiond"), false},
			{"the Keychain, even open", m.pol.canLookup("com.apple.SecurityServer"), false},
		})
	}
}

// Gap 5: launching outside the sandbox: an app in the worktree registered
// as a URL or file handler, XPC services launchd starts, CoreServices, the
// quarantine resolver.
func TestSeatbeltGapLaunching(t *testing.T) {
	for _, m := range modeProfiles(t) {
		checkVerdicts(t, m.mode, []verdict{
			{"register an app (lsregister)", m.pol.canLookup("com.apple.lsd.modifydb"), false},
			{"LaunchServices' database", m.pol.canLookup("com.apple.lsd.mapdb"), false},
			{"LaunchServices", m.pol.canLookup("com.apple.coreservices.launchservicesd"), false},
			{"CoreServices", m.pol.canLookup("com.apple.CoreServices.coreservicesd"), false},
			{"the quarantine resolver", m.pol.canLookup("com.apple.coreservices.quarantine-resolver"), false},
			{"an XPC service of an installed app", m.pol.canLookup("com.docker.vmnetd"), false},
			{"an XPC service of the system", m.pol.canLookup("com.apple.xpc.launchd.domain.system"), false},
			{"open an app", m.pol.allowed(query{op: "lsopen"}), false},
			{"a launchd job", m.pol.allowed(query{op: "job-creation"}), false},
			{"the twin: run a program", m.pol.allowed(query{op: "process-exec", path: tWT + "/bin/tool"}), true},
			{"the twin: fork", m.pol.allowed(query{op: "process-fork"}), true},
		})
	}
}

// Gap 6: a task port is the whole process (lldb -p); only the sandbox's
// own processes.
func TestSeatbeltGapTaskPorts(t *testing.T) {
	for _, m := range modeProfiles(t) {
		checkVerdicts(t, m.mode, []verdict{
			{"the task port of a process outside", m.pol.allowed(query{op: "mach-priv-task-port"}), false},
			{"the task name port of a process outside", m.pol.allowed(query{op: "mach-task-name"}), false},
			{"the host's privileged port", m.pol.allowed(query{op: "mach-priv-host-port"}), false},
			{"signal a process outside", m.pol.allowed(query{op: "signal"}), false},
			{"inspect a process outside", m.pol.allowed(query{op: "process-info-pidinfo"}), false},
			{"the twin: a task port within the sandbox (a debugger on its own child)", m.pol.allowed(query{op: "mach-priv-task-port", target: "same-sandbox"}), true},
			{"the twin: task name within", m.pol.allowed(query{op: "mach-task-name", target: "same-sandbox"}), true},
			{"the twin: signal within", m.pol.allowed(query{op: "signal", target: "same-sandbox"}), true},
			{"the twin: inspect within", m.pol.allowed(query{op: "process-info-pidinfo", target: "same-sandbox"}), true},
		})
	}
}

// Gap 7: devices and services the terminal was granted: camera,
// microphone, screen capture, location.
func TestSeatbeltGapDevices(t *testing.T) {
	for _, m := range modeProfiles(t) {
		checkVerdicts(t, m.mode, []verdict{
			{"the camera", m.pol.allowed(query{op: "device-camera"}), false},
			{"the microphone", m.pol.allowed(query{op: "device-microphone"}), false},
			{"cameras through CoreMediaIO", m.pol.canLookup("com.apple.cmio.registerassistantservice"), false},
			{"audio (coreaudiod)", m.pol.canLookup("com.apple.audio.audiohald"), false},
			{"screen capture (the window server)", m.pol.canLookup("com.apple.windowserver.active"), false},
			{"screen recording (replayd)", m.pol.canLookup("com.apple.replayd"), false},
			{"location", m.pol.canLookup("com.apple.locationd.registration"), false},
			{"privacy prompts", m.pol.canLookup("com.apple.tccd"), false},
			{"synthetic input", m.pol.allowed(query{op: "hid-control"}), false},
			{"the keyboard", m.pol.allowed(query{op: "iokit-open", iokit: "IOHIDLibUserClient"}), false},
		})
	}
}

// Gap 8 is TestSeatbeltUserTempDir; gap 9 is TestSBPLEvaluator, and every
// query of these tests is also asked in plain order (allowed reports a
// difference). TestSeatbeltReadingsAgree asks it of every path the
// profiles name.
func TestSeatbeltReadingsAgree(t *testing.T) {
	for _, c := range goldenCases() {
		prof, err := c.plan.Seatbelt(c.opt)
		if err != nil {
			t.Fatal(err)
		}
		pol := loadPolicy(t, prof)
		n := 0
		for _, p := range prof.Params {
			for _, q := range []string{p.Value, p.Value + "/x"} {
				for _, op := range []string{"file-read-data", "file-read-metadata", "file-write-data", "file-write-create",
					"file-write-unlink", "file-link", "file-clone", "file-ioctl", "file-mount"} {
					pol.allowed(query{op: op, path: q})
					n++
				}
				pol.canConnectUnix(q)
				pol.canBindUnix(q)
			}
		}
		if n < 200 {
			t.Errorf("%s: only %d queries", c.name, n)
		}
	}
}

// TestSeatbeltServices: every allowed service, device and sysctl is
// allowed in every mode, with a reason; the network's services only when
// the network is open; everything else refused.
func TestSeatbeltServices(t *testing.T) {
	for _, list := range [][]sbEntry{seatbeltAllowedServices, seatbeltOpenNetworkServices, seatbeltAllowedIOKit, seatbeltSysctlWrites} {
		for _, s := range list {
			if s.why == "" {
				t.Errorf("%s %s has no reason", s.filter, s.arg)
			}
		}
	}
	for _, s := range seatbeltDeniedServices {
		if s.why == "" {
			t.Errorf("%s has no reason", s.arg)
		}
	}
	lookup := func(pol *sbPolicy, s sbEntry) bool {
		return pol.allowed(query{op: "mach-lookup", mach: s.arg, machLocal: s.filter == "local-name"})
	}
	for _, m := range modeProfiles(t) {
		open := m.mode == NetworkOpen
		var vs []verdict
		for _, s := range seatbeltAllowedServices {
			vs = append(vs, verdict{"service " + s.arg, lookup(m.pol, s), true})
		}
		for _, s := range seatbeltOpenNetworkServices {
			vs = append(vs, verdict{"network service " + s.arg, lookup(m.pol, s), open})
		}
		for _, s := range seatbeltDeniedServices {
			name := s.arg
			if s.filter == "global-name-prefix" {
				name += ".anything"
			}
			onOpenList := false
			for _, o := range seatbeltOpenNetworkServices {
				onOpenList = onOpenList || o.arg == name
			}
			vs = append(vs, verdict{"refused service " + name, m.pol.canLookup(name), open && s.outsideOpen && onOpenList})
		}
		for _, s := range seatbeltAllowedIOKit {
			vs = append(vs, verdict{"IOKit " + s.arg, m.pol.allowed(query{op: "iokit-open", iokit: s.arg}), true})
		}
		for _, s := range seatbeltSysctlReads {
			name := s.arg
			if s.filter == "sysctl-name-prefix" {
				name += "1"
			}
			vs = append(vs, verdict{"read sysctl " + name, m.pol.allowed(query{op: "sysctl-read", sysctl: name}), true})
		}
		for _, s := range seatbeltSysctlWrites {
			vs = append(vs, verdict{"write sysctl " + s.arg, m.pol.allowed(query{op: "sysctl-write", sysctl: s.arg}), true})
		}
		vs = append(vs,
			// Mach services off every list.
			verdict{"a service on no list", m.pol.canLookup("com.example.unknown"), false},
			verdict{"AirDrop (sends files off the machine)", m.pol.canLookup("com.apple.sharingd"), false},
			verdict{"iCloud", m.pol.canLookup("com.apple.cloudd"), false},
			verdict{"Spotlight's index (answers about hidden files)", m.pol.canLookup("com.apple.metadata.mds"), false},
			verdict{"the installer", m.pol.canLookup("com.apple.installd"), false},
			verdict{"fonts (not on the shared list)", m.pol.canLookup("com.apple.fonts"), false},
			verdict{"a local service on no list", m.pol.allowed(query{op: "mach-lookup", mach: "com.example.unknown", machLocal: true}), false},
			// IOKit off the list.
			verdict{"the disk's IOKit client", m.pol.allowed(query{op: "iokit-open", iokit: "AppleAPFSUserClient"}), false},
			verdict{"the GPU", m.pol.allowed(query{op: "iokit-open", iokit: "AGXDeviceUserClient"}), false},
			// sysctls off the lists.
			verdict{"other processes' command lines", m.pol.allowed(query{op: "sysctl-read", sysctl: "kern.procargs2"}), false},
			verdict{"...by the older name", m.pol.allowed(query{op: "sysctl-read", sysctl: "kern.procargs"}), false},
			verdict{"a sysctl on no list", m.pol.allowed(query{op: "sysctl-read", sysctl: "security.mac.amfi.developer_mode_status"}), false},
			verdict{"set the host name", m.pol.allowed(query{op: "sysctl-write", sysctl: "kern.hostname"}), false},
			// NVRAM.
			verdict{"read NVRAM", m.pol.allowed(query{op: "nvram-get"}), false},
			verdict{"write NVRAM", m.pol.allowed(query{op: "nvram-set"}), false},
			verdict{"delete NVRAM", m.pol.allowed(query{op: "nvram-delete"}), false},
			// Sockets.
			verdict{"a Unix socket", m.pol.allowed(query{op: "system-socket", domain: "AF_UNIX"}), true},
			verdict{"an IPv4 socket", m.pol.allowed(query{op: "system-socket", domain: "AF_INET"}), true},
			verdict{"an IPv6 socket", m.pol.allowed(query{op: "system-socket", domain: "AF_INET6"}), true},
			verdict{"a kernel-control socket", m.pol.allowed(query{op: "system-socket", domain: "AF_SYSTEM", protocol: 2}), open},
			verdict{"a kernel-event socket", m.pol.allowed(query{op: "system-socket", domain: "AF_SYSTEM", protocol: 1}), false},
			verdict{"a routing socket", m.pol.allowed(query{op: "system-socket", domain: "AF_ROUTE"}), false},
			verdict{"a raw link-layer socket", m.pol.allowed(query{op: "system-socket", domain: "AF_NDRV"}), false},
			// What stays allowed by default: the process's own work.
			verdict{"POSIX semaphores (Python multiprocessing)", m.pol.allowed(query{op: "ipc-posix-sem-open"}), true},
			verdict{"POSIX shared memory", m.pol.allowed(query{op: "ipc-posix-shm-read-data"}), true},
			verdict{"read preferences", m.pol.allowed(query{op: "user-preference-read"}), true},
			verdict{"write preferences", m.pol.allowed(query{op: "user-preference-write"}), false},
			verdict{"Apple Events", m.pol.allowed(query{op: "appleevent-send"}), false},
			// The pty: the step's own, and those it opens itself.
			verdict{"open a new pty", m.pol.canRead("/dev/ptmx") && m.pol.canWrite("/dev/ptmx"), true},
			verdict{"use the pty it opened", m.pol.allowed(query{op: "file-read-data", path: "/dev/ttys009", extension: "com.apple.sandbox.pty"}) &&
				m.pol.allowed(query{op: "file-ioctl", path: "/dev/ttys009", extension: "com.apple.sandbox.pty"}), true},
			verdict{"use the user's terminal", m.pol.canRead("/dev/ttys009") || m.pol.allowed(query{op: "file-ioctl", path: "/dev/ttys009"}), false},
			verdict{"/dev/null", m.pol.canWrite("/dev/null") && m.pol.canRead("/dev/null"), true},
		)
		checkVerdicts(t, m.mode, vs)
	}
}

// TestSeatbeltDenyMessages: every refusal is tagged, so `log stream`
// finds it; no allow is.
func TestSeatbeltDenyMessages(t *testing.T) {
	for _, m := range modeProfiles(t) {
		n := 0
		for _, r := range m.pol.rules {
			switch {
			case !r.allow && r.message != SeatbeltDenyMessage:
				t.Errorf("%s: a deny of %v without (with message %q)", m.mode, r.ops, SeatbeltDenyMessage)
			case r.allow && r.message != "":
				t.Errorf("%s: an allow of %v carries a message", m.mode, r.ops)
			case !r.allow:
				n++
			}
		}
		if n < 20 || !strings.Contains(m.text, `(with message "kusaw")`) {
			t.Errorf("%s: only %d tagged denies", m.mode, n)
		}
	}
}

// TestSeatbeltDocsNameEveryAllowed: docs/sandbox-macos.md names every
// service, IOKit class and sysctl write the profile allows, so the page
// cannot fall behind the lists.
func TestSeatbeltDocsNameEveryAllowed(t *testing.T) {
	b, err := os.ReadFile("../docs/sandbox-macos.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range [][]sbEntry{seatbeltAllowedServices, seatbeltOpenNetworkServices, seatbeltAllowedIOKit, seatbeltSysctlWrites} {
		for _, s := range list {
			if !strings.Contains(string(b), "`"+s.arg+"`") {
				t.Errorf("docs/sandbox-macos.md does not name %s, which the profile allows (%s)", s.arg, s.why)
			}
		}
	}
}
