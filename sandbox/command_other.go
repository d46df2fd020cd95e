//go:build !linux && !darwin

package sandbox

import (
	"context"
	"os/exec"
	"time"

	"github.com/kusaw/kusaw/status"
)

// GraceDelay is how long Command's process may take after SIGTERM before
// it is killed.
var GraceDelay = 5 * time.Second

// Command is not available here: the bubblewrap backend is Linux only (the
// Seatbelt backend is macOS only).
func Command(ctx context.Context, p *Plan, argv []string) (*exec.Cmd, error) {
	return nil, &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: "no sandbox backend on this system in this build",
		Fix: "run on Linux or WSL2 with bubblewrap, or set the step's sandbox to off"}
}
