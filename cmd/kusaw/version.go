package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/kusaw/kusaw/sandbox"
)

// Stamped by make build through -ldflags -X; a plain go build leaves them
// empty and versionInfo falls back to what the Go toolchain recorded.
var (
	version  string // git describe of the tree, or a release tag
	commit   string // full commit id
	modified string // "true" when the tree had uncommitted changes
)

func init() { addCommand("version", newVersionCmd) }

// buildInfo is what a bug report needs to say which kusaw it is.
type buildInfo struct {
	Version   string `json:"version"`
	Commit    string `json:"commit,omitempty"`
	Modified  bool   `json:"modified"`
	Go        string `json:"go"`
	Platform  string `json:"platform"`
	Backend   string `json:"sandbox_backend"`
	Available bool   `json:"sandbox_available"`
	BackendV  string `json:"sandbox_backend_version,omitempty"`
}

// versionInfo prefers the make build stamps, then the VCS data the Go
// toolchain embeds (go install from a checkout), then the module version
// (go install module@version); with none of them it says devel.
func versionInfo() buildInfo {
	bi := buildVersion()
	r := sandbox.CachedCheck()
	bi.Backend, bi.Available, bi.BackendV = r.Backend, r.Available, r.Version
	return bi
}

// buildVersion is versionInfo without the sandbox's backend (no check).
func buildVersion() buildInfo {
	bi := buildInfo{Version: version, Commit: commit, Modified: modified == "true",
		Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && bi.Commit == "":
				bi.Commit = s.Value
			case s.Key == "vcs.modified" && modified == "":
				bi.Modified = s.Value == "true"
			}
		}
		if bi.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			bi.Version = info.Main.Version
		}
	}
	if bi.Version == "" {
		bi.Version = "devel"
	}
	return bi
}

func printVersion(w io.Writer, asJSON bool) {
	bi := versionInfo()
	if asJSON {
		b, _ := json.MarshalIndent(bi, "", "  ")
		fmt.Fprintln(w, string(b))
		return
	}
	fmt.Fprintf(w, "kusaw %s\n", bi.Version)
	c := bi.Commit
	if c == "" {
		c = "unknown"
	}
	if bi.Modified {
		c += " (modified)"
	}
	fmt.Fprintf(w, "commit:   %s\n", c)
	fmt.Fprintf(w, "go:       %s\n", bi.Go)
	fmt.Fprintf(w, "platform: %s\n", bi.Platform)
	sb := bi.Backend
	if bi.BackendV != "" {
		sb += " " + bi.BackendV
	}
	if bi.Available {
		sb += " (available)"
	} else {
		sb += " (not available: kusaw sandbox check says why)"
	}
	fmt.Fprintf(w, "sandbox:  %s\n", sb)
}

func newVersionCmd(a *app) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version [--json]",
		Short: "print kusaw's version, commit, Go version, platform and the sandbox backend found",
		Long: `Prints what a bug report needs: the version (a release tag, or git describe
of the tree make build ran in; devel for a build without stamps), the commit
and whether the tree had uncommitted changes, the Go version, the platform,
and the sandbox backend this machine has. kusaw --version prints the same.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, args []string) error {
			printVersion(a.stdout, asJSON)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print it as one JSON object")
	return c
}
