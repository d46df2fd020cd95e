//go:build !darwin

package sandbox

import (
	"context"
	"os"
	"os/exec"
	"runtime"

	"github.com/kusaw/kusaw/status"
)

// SeatbeltCmd is a step started under sandbox-exec; only macOS has one.
type SeatbeltCmd struct {
	*exec.Cmd
	Profile *SeatbeltProfile
	Home    string
}

// SeatbeltCommand is the macOS backend; elsewhere it refuses.
func SeatbeltCommand(ctx context.Context, p *Plan, argv []string, opt SeatbeltOptions, term *os.File) (*SeatbeltCmd, error) {
	return nil, &status.Error{Reason: status.ReasonSandboxUnavailable,
		Msg: "the seatbelt backend exists only on macOS, not on " + runtime.GOOS,
		Fix: "use the bubblewrap backend on Linux"}
}

// CheckSeatbelt reports the macOS backend as unavailable off macOS.
func CheckSeatbelt() CheckResult {
	return CheckResult{Backend: "seatbelt", Reason: status.ReasonSandboxUnavailable,
		Msg: "the seatbelt backend exists only on macOS, not on " + runtime.GOOS,
		Fix: "use the bubblewrap backend on Linux"}
}
