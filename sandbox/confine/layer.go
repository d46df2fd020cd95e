package confine

import (
	"fmt"
	"path/filepath"
	"strings"
)

// LayerSubcommand selects the write-layer stage. It runs outside the
// sandbox, before bwrap, in a user and mount namespace of kusaw's own
// (made by the process start, which also hands it CAP_SYS_ADMIN and
// CAP_DAC_OVERRIDE there as ambient capabilities): it mounts one overlay
// per layer on its worktree's path, lets go of the capabilities and execs
// bwrap, whose binds of the worktree then show the overlay. bwrap 0.8 has
// no --overlay, and inside bwrap its seccomp filter and Landlock forbid
// mounts; here the sandbox never holds a capability, never sees the
// layer's folders, and its filters stay as they are. kusaw-bridge built
// with cgo does it in C before its Go runtime starts
// (cmd/kusaw-bridge/stage_cgo.go, held to RunLayer by
// TestLayerStageImplementationsAgree): a change here goes there too.
const LayerSubcommand = "__layer"

// ExitLayer is the exit status when a layer could not be mounted: the
// step does not run (without its layer the worktree would be the tree
// itself, which a reused tree must not be).
const ExitLayer = ExitSetup

// Layer is one overlay: the worktree's path (the lower layer, and where
// the overlay is mounted), the upper folder that receives every change,
// and overlayfs's work folder (empty, on the upper's filesystem).
type Layer struct {
	Tree  string `json:"tree"`
	Upper string `json:"upper"`
	Work  string `json:"work"`
}

const layerUsage = "usage: __layer [-l TREE UPPER WORK]... -- BWRAP [ARG...]"

// LayerArgs is the stage's argv after its program: the subcommand, one
// "-l TREE UPPER WORK" per layer, "--" and the command (bwrap's path and
// arguments).
func LayerArgs(layers []Layer, argv []string) []string {
	a := []string{LayerSubcommand}
	for _, l := range layers {
		a = append(a, "-l", l.Tree, l.Upper, l.Work)
	}
	a = append(a, "--")
	return append(a, argv...)
}

// ParseLayer reads the stage's arguments (after the subcommand).
func ParseLayer(args []string) ([]Layer, []string, error) {
	var ls []Layer
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-l":
			if i+3 >= len(args) {
				return nil, nil, &Error{ExitLayer, "layer: -l needs TREE UPPER WORK (" + layerUsage + ")"}
			}
			l := Layer{Tree: args[i+1], Upper: args[i+2], Work: args[i+3]}
			if _, err := l.Options(); err != nil {
				return nil, nil, err
			}
			ls = append(ls, l)
			i += 3
		case "--":
			argv := args[i+1:]
			if len(argv) == 0 || !filepath.IsAbs(argv[0]) {
				return nil, nil, &Error{ExitLayer, "layer: the command after -- must be an absolute path (" + layerUsage + ")"}
			}
			if len(ls) == 0 {
				return nil, nil, &Error{ExitLayer, "layer: no -l TREE UPPER WORK (" + layerUsage + ")"}
			}
			return ls, argv, nil
		default:
			return nil, nil, &Error{ExitLayer, fmt.Sprintf("layer: unknown argument %q (%s)", args[i], layerUsage)}
		}
	}
	return nil, nil, &Error{ExitLayer, "layer: no -- before the command (" + layerUsage + ")"}
}

// Options is the overlay's mount data. userxattr: the kernel mounts an
// overlay in a user namespace only with it (whiteouts are then character
// devices 0/0, opaque folders carry user.overlay.opaque=y), and it
// refuses redirect_dir, so renaming a folder of the lower layer fails with
// EXDEV (mv copies instead; git mv of a folder fails).
func (l Layer) Options() (string, error) {
	for _, p := range []string{l.Tree, l.Upper, l.Work} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return "", &Error{ExitLayer, fmt.Sprintf("layer: %q is not a clean absolute path", p)}
		}
		// The kernel splits its options at commas and lower layers at
		// colons; a backslash escapes either. None may be in a path.
		if strings.ContainsAny(p, ",:\\\n") {
			return "", &Error{ExitLayer, fmt.Sprintf("layer: %q holds a comma, colon, backslash or newline, which overlay's mount options cannot carry; use a state_dir and worktree path without them", p)}
		}
	}
	return "lowerdir=" + l.Tree + ",upperdir=" + l.Upper + ",workdir=" + l.Work + ",userxattr", nil
}
