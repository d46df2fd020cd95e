package factory

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/providers"
)

// P9: an agent whose CLI needs settings to use the proxy at all. Cursor's
// agent stream is HTTP/2 and ignores HTTPS_PROXY unless its
// cli-config.json says network.useHttp1ForAgent; kusaw writes that into
// each sandboxed attempt's own config folder. Doctor checks both halves:
// what kusaw would write (on the host) and that the API host is reached
// through the proxy from inside the step's sandbox.

// agentAPIOf is the API P9 reaches for a step: a Cursor step's endpoint
// (CURSOR_API_ENDPOINT in its env, -e/--endpoint in its args, else
// Cursor's own); "" for a step that needs no P9.
func agentAPIOf(f *config.Factory, s *config.Step) string {
	if s.Kind() != config.KindAgent || s.Provider != "cursor" {
		return ""
	}
	if v, ok := s.Env["CURSOR_API_ENDPOINT"]; ok && v.Secret == nil && v.Value != "" {
		return v.Value
	}
	if pc := f.Providers["cursor"]; pc != nil {
		for i, a := range pc.Args {
			name, val, has := strings.Cut(a, "=")
			if name == "-e" || name == "--endpoint" {
				if has {
					return val
				}
				if i+1 < len(pc.Args) {
					return pc.Args[i+1]
				}
			}
		}
	}
	return providers.CursorDefaultAPI
}

// agentSettings is what P9 found on the host about the CLI's settings.
type agentSettings struct {
	ok      string // what is right, when nothing is wrong
	problem string
	fix     string
}

// cursorSettings checks the cli-config.json kusaw would give the step
// under an allowlist, written to a scratch folder as a run would.
func cursorSettings(s *config.Step) agentSettings {
	if _, set := s.Env["CURSOR_CONFIG_DIR"]; set {
		return agentSettings{problem: "the step's env sets CURSOR_CONFIG_DIR, which replaces the config folder kusaw gives the attempt (with network.useHttp1ForAgent)",
			fix: "remove CURSOR_CONFIG_DIR from steps." + s.ID + ".env, or set network.useHttp1ForAgent: true in that folder's cli-config.json"}
	}
	dir, err := os.MkdirTemp("", "kusaw-doctor-cursor-")
	if err != nil {
		return agentSettings{problem: "cannot make a scratch folder: " + err.Error(), fix: "check TMPDIR"}
	}
	defer os.RemoveAll(dir)
	_, _, err = providers.AttemptConfig("cursor", dir, providers.PrepareInput{Sandboxed: true, Network: string(config.NetworkAllowlist),
		FreshHome: providers.FreshHome(runtime.GOOS, true)})
	if err != nil {
		return agentSettings{problem: "kusaw cannot write the attempt's cli-config.json: " + err.Error(), fix: "check that your Cursor config folders are readable"}
	}
	var cfg struct {
		Network struct {
			HTTP1 bool `json:"useHttp1ForAgent"`
		} `json:"network"`
	}
	b, err := os.ReadFile(filepath.Join(dir, providers.CursorConfigFile))
	if err != nil || json.Unmarshal(b, &cfg) != nil || !cfg.Network.HTTP1 {
		return agentSettings{problem: "the cli-config.json kusaw writes for the attempt lacks network.useHttp1ForAgent: true", fix: "report this"}
	}
	return agentSettings{ok: "each attempt gets its own cli-config.json with network.useHttp1ForAgent: true (HTTP/1.1 through HTTPS_PROXY)"}
}

// judgeAgentAPI decides P9 from the host-side settings and what the probe
// got from the proxy for the agent's API.
func judgeAgentAPI(api string, a ProbeAnswer, st agentSettings) DoctorProbe {
	p := DoctorProbe{ID: "P9", Name: "the agent's own traffic goes through the proxy (Cursor: " + api + ")"}
	fail := func(detail, fix string) DoctorProbe { p.Status, p.Detail, p.Fix = ProbeFail, detail, fix; return p }
	switch {
	case st.problem != "":
		return fail(st.problem, st.fix)
	case a.Status == http.StatusForbidden:
		return fail("the proxy refused the agent's API: "+clip(a.Line, 160),
			"keep sandbox.egress.provider_hosts: true (it adds *.cursor.sh), or add the API's host to the step's sandbox.egress.allow")
	case a.Err != "" || a.Status == 0 || a.Status == http.StatusBadGateway || a.Status == http.StatusGatewayTimeout:
		return fail(fmt.Sprintf("allowed, but not reached through the proxy: status %d %s %s", a.Status, a.Err, clip(a.Line, 160)),
			"check this machine's network and DNS (sandbox.egress.resolver); the step's egress.log names the upstream's error")
	}
	p.Status = ProbePass
	p.Detail = fmt.Sprintf("%s reached through the proxy (%s); %s", api, clip(a.Line, 80), st.ok)
	return p
}
