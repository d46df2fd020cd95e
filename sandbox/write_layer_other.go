//go:build !linux

package sandbox

import (
	"os/exec"
	"runtime"

	"github.com/kusaw/kusaw/status"
)

// wrapLayers: plans have no write layers off Linux (writeLayer refuses them).
func (p *Plan) wrapLayers(*exec.Cmd) error { return nil }

// CheckLayer: the write layer is an overlay mount, Linux's.
func CheckLayer(string) error {
	return &status.Error{Reason: status.ReasonSandboxUnavailable, Msg: "sandbox: the write layer is an overlay mount, which " + runtime.GOOS + " lacks",
		Fix: "set the repo's write_layer: none on " + runtime.GOOS}
}
