package factory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/providers"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/sandbox"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
)

// Probe statuses.
const (
	ProbePass   = "pass"
	ProbeFail   = "fail"
	ProbeNotRun = "not_run"
)

// DoctorProbeHost is the name P6 asks for: not on any allowlist, and
// refused by the proxy before any lookup (.invalid never resolves anyway).
const DoctorProbeHost = "kusaw-doctor-probe.invalid"

// DoctorProbe is one of P1–P8 with its result and, when it failed, the fix.
type DoctorProbe struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// ProxyIgnorer is a known tool that ignores HTTP(S)_PROXY (W1): under an
// allowlist it cannot connect (it fails closed).
type ProxyIgnorer struct {
	Tool string `json:"tool"`
	Why  string `json:"why"`
}

// DoctorStep is doctor's report on one step.
type DoctorStep struct {
	StepReport
	// ProbeNotes say how the probe run differed from the step's own runs.
	ProbeNotes   []string          `json:"probe_notes,omitempty"`
	ProbeRun     string            `json:"probe_run,omitempty"`
	EgressLog    string            `json:"egress_log,omitempty"`
	ProxySocket  string            `json:"proxy_socket"`
	Plan         json.RawMessage   `json:"plan,omitempty"`
	Capabilities *providers.Matrix `json:"capabilities,omitempty"`
	W1           []config.Finding  `json:"w1"`
	Probes       []DoctorProbe     `json:"probes"`
}

// DoctorReport is what kusaw sandbox doctor prints.
type DoctorReport struct {
	File    string         `json:"file"`
	Sandbox SandboxReport  `json:"sandbox"`
	Probes  []DoctorProbe  `json:"probes"` // P1, P2: the machine's
	W1Known []ProxyIgnorer `json:"w1_known"`
	// NotProtected is what this backend does not protect (the macOS limits
	// among them: process listing, detached processes, a deny list of
	// system services), in the same words as sandbox check --verbose.
	NotProtected []string     `json:"not_protected"`
	Steps        []DoctorStep `json:"steps"`
	OK           bool         `json:"ok"`
	ExitCode     int          `json:"exit_code"`
}

// DoctorOptions choose what doctor looks at.
type DoctorOptions struct {
	Step string // "" for every step
	// Node overrides the node binary whose version decides the Node entry
	// of W1 ("" finds node on PATH).
	Node string
}

// Doctor reports each step's (or one step's) sandbox and egress, and runs
// probes P1–P8: P1 and P2 on the machine, P3–P8 for real inside the step's
// sandbox, through kusaw sandbox exec's path with `kusaw __probe` as the
// command.
func (e *Engine) Doctor(ctx context.Context, o DoctorOptions) (*DoctorReport, error) {
	var ids []string
	if o.Step != "" {
		if e.F.Steps[o.Step] == nil {
			return nil, fmt.Errorf("%w %q (steps: %v)", record.ErrUnknownStep, o.Step, e.F.StepOrder)
		}
		ids = []string{o.Step}
	} else {
		ids = append(ids, e.F.StepOrder...)
	}
	rep := &DoctorReport{File: e.F.Path, W1Known: KnownProxyIgnorers(o.Node), Steps: []DoctorStep{}}
	c := e.checkSandbox()
	rep.Sandbox = SandboxReport{Backend: c.Backend, Available: c.Available, Reason: string(c.Reason), Fix: c.Fix}
	_, rep.NotProtected = sandbox.ProtectionLists(c.Backend)
	if !c.Available && c.Msg != "" {
		rep.Sandbox.Reason = string(c.Reason) + ": " + c.Msg
	}
	rep.Probes = machineProbes(c)

	v := &Validator{GOOS: runtime.GOOS}
	findings := v.providerChecks(e.F)

	var srv *probeServer
	if c.Available && len(ids) > 0 {
		var err error
		if srv, err = startProbeServer(); err != nil {
			return nil, err
		}
		defer srv.close()
	}
	for _, id := range ids {
		s := e.F.Steps[id]
		ds := DoctorStep{StepReport: stepReport(e.F, s), W1: []config.Finding{}}
		if !s.PerRepo {
			ds.Attempts = nil
		}
		if len(ds.Allowlist) == 0 {
			// Shown even when the network is open: what allowlist would admit.
			for _, h := range e.F.Allowlist(s, providerHosts(e.F, s)) {
				ds.Allowlist = append(ds.Allowlist, HostReport{Host: h.Pattern.String(), Origin: h.Origin})
			}
			ds.Inject = InjectedEnvNames(e.F, s)
		}
		for _, f := range findings {
			if f.Code == config.WCodeProxyIgnored && (f.Path == "steps."+id || strings.HasPrefix(f.Path, "steps."+id+".")) {
				ds.W1 = append(ds.W1, f)
			}
		}
		if s.Kind() == config.KindAgent {
			injects := false
			for _, in := range e.F.Inject(s) {
				injects = injects || in.Provider
			}
			sandboxed := ds.Mode == string(config.ModeRequired)
			prov, _ := providers.Of(e.F, s.Provider)
			mx := providers.MatrixOf(prov, providers.Mode{Sandboxed: sandboxed, Network: providerNetwork(config.Network(ds.Network)),
				Inject: injects && config.Network(ds.Network).Proxied(), FreshHome: providers.FreshHome(runtime.GOOS, sandboxed)})
			ds.Capabilities = &mx
		}
		ds.ProxySocket = filepath.Join(e.State.Dir, "runs", "<run>", "steps", id, "<n>", "lease", "egress.sock") +
			" (a private temp folder when that path is longer than a Unix socket allows)"
		if !config.Network(ds.Network).Proxied() {
			ds.ProxySocket = "none: the step's network is " + ds.Network
		}
		if !c.Available {
			ds.Probes = notRun("the sandbox backend is unavailable (see P1, P2)")
		} else {
			e.probeStep(ctx, s, &ds, srv)
		}
		rep.Steps = append(rep.Steps, ds)
	}
	rep.OK = true
	for _, p := range rep.Probes {
		rep.OK = rep.OK && p.Status == ProbePass
	}
	for _, s := range rep.Steps {
		for _, p := range s.Probes {
			rep.OK = rep.OK && p.Status != ProbeFail
		}
	}
	switch {
	case !c.Available:
		rep.ExitCode = int(status.ExitSandboxUnavailable)
	case !rep.OK:
		rep.ExitCode = int(status.ExitRunFailed)
	}
	return rep, nil
}

// machineProbes are P1 and P2, from the backend check.
func machineProbes(c sandbox.CheckResult) []DoctorProbe {
	p1 := DoctorProbe{ID: "P1", Name: "backend binary trusted"}
	p2 := DoctorProbe{ID: "P2", Name: "namespaces usable"}
	untrusted := c.Reason == status.ReasonSandboxUntrusted
	if c.Path != "" && !untrusted {
		p1.Status, p1.Detail = ProbePass, strings.TrimSpace(c.Path+" "+c.Version)
	} else {
		p1.Status, p1.Detail, p1.Fix = ProbeFail, c.Msg, c.Fix
	}
	switch {
	case c.Available:
		p2.Status, p2.Detail = ProbePass, c.Backend+" started with its namespaces"
	case p1.Status == ProbeFail:
		p2.Status, p2.Detail = ProbeNotRun, "no trusted backend binary (P1)"
	default:
		p2.Status, p2.Detail, p2.Fix = ProbeFail, c.Msg, c.Fix
	}
	return []DoctorProbe{p1, p2}
}

var stepProbeNames = [][2]string{
	{"P3", "a write outside the writable paths fails"},
	{"P4", "the home's secrets are hidden"},
	{"P5", "an allowed host is reached through the proxy"},
	{"P6", "a host not allowed is refused and logged"},
	{"P7", "a direct connection that bypasses the proxy fails"},
	{"P8", "local-service ports are reached straight from the sandbox's localhost"},
}

func notRun(why string) []DoctorProbe {
	out := make([]DoctorProbe, 0, len(stepProbeNames))
	for _, n := range stepProbeNames {
		out = append(out, DoctorProbe{ID: n[0], Name: n[1], Status: ProbeNotRun, Detail: why})
	}
	return out
}

// probeServer is doctor's loopback upstream: P5 must reach it through the
// proxy and P8 straight (its port is a local-service entry of the probe
// run), while P7 must not reach its second port, which no entry lists.
type probeServer struct {
	ln    net.Listener
	other net.Listener
	srv   *http.Server
	token string
	mu    sync.Mutex
	hits  map[string]int
}

func startProbeServer() (*probeServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("doctor cannot listen on loopback for its egress probes: %v", err)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("doctor cannot listen on loopback for its egress probes: %v", err)
	}
	ps := &probeServer{ln: ln, other: other, token: "kusaw-doctor-" + hex.EncodeToString(b), hits: map[string]int{}}
	ps.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.mu.Lock()
		ps.hits[r.URL.Path]++
		ps.mu.Unlock()
		fmt.Fprint(w, ps.token)
	})}
	go func() { _ = ps.srv.Serve(ln) }()
	go func() { _ = ps.srv.Serve(other) }()
	return ps, nil
}

func (ps *probeServer) port() int { return ps.ln.Addr().(*net.TCPAddr).Port }

// unlistedPort is the port P7 dials: no entry of the probe run lists it.
func (ps *probeServer) unlistedPort() int { return ps.other.Addr().(*net.TCPAddr).Port }

func (ps *probeServer) count(path string) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.hits[path]
}

func (ps *probeServer) close() { _ = ps.srv.Close() }

// probeObs is everything P3–P8 are judged from: what the probe saw inside
// and what the host saw outside.
type probeObs struct {
	out        ProbeOutput
	found      bool   // the probe's marker line was in its output
	ranErr     string // why the probe run did not start or finish
	ranFix     string
	leftBehind []string
	outside    []string
	secrets    []string // the paths checked
	withData   int      // how many of them hold something on the host
	hitsP5     int
	hitsP7     int
	hitsP8     int
	local      []string // the step's own local-service ports P8 probed
	localIdle  []int    // leased ports with nothing listening on the host
	egressLog  string
	logAllow   bool // egress.log has the allowed request
	logRefuse  bool // egress.log has the refusal of DoctorProbeHost
}

// probeStep runs `kusaw __probe` in the step's sandbox and judges P3–P8.
func (e *Engine) probeStep(ctx context.Context, s *config.Step, ds *DoctorStep, srv *probeServer) {
	port := srv.port()
	host, err := config.ParseHostPattern("localhost:" + strconv.Itoa(port))
	if err != nil {
		ds.Probes = notRun("cannot allow doctor's loopback server: " + err.Error())
		return
	}
	if ds.Mode != string(config.ModeRequired) {
		ds.ProbeNotes = append(ds.ProbeNotes, "the step's sandbox mode is off: the probes ran under the sandbox it gets with mode: required")
	}
	if !e.F.StepNetwork(s).Proxied() {
		ds.ProbeNotes = append(ds.ProbeNotes, "the step's network is open: the probes ran with network: allowlist (P5–P7 test the proxy); the step itself reaches every host")
	}
	ds.ProbeNotes = append(ds.ProbeNotes, fmt.Sprintf("the probe run also allows localhost:%d (origin doctor), doctor's own loopback server", port))
	if len(e.F.Setup) > 0 {
		ds.ProbeNotes = append(ds.ProbeNotes, "the factory's setup commands are not run for the probe run")
	}

	obs := probeObs{}
	spec := ProbeSpec{
		WriteInside: []string{"$KUSAW_ARTIFACTS/.kusaw-probe-in", "$TMPDIR/.kusaw-probe-in", ".kusaw-probe-in"},
		Allowed:     fmt.Sprintf("http://localhost:%d/p5", port), Token: srv.token,
		Denied: "http://" + DoctorProbeHost + "/p6",
		Direct: fmt.Sprintf("127.0.0.1:%d", srv.unlistedPort()),
		Local:  []string{fmt.Sprintf("localhost:%d", port)},
	}
	agent := agentAPIOf(e.F, s)
	spec.AgentAPI = agent
	// The step's own local services: probed where the host has something
	// listening (doctor never starts one).
	pol, _ := e.EgressPolicy(s.ID)
	for _, lp := range egress.LocalPorts(pol.Allow) {
		addr := fmt.Sprintf("127.0.0.1:%d", lp)
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			spec.Local = append(spec.Local, addr)
			obs.local = append(obs.local, addr)
		} else {
			obs.localIdle = append(obs.localIdle, lp)
		}
	}
	// Outside targets: records, the home, the factory's folder, the state
	// folder, the repos' own checkouts. One that exists already is left
	// out (doctor never touches a file it did not make).
	var outside []string
	add := func(dir string) {
		if dir == "" {
			return
		}
		p := filepath.Join(dir, ".kusaw-probe-out")
		if _, err := os.Lstat(p); err == nil {
			return
		}
		outside = append(outside, p)
	}
	home, _ := os.UserHomeDir()
	add(home)
	add(filepath.Dir(e.F.Path))
	add(e.State.Dir)
	for _, r := range e.F.ActiveRepos(s) {
		if rp := e.F.Repos[r]; rp != nil {
			add(rp.Path)
		}
	}
	spec.WriteOutside = append([]string{"$KUSAW_ARTIFACTS/../.kusaw-probe-out"}, outside...)
	obs.outside = append([]string{"attempt folder"}, outside...)
	if d, err := secretstore.Dir(); err == nil {
		obs.secrets = append(obs.secrets, d)
	}
	if home != "" {
		for _, c := range []string{".ssh", ".gnupg", ".aws", ".config/gh", ".netrc", ".git-credentials", ".docker"} {
			p := filepath.Join(home, c)
			if c == ".ssh" || exists(p) {
				obs.secrets = append(obs.secrets, p)
			}
		}
	}
	for _, p := range obs.secrets {
		if visible(p) {
			obs.withData++
		}
	}
	spec.Secrets = obs.secrets
	arg, _ := json.Marshal(spec)

	var stdout, stderr strings.Builder
	res, err := e.Exec(ctx, ExecRequest{Step: s.ID, Argv: []string{e.opts.Kusaw, "__probe", string(arg)},
		Stdout: &stdout, Stderr: &stderr, Network: config.NetworkAllowlist, SkipSetup: true, Pipeline: record.DoctorPipeline,
		ExtraAllow: []config.AllowedHost{{Pattern: host, Origin: "doctor"}}})
	for _, p := range outside {
		if _, err := os.Lstat(p); err == nil {
			obs.leftBehind = append(obs.leftBehind, p)
			os.Remove(p)
		}
	}
	if res != nil && res.Run != nil {
		ds.ProbeRun = res.Run.ID()
		adir := record.AttemptDir(res.Run.Dir, s.ID, 1)
		if p := filepath.Join(adir, ".kusaw-probe-out"); exists(p) {
			obs.leftBehind = append(obs.leftBehind, p)
			os.Remove(p)
		}
		ds.EgressLog = filepath.Join(adir, record.EgressLogFile)
		if b, err := os.ReadFile(ds.EgressLog); err == nil {
			obs.egressLog = string(b)
		}
		if a := res.Attempt; a != nil && len(a.Processes) > 0 && len(a.Processes[0].Sandbox) > 0 {
			ds.Plan = a.Processes[0].Sandbox
			var pl struct {
				Socket string `json:"proxy_socket"`
			}
			if json.Unmarshal(ds.Plan, &pl) == nil && pl.Socket != "" && config.Network(ds.Network).Proxied() {
				ds.ProxySocket = pl.Socket + " (this probe run's; each attempt gets its own lease)"
			}
		}
		if a := res.Attempt; a != nil && a.Outcome == status.OutcomeRefused {
			obs.ranErr, obs.ranFix = fmt.Sprintf("the probe run was refused: %s: %s", a.Reason, a.Message), a.Fix
		}
	}
	if err != nil && obs.ranErr == "" {
		obs.ranErr = "the probe run failed: " + err.Error()
	}
	obs.out, obs.found = ParseProbeOutput(stdout.String())
	if !obs.found && obs.ranErr == "" {
		obs.ranErr = "the probe printed no result: " + clip(strings.TrimSpace(stderr.String()+" "+stdout.String()), 300)
	}
	obs.hitsP5, obs.hitsP7, obs.hitsP8 = srv.count("/p5"), srv.count("/p7"), srv.count("/p8")
	for _, l := range strings.Split(obs.egressLog, "\n") {
		if strings.Contains(l, `"host":"localhost"`) && strings.Contains(l, `"port":`+strconv.Itoa(port)) && strings.Contains(l, `"decision":"allow"`) {
			obs.logAllow = true
		}
		if strings.Contains(l, `"host":"`+DoctorProbeHost+`"`) && strings.Contains(l, `"decision":"refuse"`) {
			obs.logRefuse = true
		}
	}
	ds.Probes = judgeProbes(obs)
	if agent != "" && obs.ranErr == "" {
		ds.Probes = append(ds.Probes, judgeAgentAPI(agent, obs.out.AgentAPI, cursorSettings(s)))
	}
}

// judgeProbes turns what the probe and the host saw into P3–P8. Each
// probe passes only when both sides agree.
func judgeProbes(o probeObs) []DoctorProbe {
	ps := notRun("")
	if o.ranErr != "" {
		for i := range ps {
			ps[i].Status, ps[i].Detail = ProbeFail, o.ranErr
			ps[i].Fix = o.ranFix
			if ps[i].Fix == "" {
				ps[i].Fix = "run kusaw sandbox exec --step ID -- true to see why the step's sandbox does not start"
			}
		}
		return ps
	}
	p3, p4, p5, p6, p7, p8 := &ps[0], &ps[1], &ps[2], &ps[3], &ps[4], &ps[5]
	fail := func(p *DoctorProbe, detail, fix string) { p.Status, p.Detail, p.Fix = ProbeFail, detail, fix }
	pass := func(p *DoctorProbe, detail string) { p.Status, p.Detail = ProbePass, detail }

	wrote := append(append([]string{}, o.out.Wrote...), o.leftBehind...)
	switch {
	case len(wrote) > 0:
		fail(p3, "a write outside the writable paths worked: "+strings.Join(dedupe(wrote), ", "),
			"remove these paths from sandbox.allow_write and the step's allow_write; if none is listed there, the backend is broken: report it")
	case len(o.out.InsideFailed) > 0:
		fail(p3, "writes outside fail, but so does a write the step needs: "+strings.Join(o.out.InsideFailed, "; "),
			"check the attempt folder's permissions and free space (the worktree, artifacts/ and tmp/ must be writable)")
	default:
		pass(p3, fmt.Sprintf("writes to %s failed; the worktree, artifacts/ and TMPDIR are writable", strings.Join(o.outside, ", ")))
	}

	if len(o.out.Visible) > 0 {
		fail(p4, "readable inside the sandbox: "+strings.Join(o.out.Visible, ", "),
			"remove these paths from sandbox.allow_read and the step's allow_read (a provider's login folder must not contain them)")
	} else {
		pass(p4, fmt.Sprintf("%s hidden (%d of them hold something on the host)", strings.Join(o.secrets, ", "), o.withData))
	}

	a := o.out.Allowed
	switch {
	case o.out.Proxy == "":
		fail(p5, "HTTP_PROXY is not set inside the sandbox", "the probe run had network: allowlist; report this: the lease did not reach the step's environment")
	case a.Err != "" || a.Status != http.StatusOK:
		fail(p5, fmt.Sprintf("the allowed host was not reached through %s: status %d %s %s", o.out.Proxy, a.Status, a.Err, a.Line),
			"see the egress.log of the probe run; a refusal names the key to change, a failure the upstream's error")
	case a.Body != "" && !strings.Contains(a.Body, "kusaw-doctor-"):
		fail(p5, "an answer came back, but not from doctor's server: "+clip(a.Line, 120), "check sandbox.egress.resolver: localhost must resolve to this machine")
	case o.hitsP5 == 0 || !o.logAllow:
		fail(p5, fmt.Sprintf("the client got an answer, but the server saw %d request(s) and egress.log has the allow line: %v", o.hitsP5, o.logAllow),
			"report this: the proxy's record and the upstream disagree")
	default:
		pass(p5, fmt.Sprintf("GET %s through %s: 200, logged as allowed", "localhost (doctor's server)", o.out.Proxy))
	}

	d := o.out.Denied
	switch {
	case d.Status != http.StatusForbidden:
		fail(p6, fmt.Sprintf("%s was not refused with 403: status %d %s %s", DoctorProbeHost, d.Status, d.Err, clip(d.Line, 120)),
			"the proxy must refuse hosts that are not on the allowlist; report this with the probe run's egress.log")
	case !strings.Contains(d.Line, "is not allowed"):
		fail(p6, "403 without kusaw's refusal line: "+clip(d.Line, 120), "report this: the refusal must name the policy key to change")
	case !o.logRefuse:
		fail(p6, "refused, but egress.log has no refuse line for "+DoctorProbeHost, "check that the attempt folder is writable; egress.log records every decision")
	default:
		pass(p6, "403: "+d.Line+" (logged in egress.log)")
	}

	switch {
	case o.out.DirectErr == "" || o.hitsP7 > 0:
		fail(p7, "a direct connection to the host's loopback bypassed the proxy",
			"the step's network is not isolated: network: allowlist must run bwrap without --share-net; check sandbox.network and the step's network")
	default:
		pass(p7, "a direct connection to a host port no entry lists failed: "+o.out.DirectErr)
	}

	switch {
	case len(o.out.LocalErr) > 0:
		fail(p8, "a local-service port was not reached straight from the sandbox: "+strings.Join(o.out.LocalErr, "; "),
			"on Linux the egress bridge forwards these ports; run kusaw sandbox exec --step ID -- true and read its egress.log, or report this")
	case o.hitsP8 == 0:
		fail(p8, "the connection to doctor's local-service port opened, but doctor's server saw no request",
			"report this: the bridge accepted the connection but did not forward it")
	default:
		detail := "doctor's server reached on its local-service port straight from the sandbox (logged kind local)"
		if len(o.local) > 0 {
			detail += "; the step's local services reached: " + strings.Join(o.local, ", ")
		}
		if len(o.localIdle) > 0 {
			detail += fmt.Sprintf("; not probed, nothing listens on the host: ports %s", strings.Trim(fmt.Sprint(o.localIdle), "[]"))
		}
		pass(p8, detail)
	}
	return ps
}

func dedupe(xs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, x := range xs {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// KnownProxyIgnorers lists the tools W1 knows, Node first with the
// version found: Node 20's fetch ignores the proxy variables; from Node 24
// it honours them with NODE_USE_ENV_PROXY=1, which the sandbox sets.
func KnownProxyIgnorers(node string) []ProxyIgnorer {
	var out []ProxyIgnorer
	major, ver := NodeMajor(node)
	switch {
	case major >= 24:
		out = append(out, ProxyIgnorer{Tool: "node", Why: "node " + ver + " honours the proxy with NODE_USE_ENV_PROXY=1 (set in the sandbox); older versions' fetch ignores it"})
	case major > 0:
		out = append(out, ProxyIgnorer{Tool: "node", Why: "node " + ver + ": fetch ignores HTTP(S)_PROXY (NODE_USE_ENV_PROXY needs Node 24+): it fails closed"})
	default:
		out = append(out, ProxyIgnorer{Tool: "node", Why: "Node 20's fetch ignores HTTP(S)_PROXY (Node 24+ honours NODE_USE_ENV_PROXY=1)"})
	}
	var rest []ProxyIgnorer
	for tool, why := range proxyIgnorers {
		if tool == "node" || tool == "nodejs" {
			continue
		}
		rest = append(rest, ProxyIgnorer{Tool: tool, Why: why})
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Tool < rest[j].Tool })
	return append(out, rest...)
}

// NodeMajor runs `node --version` (node: a path, or "" for PATH) and
// returns the major version and the version text; 0 when there is none.
func NodeMajor(node string) (int, string) {
	if node == "" {
		p, err := exec.LookPath("node")
		if err != nil {
			return 0, ""
		}
		node = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, "--version").Output()
	if err != nil {
		return 0, ""
	}
	ver := strings.TrimSpace(string(out))
	m, _, _ := strings.Cut(strings.TrimPrefix(ver, "v"), ".")
	n, _ := strconv.Atoi(m)
	return n, ver
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// WriteDoctorText prints a report for people.
func WriteDoctorText(w io.Writer, r *DoctorReport) {
	fmt.Fprintf(w, "factory: %s\n", r.File)
	fmt.Fprintf(w, "backend: %s, available: %v", r.Sandbox.Backend, r.Sandbox.Available)
	if r.Sandbox.Reason != "" {
		fmt.Fprintf(w, " (%s; fix: %s)", r.Sandbox.Reason, r.Sandbox.Fix)
	}
	fmt.Fprintln(w)
	for _, p := range r.Probes {
		writeProbe(w, "", p)
	}
	if len(r.NotProtected) > 0 {
		fmt.Fprintf(w, "not protected by the %s backend:\n", r.Sandbox.Backend)
		for _, l := range r.NotProtected {
			fmt.Fprintf(w, "  - %s\n", l)
		}
	}
	fmt.Fprintln(w, "W1, tools known to ignore HTTP(S)_PROXY (under an allowlist they fail closed):")
	for _, t := range r.W1Known {
		fmt.Fprintf(w, "  %-10s %s\n", t.Tool, t.Why)
	}
	for _, s := range r.Steps {
		fmt.Fprintf(w, "\nstep %s (%s", s.ID, s.Kind)
		if s.Provider != "" {
			fmt.Fprintf(w, ", provider %s", s.Provider)
		}
		fmt.Fprintln(w, ")")
		fmt.Fprintf(w, "  mode:       %s (from %s)\n", s.Mode, s.ModeOrigin)
		for _, a := range s.Attempts {
			fmt.Fprintf(w, "    process for %s: %s (from %s), network %s\n", strings.Join(a.Repos, ", "), a.Mode, a.ModeOrigin, a.Network)
		}
		fmt.Fprintf(w, "  network:    %s\n", s.Network)
		if len(s.Allowlist) == 0 {
			fmt.Fprintln(w, "  allowlist:  (empty)")
		} else {
			fmt.Fprintln(w, "  allowlist:")
			for _, h := range s.Allowlist {
				fmt.Fprintf(w, "    %-40s %s\n", h.Host, h.Origin)
			}
		}
		if len(s.LocalPorts) > 0 {
			fmt.Fprintf(w, "  local services: host loopback ports %s\n", strings.Trim(fmt.Sprint(s.LocalPorts), "[]"))
		}
		if len(s.Inject) > 0 {
			fmt.Fprintf(w, "  injected:   %s (names only; values stay outside the sandbox)\n", strings.Join(s.Inject, ", "))
		}
		fmt.Fprintf(w, "  proxy:      %s\n", s.ProxySocket)
		for _, f := range s.W1 {
			fmt.Fprintf(w, "  W1: %s (fix: %s)\n", f.Message, f.Fix)
		}
		if s.Capabilities != nil {
			fmt.Fprintf(w, "  capabilities of %s here:\n", s.Capabilities.Provider)
			for _, c := range s.Capabilities.Cells {
				fmt.Fprintf(w, "    %-15s %-14s %s\n", c.Capability, c.Level, c.Note)
			}
		}
		for _, n := range s.ProbeNotes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		if s.ProbeRun != "" {
			fmt.Fprintf(w, "  probe run:  %s (egress.log: %s)\n", s.ProbeRun, s.EgressLog)
		}
		if len(s.Plan) > 0 {
			writePlan(w, s.Plan)
		}
		for _, p := range s.Probes {
			writeProbe(w, "  ", p)
		}
	}
	fmt.Fprintln(w)
	if r.OK {
		fmt.Fprintln(w, "every probe that ran passed")
	} else {
		fmt.Fprintln(w, "some probes failed or could not run: see the fixes above")
	}
}

func writeProbe(w io.Writer, indent string, p DoctorProbe) {
	fmt.Fprintf(w, "%s%s %-4s %s: %s\n", indent, p.ID, p.Status, p.Name, p.Detail)
	if p.Fix != "" {
		fmt.Fprintf(w, "%s     fix: %s\n", indent, p.Fix)
	}
}

// writePlan prints the probe run's plan in short: the paths by kind.
func writePlan(w io.Writer, raw json.RawMessage) {
	var pl sandbox.Plan
	if json.Unmarshal(raw, &pl) != nil {
		return
	}
	fmt.Fprintf(w, "  plan (%s, network %s, starts in %s):\n", pl.Backend, pl.Network, pl.Workdir)
	if view := pl.View(); len(view) > 0 && pl.Backend == "bubblewrap" {
		fmt.Fprintf(w, "    view (in mount order, with where each entry comes from; nothing else exists inside):\n")
		for _, l := range view {
			fmt.Fprintf(w, "      %s\n", l)
		}
	}
	for _, tc := range pl.Toolchains {
		fmt.Fprintf(w, "    toolchain %s (added for %s on the step's PATH)\n", tc.Path, tc.From)
	}
	for _, g := range []struct {
		name  string
		rules []sandbox.PathRule
	}{{"writable", pl.Writable}, {"read-only", pl.ReadOnly}, {"hidden", pl.Hidden}} {
		for _, r := range g.rules {
			fmt.Fprintf(w, "    %-9s %s (%s)\n", g.name, r.Path, r.Reason)
		}
	}
	names := make([]string, 0, len(pl.EnvVars))
	for _, e := range pl.EnvVars {
		names = append(names, e.Name)
	}
	fmt.Fprintf(w, "    env names: %s\n", strings.Join(names, " "))
	// The notes say, among others, which scripts agent settings name.
	for _, n := range pl.Notes {
		fmt.Fprintf(w, "    note: %s\n", n)
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// providerNetwork is the network a provider plans for: audit is an
// allowlist sandbox to it (the proxy is the only way out).
func providerNetwork(n config.Network) string {
	if n.Proxied() {
		return string(config.NetworkAllowlist)
	}
	return string(n)
}
