package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"github.com/kusaw/kusaw/sandbox/confine"
)

// Layer is one protection layer of the Linux backend on this machine, as
// `kusaw sandbox check --verbose` prints it: active or missing, and why.
type Layer struct {
	Name   string `json:"name"`
	Active bool   `json:"active"`
	Detail string `json:"detail"`
}

// KernelLayers reports the namespaces, the seccomp filter, Landlock and the
// session keyring for an attempt started by this program on this machine.
// ns is the result of Check (its namespace probe); nil for another backend.
func KernelLayers(ns CheckResult) []Layer {
	if runtime.GOOS != "linux" || ns.Backend != "bubblewrap" {
		return nil
	}
	var out []Layer
	nsl := Layer{Name: "namespaces"}
	if ns.Available {
		nsl.Active = true
		nsl.Detail = "new user, PID, IPC, UTS and cgroup namespaces and, unless network is open, a private network namespace; no capabilities"
		if disableUsernsSupported(ns.Path) {
			nsl.Detail += "; nested user namespaces disabled"
		} else {
			nsl.Detail += "; nested user namespaces NOT disabled (bubblewrap " + ns.Version + " is older than 0.8)"
		}
	} else {
		nsl.Detail = "bubblewrap cannot start here: " + ns.Msg
	}
	out = append(out, nsl)

	sc := Layer{Name: "seccomp"}
	if prog, err := SeccompFilter(); err != nil {
		sc.Detail = err.Error() + ": attempts are refused"
	} else {
		sc.Active = true
		sc.Detail = fmt.Sprintf("an allowlist of system calls (%d BPF instructions, %s): keyctl, add_key, request_key, userfaultfd, perf_event_open, bpf, mounts, setns, new namespaces, kexec, modules, ptrace attach, personality flags and socket families other than AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE refused; io_uring and unknown calls get ENOSYS",
			len(prog)/8, runtime.GOARCH)
	}
	out = append(out, sc)

	stage := confineProgram()
	ll := Layer{Name: "landlock"}
	abi, err := confine.LandlockABI()
	switch {
	case abi < 1:
		ll.Detail = fmt.Sprintf("not available: %v; writes are held by the read-only mounts alone", err)
	case stage == nil:
		gap, stop := confineGap()
		ll.Detail = fmt.Sprintf("the kernel has ABI %d, but %s", abi, gap[strings.Index(gap, ": ")+2:])
		if stop {
			ll.Detail += ": attempts are refused"
		}
	default:
		ll.Active = true
		ll.Detail = fmt.Sprintf("ABI %d: writes only beneath the plan's writable paths", abi)
		if abi >= 6 {
			ll.Detail += "; signals and abstract Unix sockets scoped to the sandbox"
		} else {
			ll.Detail += "; signals and abstract Unix sockets NOT scoped (that needs ABI 6, Linux 6.12)"
		}
		ll.Detail += " (run by " + stage[0] + ")"
	}
	out = append(out, ll)

	kr := Layer{Name: "keyring"}
	_, keysErr := os.Stat("/proc/keys")
	switch {
	case keysErr != nil:
		kr.Active = true
		kr.Detail = "the kernel has no key store: there is no session keyring to share"
	case stage == nil:
		kr.Detail = "no confinement stage in this program: the step inherits the host's session keyring (seccomp still refuses every keyctl call on it)"
		if _, stop := confineGap(); stop {
			kr.Detail += "; attempts are refused (the program it was given is missing)"
		}
	default:
		kr.Active = true
		kr.Detail = "a new anonymous session keyring per attempt; keyctl, add_key and request_key refused by seccomp; /proc/keys shows empty"
	}
	out = append(out, kr)
	return out
}

// WriteLayerState is check --verbose's line for the write layer
// (repos.NAME.write_layer: overlay): whether an overlay over a worktree
// can be mounted here for layers made in dir (CheckLayer, which mounts
// one and runs bwrap on it). Not active is no fault of the sandbox: repos
// with a write layer are then refused, the others run as before.
func WriteLayerState(dir string) Layer {
	l := Layer{Name: "write-layer"}
	if err := CheckLayer(dir); err != nil {
		l.Detail = err.Error() + " (checked in " + dir + "): repos with write_layer: overlay are refused here"
		return l
	}
	l.Active = true
	l.Detail = "an overlay over the worktree can be mounted (checked in " + dir + "), for repos with write_layer: overlay: the step's changes go to the layer, the tree stays as it was, kusaw-bridge mounts it before bwrap and the sandbox holds no capability"
	return l
}
