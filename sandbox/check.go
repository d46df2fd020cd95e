package sandbox

import (
	"bytes"
	"context"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/kusaw/kusaw/status"
)

// CheckResult says whether this machine can run the backend.
type CheckResult struct {
	Backend   string        `json:"backend"`
	Path      string        `json:"path,omitempty"`
	Version   string        `json:"version,omitempty"`
	Available bool          `json:"available"`
	Reason    status.Reason `json:"reason,omitempty"`
	Msg       string        `json:"message,omitempty"`
	Fix       string        `json:"fix,omitempty"`
	Notes     []string      `json:"notes,omitempty"` // weaker protections on this machine
}

// Err returns the result as a typed error, or nil when available: what a
// required attempt is refused with.
func (r CheckResult) Err() error {
	if r.Available {
		return nil
	}
	return &status.Error{Reason: r.Reason, Msg: r.Msg, Fix: r.Fix}
}

// Check finds a trusted bwrap, reads its version and starts it once with
// the namespaces every plan uses, so a machine where user namespaces are
// restricted (AppArmor, a container without them) is found before any
// attempt starts. It takes a few milliseconds; callers may cache it. On
// macOS it is CheckSeatbelt.
func Check() CheckResult {
	if runtime.GOOS == "darwin" {
		return CheckSeatbelt()
	}
	if runtime.GOOS != "linux" {
		return CheckResult{Backend: "none", Reason: status.ReasonSandboxUnavailable,
			Msg: "no sandbox backend for " + runtime.GOOS + " in this build",
			Fix: "run on Linux or WSL2 with bubblewrap, or set the step's sandbox to off"}
	}
	res := CheckResult{Backend: "bubblewrap"}
	p, err := FindBwrap()
	if err != nil {
		se := err.(*status.Error)
		res.Reason, res.Msg, res.Fix = se.Reason, se.Msg, se.Fix
		return res
	}
	res.Path = p
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p, "--version").Output()
	if err != nil {
		res.Reason, res.Msg, res.Fix = status.ReasonSandboxUnavailable, p+" --version failed: "+err.Error(), "reinstall bubblewrap from the system's packages"
		return res
	}
	res.Version = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "bubblewrap"))
	// The probe: the same namespaces and flags as a real plan.
	args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--", "/bin/true"}
	if disableUsernsSupported(p) {
		args = append([]string{"--unshare-user", "--disable-userns"}, args...)
	} else {
		res.Notes = append(res.Notes, "bubblewrap "+res.Version+" is older than 0.8: nested user namespaces cannot be disabled inside the sandbox")
	}
	probe := exec.CommandContext(ctx, p, args...)
	probe.Env = []string{}
	var stderr bytes.Buffer
	probe.Stderr = &stderr
	if err := probe.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		res.Reason = status.ReasonSandboxNoUserNS
		res.Msg = "bubblewrap cannot create its namespaces here: " + firstLine(msg)
		res.Fix = status.ReasonSandboxNoUserNS.Info().Fix
		return res
	}
	res.Available = true
	return res
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Protections is what the Linux backend protects, in kusaw's words
// (docs/architecture.md, "The sandbox and the seam with the host"); `kusaw sandbox check --verbose` prints it.
var Protections = []string{
	"Writes reach only the attempt's worktrees, the git folders they need (the attempt branch's ref folder, the worktree's own git folder, a private object folder for new git objects), artifacts/, the private temp folder (TMPDIR, XDG_CACHE_HOME, XDG_RUNTIME_DIR) and what allow_write names.",
	"The repositories' own git objects are read-only, loose objects included (git does not re-hash an object it reads, so a replaced one would change history other branches rely on): git writes new objects to the attempt's private object folder (GIT_OBJECT_DIRECTORY) and reads the repositories' as alternates; kusaw imports what the attempt's branch needs outside, with git index-pack --strict, so an object whose content does not match its name never gets in.",
	"Git control files stay read-only: config, config.worktree, hooks/, info/, packed-refs, modules/, commondir, worktrees/*/gitdir, the linked worktree's .git file. kusaw's own git runs outside.",
	"Settings that start programs later are read-only even inside a worktree: .claude/settings*.json, .claude/{hooks,commands,agents,skills}/, .cursor/, .mcp.json, .vscode/{tasks,settings}.json, .devcontainer/, .husky/, .codex/ and .gemini/ settings, and the folder core.hooksPath names. A missing one gets an empty read-only stand-in, removed after the step.",
	"The folders leading to those settings are bound on themselves, so they cannot be moved, removed or replaced; a protected path that is a symlink refuses the attempt; a hard link to a protected file fails (it is another mount).",
	"The view is an allowlist: the root starts empty and holds only the system folders (/usr, /bin, /sbin, /lib*, /etc; root's secrets hidden), the toolchains of the step's PATH, the files its command names, the attempt's worktrees and git folders, artifacts/, the temp folder, the login copies, allow_read and allow_write; then it is made read-only. /home, /root, /srv, /opt, /mnt, /media, /var, /run, /sys, other repositories and other factories' state folders do not exist inside. kusaw sandbox doctor prints the view with the origin of each entry.",
	"No mount covers one made before it: folders first, and at one path the writable mount before the read-only one, so a read-only path stays read-only whichever part of the plan added it.",
	"The agent's login folders are the attempt's own copies: its session state stays in the attempt, the folders of session state start empty (the user's other sessions stay outside), and the CLI installed there, settings*.json, CLAUDE.md, AGENTS.md, hooks/, commands/, agents/, skills/, plugins/, the scripts the settings name and every other existing folder are read-only from the original; a missing one is read-only and empty. Only the credentials file is carried back, as a refresh changes it: the step reached the CLI's token host (egress log), only the token fields changed and the expiry moved forward, a regular file of at most 64 KiB holding one JSON object; anything else keeps the user's file (sandbox.credentials says why).",
	"The real home, ~/.ssh, ~/.gnupg, ~/.aws and other credential folders, kusaw's secret store and key folders, and the repositories' own checkouts are not visible.",
	"No SSH or GPG agent socket, no D-Bus session bus, no other factory's serve socket and no other Unix socket of the host outside the view: /tmp is private and empty, /run and /var are not in it, and SSH_AUTH_SOCK, GPG_AGENT_INFO and DBUS_SESSION_BUS_ADDRESS are never passed.",
	"The environment is built, not inherited: a base set (PATH, HOME, USER, LOGNAME, LANG, LC_*, TERM, TZ), the step's own env, the temp variables and, in allowlist mode, the proxy variables.",
	"New user, PID, IPC, UTS, cgroup and (unless network is open) network namespaces; no capability survives, even when kusaw runs as root; no new privileges (setuid bits do nothing); --die-with-parent and --new-session, so nothing outlives the step and the terminal cannot be driven.",
	"A fresh /dev and /proc: host processes are invisible and cannot be signalled or traced.",
	"A seccomp filter on every attempt (an allowlist of system calls): the kernel key store, io_uring (ENOSYS), userfaultfd, perf_event_open, bpf, mounts, setns and new namespaces, kexec and modules, ptrace attach (a step traces only the children it starts), personality flags such as READ_IMPLIES_EXEC and socket families other than AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE (no AF_VSOCK, AF_PACKET, AF_ALG) are refused; a foreign architecture or x32 call kills the process.",
	"A fresh session keyring per attempt: the host's keys are neither readable nor writable, and /proc/keys shows empty.",
	"Landlock, where the kernel has it (check --verbose shows the ABI): writes only beneath the plan's writable paths whatever the mounts; from ABI 6 signals and abstract Unix sockets stay inside the sandbox.",
	"With a write layer (repos.NAME.write_layer: overlay) the worktree is an overlay: every change goes to the attempt's upper layer and the tree stays as it was; the protections inside the worktree hold as without it. The overlay is mounted before bwrap starts, in a user and mount namespace of kusaw's own, so the sandbox never holds a capability, and the layer's folders are not in the view.",
	"On WSL, /mnt and /run/WSL are not in the view and WSL_INTEROP is unset.",
	"bwrap is taken only from a root-owned, not world-writable /usr/bin, /usr/local/bin or /bin, never through PATH.",
}

// NotProtected is what the sandbox does not protect (docs/architecture.md, "The sandbox and the seam with the host").
var NotProtected = []string{
	"Kernel escapes: this is a shared-kernel sandbox; the seccomp filter takes away the interfaces most kernel escapes of recent years went through (io_uring, userfaultfd, eBPF, perf events, new namespaces, the key store), Docker's default profile and more, but the calls every program needs remain; the view narrows what a step can reach, not what it can ask of the kernel.",
	"The network when network is open: every host, including services on the host's localhost and abstract Unix sockets; the network capability is not_supported then.",
	"Login tokens an agent CLI must hold itself: the attempt's copy of its login folder has its credentials file.",
	"A protected file that a program outside the sandbox replaces or removes during the step (your own agent session rewriting its settings) loses its mount in the running sandbox.",
	"A repository the step creates inside its worktree is its own: its hooks and config are not protected; check it before running git there.",
	"Tools that ignore HTTP(S)_PROXY: in allowlist mode they fail closed (sandbox doctor lists the known ones as W1).",
	"The other attempt branches of the same step share the attempt's ref folder, which must be writable: during the step it can move, add or remove them. kusaw puts that folder back as it was when the step ends, and records the repair (worktree.refs_restored); a reader looking at the repository while the step runs may see the moved branch.",
	"The system folders and the toolchains of the step's PATH are readable (read-only); a Unix socket in one of them, or in what allow_read or allow_write names, is reachable (connecting needs no write access to its folder).",
	"Whatever sandbox.allow_read and sandbox.allow_write name.",
	"Under a write layer, renaming a folder that was already in the worktree fails with EXDEV (mv copies instead; git mv of a folder fails), and the overlay's mount options, which name the upper layer's path, show in /proc/self/mountinfo.",
}
