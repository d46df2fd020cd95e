package sandbox

import (
	"os"
	"strconv"

	"github.com/kusaw/kusaw/status"
)

// filterArgs returns bwrap's arguments for the kernel filters of every
// Linux attempt and the files they read: the seccomp filter at descriptor
// fd (the next free one in the command). A step may not opt out, and a
// machine where the filter cannot be built refuses the attempt.
func filterArgs(p *Plan, fd int) ([]string, []*os.File, error) {
	f, err := seccompFile()
	if err != nil {
		return nil, nil, filterError(err)
	}
	return filterOpts(fd), []*os.File{f}, nil
}

// filterError is the refusal of a machine where the filter cannot be built.
func filterError(err error) error {
	return &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: "sandbox: " + err.Error(),
		Fix: "run kusaw on linux/amd64 or linux/arm64, or set the step's sandbox mode to off"}
}

// filterOpts are the filters' options, the seccomp filter read from fd.
func filterOpts(fd int) []string {
	args := []string{"--seccomp", strconv.Itoa(fd)}
	// /proc/keys lists every key the user may view (add_key gives the
	// owner view by default), the host's included, whatever the session
	// keyring: it shows empty, like Docker's. The bind is most of what the
	// filters cost a start (docs/benchmarks.md); /proc/key-users, only
	// counts per user, is left as it is.
	if _, err := os.Stat("/proc/keys"); err == nil {
		args = append(args, "--ro-bind", "/dev/null", "/proc/keys")
	}
	return args
}
