package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ProbeResult is one of doctor's sandbox probes (docs/sandbox.md: P1–P4; the
// egress probes P5–P7 belong to the proxy).
type ProbeResult struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Probes runs P1–P4 against a plan on this machine: P1 the backend binary
// is trusted, P2 its namespaces work, P3 a write outside the writable
// paths fails, P4 the home's secrets are hidden. P3 and P4 start the plan's
// sandbox once; nothing is left behind.
func Probes(ctx context.Context, p *Plan) []ProbeResult {
	c := Check()
	p1 := ProbeResult{ID: "P1", Name: "backend binary trusted", OK: c.Path != ""}
	p2 := ProbeResult{ID: "P2", Name: "namespaces usable", OK: c.Available}
	if p1.OK {
		p1.Detail = c.Path + " " + c.Version
	} else {
		p1.Detail = c.Msg + " (fix: " + c.Fix + ")"
	}
	if p2.OK {
		p2.Detail = "bwrap started with new user, PID, IPC, UTS and network namespaces"
	} else {
		p2.Detail = c.Msg + " (fix: " + c.Fix + ")"
	}
	p3 := ProbeResult{ID: "P3", Name: "a write outside the writable paths fails"}
	p4 := ProbeResult{ID: "P4", Name: "the home's secrets are hidden"}
	if !c.Available {
		p3.Detail, p4.Detail = "not run: the backend is unavailable", "not run: the backend is unavailable"
		return []ProbeResult{p1, p2, p3, p4}
	}
	// Targets: the attempt folder (its records) and the home.
	var targets []string
	if p.AttemptDir != "" {
		targets = append(targets, filepath.Join(p.AttemptDir, ".kusaw-probe-p3"))
	}
	if p.Home != "" {
		targets = append(targets, filepath.Join(p.Home, ".kusaw-probe-p3"))
	}
	var secrets []string
	for _, c := range credentialDirs {
		if p.Home != "" && exists(filepath.Join(p.Home, c)) {
			secrets = append(secrets, filepath.Join(p.Home, c))
		}
	}
	var sb strings.Builder
	for _, t := range targets {
		fmt.Fprintf(&sb, "if ( : > '%s' ) 2>/dev/null; then echo 'P3 wrote %s'; fi\n", t, t)
	}
	for _, s := range secrets {
		fmt.Fprintf(&sb, "if [ -e '%s' ]; then echo 'P4 sees %s'; fi\n", s, s)
	}
	sb.WriteString("echo done\n")
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", sb.String()})
	if err != nil {
		p3.Detail, p4.Detail = err.Error(), err.Error()
		return []ProbeResult{p1, p2, p3, p4}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	p.Cleanup()
	// The host's view decides P3: nothing may exist after the run.
	var wrote []string
	for _, t := range targets {
		if exists(t) {
			wrote = append(wrote, t)
			os.Remove(t)
		}
	}
	text := out.String()
	switch {
	case runErr != nil || !strings.Contains(text, "done"):
		p3.Detail = fmt.Sprintf("the probe did not run: %v %s", runErr, firstLine(strings.TrimSpace(text)))
		p4.Detail = p3.Detail
		return []ProbeResult{p1, p2, p3, p4}
	case len(wrote) > 0 || strings.Contains(text, "P3 wrote"):
		p3.Detail = "a write outside reached the host: " + strings.Join(wrote, ", ")
	default:
		p3.OK = true
		p3.Detail = fmt.Sprintf("writes to %s failed", strings.Join(targets, " and "))
	}
	if strings.Contains(text, "P4 sees") {
		p4.Detail = strings.TrimSpace(text)
	} else {
		p4.OK = true
		p4.Detail = fmt.Sprintf("%d credential folders of the home checked; none visible", len(secrets))
		if p.Home == "" {
			p4.OK, p4.Detail = false, "the plan has no home to hide"
		}
	}
	return []ProbeResult{p1, p2, p3, p4}
}
