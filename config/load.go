package config

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nkeys"
	"go.yaml.in/yaml/v3"
)

// Default budgets of the egress proxy.
const (
	DefaultBudgetPerHost = 512 << 20
	DefaultBudgetTotal   = 2 << 30
)

var (
	idPattern      = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(idPatternText) })
	envNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(envNamePatternText) })
	// A pool is one token of a NATS subject (kusaw.work.<pool>).
	poolPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(poolPatternText) })
)

const poolPatternText = `^[A-Za-z0-9_-]{1,64}$`

// LoadError is returned when the file cannot be read at all.
type LoadError struct{ Msg string }

func (e *LoadError) Error() string { return e.Msg }

// Load reads and checks a factory file. It returns the factory (possibly
// partial) and every finding; the factory is usable only when there are no
// error findings. A file that cannot be read is a *LoadError.
func Load(path string) (*Factory, Findings, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, &LoadError{fmt.Sprintf("cannot resolve %s: %v", path, err)}
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, &LoadError{fmt.Sprintf("no factory file at %s; create one (see examples/) or pass -f FILE", path)}
		}
		return nil, nil, &LoadError{fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	f, fs := Parse(data, abs)
	return f, fs, nil
}

// Parse checks the file contents; file is the absolute path used for
// messages and for resolving relative paths.
func Parse(data []byte, file string) (*Factory, Findings) {
	d := &decoder{file: file, pos: map[string]Pos{}}
	f := &Factory{
		Path:      file,
		Dir:       filepath.Dir(file),
		Repos:     map[string]*Repo{},
		Providers: map[string]*ProviderConfig{},
		Pipelines: map[string]*Pipeline{},
		Steps:     map[string]*Step{},
		pos:       d.pos,
	}
	d.fac = f
	f.Sandbox = SandboxPolicy{Mode: ModeOff, Network: NetworkOpen, Egress: Egress{ProviderHosts: true,
		Budgets: Budgets{Enabled: true, PerHost: DefaultBudgetPerHost, Total: DefaultBudgetTotal}}}
	f.StateDir = filepath.Join(f.Dir, ".kusaw")

	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, col := yamlErrPos(err)
		if strings.Contains(err.Error(), "did not find expected") {
			// yaml.v3 reports these at the line before the unclosed
			// collection starts (a 0-based context mark).
			line++
		}
		d.findings = append(d.findings, Finding{Code: ECodeSyntax, Severity: SevError, Line: line, Column: col,
			Message: "not valid YAML: " + yamlErrMsg(err), Fix: "fix the YAML syntax at that line", File: file})
		return f, d.findings
	}
	if len(doc.Content) == 0 {
		d.errf(ECodeVersion, nil, "version", "start the file with: version: 1", "the file is empty")
		return f, d.findings
	}
	root := doc.Content[0]
	top := d.fields(root, "", []string{"version", "state_dir", "state_dir_mode", "repos", "providers", "setup", "sandbox", "serve", "caches", "pipelines", "steps", "notify", "forges", "triggers", "retention"})
	var stepsN, pipesN, cachesN, trigN *yaml.Node
	haveVersion := false
	for _, fl := range top {
		switch fl.key {
		case "version":
			haveVersion = true
			if v := d.integer(fl.value, "version"); v != 1 {
				d.errf(ECodeVersion, fl.value, "version", "set version: 1", "version %s is not supported", resolve(fl.value).Value)
			} else {
				f.Version = 1
			}
		case "state_dir":
			if s := d.str(fl.value, "state_dir"); s != "" {
				f.StateDir = f.abs(s)
			}
		case "state_dir_mode":
			f.StateDirMode = d.stateDirMode(fl.value)
		case "repos":
			d.repos(f, fl.value)
		case "providers":
			d.providers(f, fl.value)
		case "setup":
			d.setup(f, fl.value)
		case "sandbox":
			d.sandbox(f, fl.value)
		case "serve":
			d.serve(f, fl.value)
		case "caches":
			cachesN = fl.value
		case "pipelines":
			pipesN = fl.value
		case "steps":
			stepsN = fl.value
		case "notify":
			f.Notify = d.notifyList(fl.value, "notify")
		case "forges":
			d.forges(f, fl.value)
		case "triggers":
			trigN = fl.value
		case "retention":
			d.retention(f, fl.value)
		}
	}
	// After the loop: a cache's default folder is under state_dir.
	if cachesN != nil {
		f.Caches = d.caches(f, cachesN, "caches")
	}
	if !haveVersion && root.Kind == yaml.MappingNode {
		d.errf(ECodeVersion, root, "version", "add version: 1 at the top", "version is missing")
	}
	if stepsN != nil {
		d.steps(f, stepsN)
	}
	if pipesN != nil {
		d.pipelines(f, pipesN)
	}
	if root.Kind == yaml.MappingNode && len(f.PipelineOrder) == 0 && pipesN == nil {
		d.errf(ECodeNoPipelines, root, "pipelines", "add pipelines: {default: [step, ...]}", "no pipelines are defined")
	}
	if trigN != nil {
		d.triggers(f, trigN)
	}
	d.crossChecks(f)
	d.shapeChecks(f)
	d.intakeChecks(f)
	d.findings.Sort()
	return f, d.findings
}

func (f *Factory) abs(p string) string {
	if strings.HasPrefix(p, "~/") {
		if h, err := os.UserHomeDir(); err == nil {
			p = filepath.Join(h, p[2:])
		}
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(f.Dir, p)
}

func (d *decoder) repos(f *Factory, n *yaml.Node) {
	for _, fl := range d.fields(n, "repos", nil) {
		p := join("repos", fl.key)
		if !idPattern().MatchString(fl.key) {
			d.errf(ECodeBadName, fl.keyN, p, "use letters, digits, '.', '_' and '-'", "repo name %q has characters it may not have", fl.key)
			continue
		}
		r := &Repo{Name: fl.key}
		havePath := false
		for _, rf := range d.fields(fl.value, p, []string{"path", "base", "sandbox", "include", "sparse", "write_layer"}) {
			kp := join(p, rf.key)
			switch rf.key {
			case "path":
				havePath = true
				s := d.str(rf.value, kp)
				if s == "" {
					d.errf(ECodeMissing, rf.value, kp, "set it to the repository's folder", "%s is empty", kp)
					continue
				}
				r.Path = f.abs(s)
				st, err := os.Stat(r.Path)
				if err != nil {
					d.errf(ECodePathMissing, rf.value, kp, "create the repository or correct the path (relative paths start at the factory file's folder)", "%s: %s does not exist", kp, r.Path)
				} else if !st.IsDir() {
					d.errf(ECodeNotGitRepo, rf.value, kp, "point it at a git repository's folder", "%s: %s is not a folder", kp, r.Path)
				} else if !isGitRepo(r.Path) {
					d.errf(ECodeNotGitRepo, rf.value, kp, "run git init there, or point it at a git repository", "%s: %s is not a git repository", kp, r.Path)
				}
			case "base":
				r.Base = d.str(rf.value, kp)
			case "sandbox":
				r.Sandbox = Mode(d.enum(rf.value, kp, "off", "required"))
			case "include":
				r.Include = d.include(rf.value, kp)
			case "sparse":
				r.Sparse = d.sparse(rf.value, kp)
			case "write_layer":
				if v := d.enum(rf.value, kp, WriteLayerOverlay, "none"); v == WriteLayerOverlay {
					r.WriteLayer = v
				}
			}
		}
		if !havePath && resolve(fl.value).Kind == yaml.MappingNode {
			d.errf(ECodeMissing, fl.value, p+".path", "add path: ../your-repo", "repo %s has no path", fl.key)
		} else if !havePath {
			continue
		}
		f.Repos[r.Name] = r
		f.RepoOrder = append(f.RepoOrder, r.Name)
	}
}

func isGitRepo(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
		return true
	}
	// A bare repository.
	_, e1 := os.Stat(filepath.Join(dir, "HEAD"))
	_, e2 := os.Stat(filepath.Join(dir, "objects"))
	return e1 == nil && e2 == nil
}

func (d *decoder) secretRef(n *yaml.Node, path string) *SecretRef {
	fs := d.fields(n, path, []string{"secret"})
	for _, fl := range fs {
		if s := d.str(fl.value, join(path, "secret")); s != "" {
			return &SecretRef{Key: s}
		}
	}
	d.errf(ECodeMissing, n, path, "write {secret: KEY} or set it with kusaw config set "+path+" --secret", "%s needs a secret key", path)
	return nil
}

func (d *decoder) providers(f *Factory, n *yaml.Node) {
	for _, fl := range d.fields(n, "providers", nil) {
		p := join("providers", fl.key)
		agentN := mapValue(fl.value, "agent")
		builtin := contains(ProviderNames, fl.key)
		switch {
		case !builtin && agentN == nil:
			d.errf(ECodeUnknownProvider, fl.keyN, p, "known providers: "+strings.Join(ProviderNames, ", ")+"; describe another agent CLI under "+p+".agent (docs/providers.md)", "unknown provider %q", fl.key)
			continue
		case builtin && agentN != nil:
			d.errf(ECodeAgent, agentN, p+".agent", "give the described agent a name of its own, such as my-"+fl.key, "%s.agent: %s is a built-in provider; an agent described in the file needs another name", p, fl.key)
			continue
		case !idPattern().MatchString(fl.key):
			d.errf(ECodeBadName, fl.keyN, p, "use letters, digits, '.', '_' and '-'", "provider name %q has characters it may not have", fl.key)
			continue
		}
		pc := &ProviderConfig{}
		for _, pf := range d.fields(fl.value, p, []string{"command", "args", "base_url", "api_key", "exit_grace", "model", "agent", "ca_file"}) {
			kp := join(p, pf.key)
			switch pf.key {
			case "agent":
				pc.Agent = d.agent(fl.key, pf.value, kp)
			case "command":
				pc.Command = d.str(pf.value, kp)
			case "model":
				pc.Model = d.str(pf.value, kp)
			case "exit_grace":
				pc.ExitGrace = d.duration(pf.value, kp)
			case "args":
				pc.Args, _ = d.strList(pf.value, kp)
			case "base_url":
				pc.BaseURL = d.str(pf.value, kp)
				d.checkURL(pf.value, kp, pc.BaseURL)
			case "ca_file":
				pc.CAFile = f.abs(d.str(pf.value, kp))
				if msg := checkCABundle(pc.CAFile); msg == "" {
					pc.CAPEM, _ = os.ReadFile(pc.CAFile)
				} else {
					d.errf(ECodeProviderCA, pf.value, kp, "name a PEM file with the CA certificate(s) the upstream's certificate chains to (relative paths start at the factory file's folder)", "%s: %s", kp, msg)
				}
			case "api_key":
				if resolve(pf.value).Kind == yaml.MappingNode {
					pc.APIKey = d.secretRef(pf.value, kp)
				} else {
					d.errf(ECodeType, pf.value, kp, "store it with: kusaw config set "+kp+" --secret", "%s must reference the secret store ({secret: KEY}); never write a key in the file", kp)
				}
			}
		}
		f.Providers[fl.key] = pc
	}
}

func (d *decoder) checkURL(n *yaml.Node, path, s string) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		d.errf(ECodeBadURL, resolve(n), path, "write a URL such as https://api.example.com", "%s: %q is not an http(s) URL", path, s)
	}
}

func (d *decoder) setup(f *Factory, n *yaml.Node) {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.errf(ECodeType, n, "setup", "write a list of commands: [[npm, ci]]", "setup must be a list of commands, not %s", kindName(n))
		return
	}
	for i, c := range n.Content {
		ip := fmt.Sprintf("setup[%d]", i)
		argv, _ := d.strList(c, ip)
		if len(argv) == 0 {
			if resolve(c).Kind == yaml.SequenceNode {
				d.errf(ECodeMissing, c, ip, "write the command as [program, arg, ...]", "%s is empty", ip)
			}
			continue
		}
		f.Setup = append(f.Setup, argv)
	}
}

func (d *decoder) hostList(n *yaml.Node, path string) []HostEntry {
	raw, nodes := d.strList(n, path)
	var out []HostEntry
	for i, s := range raw {
		ip := fmt.Sprintf("%s[%d]", path, i)
		hp, err := ParseHostPattern(s)
		if err != nil {
			fix := "write a host name such as registry.npmjs.org or *.github.com"
			var he *HostPatternError
			if errors.As(err, &he) && he.Fix != "" {
				fix = he.Fix
			}
			d.errf(ECodeHostRefused, nodes[i], ip, fix, "%s: %v", ip, hostErrMsg(err))
			continue
		}
		out = append(out, HostEntry{Raw: s, Pattern: hp, Path: ip})
	}
	return out
}

func hostErrMsg(err error) string {
	var he *HostPatternError
	if errors.As(err, &he) {
		return he.Msg
	}
	return err.Error()
}

func (d *decoder) pathList(f *Factory, n *yaml.Node, path string, write bool) []string {
	raw, nodes := d.strList(n, path)
	var out []string
	for i, s := range raw {
		ip := fmt.Sprintf("%s[%d]", path, i)
		p := f.abs(s)
		if write {
			if err := CheckAllowWrite(p); err != nil {
				d.errf(ECodeAllowWrite, nodes[i], ip, "name a narrower folder that the step really must write (a cache or build folder)", "%s: %v", ip, err)
				continue
			}
		}
		if _, err := os.Stat(p); err != nil {
			d.errf(ECodePathMissing, nodes[i], ip, "create it or remove the entry (relative paths start at the factory file's folder)", "%s: %s does not exist", ip, p)
			continue
		}
		out = append(out, p)
	}
	return out
}

func (d *decoder) inject(n *yaml.Node, path string) []InjectEntry {
	n = resolve(n)
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!null" {
			return nil
		}
		if n.Value == "provider" {
			return []InjectEntry{{Provider: true}}
		}
		d.errf(ECodeBadValue, n, path, `write inject: provider, or a list of {host, header, secret, base_url_env, key_env}`, "%s: %q is not \"provider\" or a list", path, n.Value)
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errf(ECodeType, n, path, `write inject: provider, or a list of {host, header, secret, base_url_env, key_env}`, "%s must be \"provider\" or a list, not %s", path, kindName(n))
		return nil
	}
	var out []InjectEntry
	for i, c := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		c = resolve(c)
		if c.Kind == yaml.ScalarNode && c.Value == "provider" {
			out = append(out, InjectEntry{Provider: true})
			continue
		}
		e := InjectEntry{}
		for _, fl := range d.fields(c, ip, []string{"host", "header", "secret", "base_url", "base_url_env", "key_env"}) {
			kp := join(ip, fl.key)
			v := d.str(fl.value, kp)
			switch fl.key {
			case "host":
				e.Host = v
				if _, err := ParseHostPattern(v); err != nil || strings.HasPrefix(v, "*") {
					d.errf(ECodeHostRefused, fl.value, kp, "name one exact host such as api.example.com", "%s: %q cannot be an inject host", kp, v)
				}
			case "header":
				e.Header = v
			case "secret":
				e.Secret = v
			case "base_url":
				e.BaseURL = v
				if err := CheckInjectUpstream(v); err != nil {
					d.errf(ECodeBadURL, fl.value, kp, "write an https:// URL such as https://api.example.com: inject forwards the key only over verified TLS", "%s: %v", kp, err)
				}
			case "base_url_env", "key_env":
				if !envNamePattern().MatchString(v) {
					d.errf(ECodeBadName, fl.value, kp, "use an environment variable name such as API_BASE_URL", "%s: %q is not an environment variable name", kp, v)
				}
				if fl.key == "base_url_env" {
					e.BaseURLEnv = v
				} else {
					e.KeyEnv = v
				}
			}
		}
		for _, req := range []struct{ k, v string }{{"host", e.Host}, {"header", e.Header}, {"secret", e.Secret}, {"base_url_env", e.BaseURLEnv}, {"key_env", e.KeyEnv}} {
			if req.v == "" && c.Kind == yaml.MappingNode {
				d.errf(ECodeMissing, c, join(ip, req.k), "add "+req.k+" to the inject entry", "%s is missing", join(ip, req.k))
			}
		}
		out = append(out, e)
	}
	return out
}

func (d *decoder) sandbox(f *Factory, n *yaml.Node) {
	sp := &f.Sandbox
	for _, fl := range d.fields(n, "sandbox", []string{"mode", "network", "allow_read", "allow_write", "egress", "resources", "settings_scripts_writable"}) {
		kp := join("sandbox", fl.key)
		switch fl.key {
		case "mode":
			if m := d.enum(fl.value, kp, "off", "required"); m != "" {
				sp.Mode = Mode(m)
			}
		case "network":
			if m := d.enum(fl.value, kp, "open", "allowlist", "audit"); m != "" {
				sp.Network = Network(m)
			}
		case "allow_read":
			sp.AllowRead = d.pathList(f, fl.value, kp, false)
		case "allow_write":
			sp.AllowWrite = d.pathList(f, fl.value, kp, true)
		case "egress":
			d.egress(f, fl.value, kp)
		case "resources":
			sp.Resources = d.resources(fl.value, kp)
		case "settings_scripts_writable":
			raw, nodes := d.strList(fl.value, kp)
			for i, w := range raw {
				c := filepath.ToSlash(filepath.Clean(w))
				if filepath.IsAbs(w) || c == "." || c == ".." || strings.HasPrefix(c, "../") || c == ".git" || strings.HasPrefix(c, ".git/") {
					d.errf(ECodeBadValue, nodes[i], fmt.Sprintf("%s[%d]", kp, i), "write a path inside the repository, relative to its top, outside .git (such as tools/dist/)", "%s[%d]: %q is not a path inside a repository, or it is git's own folder", kp, i, w)
					continue
				}
				sp.SettingsScriptsWritable = append(sp.SettingsScriptsWritable, w)
			}
		}
	}
}

// resources reads sandbox.resources (factory or step).
func (d *decoder) resources(n *yaml.Node, path string) Resources {
	var r Resources
	for _, fl := range d.fields(n, path, []string{"pids", "memory", "cpu", "disk", "output"}) {
		kp := join(path, fl.key)
		switch fl.key {
		case "pids":
			r.Pids = d.integer(fl.value, kp)
		case "memory":
			r.Memory = d.size(fl.value, kp)
		case "cpu":
			r.CPU = d.integer(fl.value, kp)
		case "disk":
			r.Disk = d.size(fl.value, kp)
		case "output":
			r.Output = d.size(fl.value, kp)
		}
	}
	return r
}

func (d *decoder) egress(f *Factory, n *yaml.Node, path string) {
	e := &f.Sandbox.Egress
	for _, fl := range d.fields(n, path, []string{"allow", "provider_hosts", "inject", "allow_ranges", "resolver", "budgets", "upstream_proxy", "upstream_no_proxy"}) {
		kp := join(path, fl.key)
		switch fl.key {
		case "allow":
			e.Allow = d.hostList(fl.value, kp)
		case "provider_hosts":
			e.ProviderHosts = d.boolean(fl.value, kp)
		case "inject":
			e.Inject = d.inject(fl.value, kp)
		case "allow_ranges":
			raw, nodes := d.strList(fl.value, kp)
			for i, s := range raw {
				pfx, err := netip.ParsePrefix(s)
				if err != nil {
					d.errf(ECodeBadCIDR, nodes[i], fmt.Sprintf("%s[%d]", kp, i), "write a CIDR such as 10.20.0.0/16", "%s[%d]: %q is not a CIDR", kp, i, s)
					continue
				}
				e.AllowRanges = append(e.AllowRanges, pfx.Masked())
			}
		case "resolver":
			e.Resolver = d.str(fl.value, kp)
			if _, port, err := net.SplitHostPort(e.Resolver); err != nil || port == "" {
				d.errf(ECodeBadAddress, fl.value, kp, "write host:port, such as 127.0.0.1:53", "%s: %q is not host:port", kp, e.Resolver)
			}
		case "upstream_proxy":
			e.UpstreamProxy = d.upstreamProxy(fl.value, kp)
		case "upstream_no_proxy":
			e.UpstreamNoProxy = d.hostList(fl.value, kp)
		case "budgets":
			for _, bf := range d.fields(fl.value, kp, []string{"per_host", "total", "enabled"}) {
				bp := join(kp, bf.key)
				switch bf.key {
				case "per_host":
					e.Budgets.PerHost = d.size(bf.value, bp)
				case "total":
					e.Budgets.Total = d.size(bf.value, bp)
				case "enabled":
					e.Budgets.Enabled = d.boolean(bf.value, bp)
				}
			}
		}
	}
}

// upstreamProxy reads upstream_proxy: a URL, or {url, credentials}.
func (d *decoder) upstreamProxy(n *yaml.Node, path string) *UpstreamProxy {
	up := &UpstreamProxy{}
	urlNode, urlPath := n, path
	if resolve(n).Kind == yaml.MappingNode {
		urlNode = nil
		for _, fl := range d.fields(n, path, []string{"url", "credentials"}) {
			switch fl.key {
			case "url":
				urlNode, urlPath = fl.value, join(path, "url")
			case "credentials":
				up.Credentials = d.secretRef(fl.value, join(path, "credentials"))
			}
		}
		if urlNode == nil {
			d.errf(ECodeMissing, n, join(path, "url"), "add url: http://HOST:PORT", "%s.url is missing", path)
			return nil
		}
	}
	up.URL = d.str(urlNode, urlPath)
	if up.URL == "" {
		return nil
	}
	if msg, fix := CheckUpstreamProxyURL(up.URL); msg != "" {
		d.errf(ECodeUpstreamProxy, resolve(urlNode), urlPath, fix, "%s: %s", urlPath, msg)
		return nil
	}
	return up
}

// CheckUpstreamProxyURL says what is wrong with an upstream proxy URL and
// how to fix it ("" when it is usable).
func CheckUpstreamProxyURL(s string) (msg, fix string) {
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Host == "" || u.Opaque != "":
		return fmt.Sprintf("%q is not a URL", s), "write http://HOST:PORT, e.g. http://proxy.corp.example:3128"
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("%q: kusaw speaks to an upstream proxy over http:// or https://, not %s://", s, u.Scheme), "write http://HOST:PORT or https://HOST:PORT"
	case u.User != nil:
		return "credentials do not belong in the URL (it is printed and logged)", "write upstream_proxy: {url: " + u.Scheme + "://" + u.Host + ", credentials: {secret: KEY}} and kusaw config set KEY --secret (value user:password)"
	case u.Port() == "":
		return fmt.Sprintf("%q has no port", s), "write the proxy's port, e.g. " + u.Scheme + "://" + u.Hostname() + ":3128"
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return fmt.Sprintf("%q has a path, query or fragment; a proxy is only HOST:PORT", s), "write " + u.Scheme + "://" + u.Host
	}
	if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
		return fmt.Sprintf("%q: port %s is out of range", s, u.Port()), "write a port from 1 to 65535"
	}
	return "", ""
}

func (d *decoder) serve(f *Factory, n *yaml.Node) {
	for _, fl := range d.fields(n, "serve", []string{"max_parallel", "listen", "resume", "public_url", "cluster"}) {
		kp := join("serve", fl.key)
		switch fl.key {
		case "max_parallel":
			f.Serve.MaxParallel = d.integer(fl.value, kp)
			if f.Serve.MaxParallel < 0 {
				d.errf(ECodeBadValue, fl.value, kp, "use 0 for the number of cores, or a positive number", "%s must not be negative", kp)
			}
		case "listen":
			f.Serve.Listen = d.str(fl.value, kp)
			if _, _, err := net.SplitHostPort(f.Serve.Listen); f.Serve.Listen != "" && err != nil {
				d.errf(ECodeBadAddress, fl.value, kp, "write host:port, such as 127.0.0.1:7300", "%s: %q is not host:port", kp, f.Serve.Listen)
			}
		case "resume":
			f.Serve.Resume = d.boolean(fl.value, kp)
		case "public_url":
			f.Serve.PublicURL = d.str(fl.value, kp)
			d.checkURL(fl.value, kp, f.Serve.PublicURL)
		case "cluster":
			f.Serve.Cluster = d.cluster(f, fl.value, kp)
		}
	}
}

// cluster reads serve.cluster (docs/cluster.md).
func (d *decoder) cluster(f *Factory, n *yaml.Node, path string) *Cluster {
	c := &Cluster{LocalWorker: true, LostAfter: DefaultLostAfter, Replicas: 1}
	var urlN, firstExternal *yaml.Node
	firstKey, sawSigning := "", false
	seen := map[string]bool{}
	for _, fl := range d.fields(n, path, []string{"listen", "nats_url", "account", "signing_key", "ca", "replicas", "system_account", "system_key", "operator_key", "local_worker", "lost_after", "max_running"}) {
		kp := join(path, fl.key)
		switch fl.key {
		case "listen":
			c.Listen = d.str(fl.value, kp)
			if _, _, err := net.SplitHostPort(c.Listen); c.Listen != "" && err != nil {
				d.errf(ECodeBadAddress, fl.value, kp, "write host:port, such as 0.0.0.0:7422", "%s: %q is not host:port", kp, c.Listen)
			}
		case "nats_url":
			c.NatsURL, urlN = d.str(fl.value, kp), fl.value
			if bad := badNatsURL(c.NatsURL); bad != "" {
				d.errf(ECodeBadNatsURL, fl.value, kp, "write a URL such as tls://nats1.example:4222 (several: comma-separated)", "%s: %q is not a nats:// or tls:// URL", kp, bad)
			}
		case "account", "signing_key", "ca", "replicas", "system_account", "system_key", "operator_key":
			if firstExternal == nil {
				firstExternal, firstKey = fl.keyN, kp
			}
			sawSigning = sawSigning || fl.key == "signing_key"
			seen[fl.key] = true
			d.externalKey(f, c, fl.key, fl.value, kp)
		case "local_worker":
			c.LocalWorker = d.boolean(fl.value, kp)
		case "lost_after":
			c.LostAfter = d.duration(fl.value, kp)
			if c.LostAfter > 0 && c.LostAfter < time.Second {
				d.errf(ECodeBadValue, fl.value, kp, "use at least 1s (workers send a heartbeat every second)", "%s must be at least 1s", kp)
			}
			if c.LostAfter <= 0 {
				c.LostAfter = DefaultLostAfter
			}
		case "max_running":
			c.MaxRunning = d.integer(fl.value, kp)
			if c.MaxRunning < 0 {
				d.errf(ECodeBadValue, fl.value, kp, "use a number of attempts, or 0 (or no key) for the workers' slots alone", "%s must not be negative", kp)
			}
		}
	}
	if c.Listen != "" && c.NatsURL != "" {
		d.errf(ECodeBadNatsURL, urlN, join(path, "nats_url"), "keep one: listen embeds a NATS server, nats_url uses an existing one", "%s sets both listen and nats_url", path)
	}
	switch {
	case c.NatsURL == "" && firstExternal != nil:
		d.errf(ECodeNatsAccount, firstExternal, firstKey, "remove it, or set serve.cluster.nats_url: the key is for an existing NATS cluster", "%s is only for an existing NATS cluster (serve.cluster.nats_url), which is not set", firstKey)
	case c.NatsURL != "" && c.Account == "":
		d.errf(ECodeNatsAccount, urlN, join(path, "account"), "write account: A... (the public key of the NATS account serve works in; nsc describe account shows it)", "%s needs serve.cluster.account: the NATS account serve and its workers use", join(path, "nats_url"))
	case c.NatsURL != "" && !sawSigning:
		d.errf(ECodeNatsAccount, urlN, join(path, "signing_key"), "store the account's signing seed (SA...) with kusaw config set serve.cluster.signing_key --secret, which also writes the reference", "%s needs serve.cluster.signing_key: serve signs its own and its workers' credentials with it", join(path, "nats_url"))
	case c.NatsURL != "" && (seen["system_account"] || seen["system_key"] || seen["operator_key"]) && !(seen["system_account"] && seen["system_key"] && seen["operator_key"]):
		var missing []string
		for _, k := range []string{"system_account", "system_key", "operator_key"} {
			if !seen[k] {
				missing = append(missing, join(path, k))
			}
		}
		d.errf(ECodeNatsAccount, urlN, missing[0], "give system_account, system_key and operator_key together (kusaw cluster nats-config writes all three), or none of them", "%s: revoking retired workers needs %s too", path, strings.Join(missing, " and "))
	}
	return c
}

// badNatsURL is the first URL of a comma-separated list that is not a
// nats:// or tls:// URL with a host, or "".
func badNatsURL(list string) string {
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if u, err := url.Parse(s); err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" || u.User != nil {
			return s
		}
	}
	return ""
}

// externalKey reads one of the keys an existing NATS cluster needs:
// account, signing_key, ca, replicas.
func (d *decoder) externalKey(f *Factory, c *Cluster, key string, v *yaml.Node, kp string) {
	switch key {
	case "account":
		c.Account = d.str(v, kp)
		if c.Account != "" && !nkeys.IsValidPublicAccountKey(c.Account) {
			d.errf(ECodeNatsAccount, v, kp, "write the account's public key (56 characters starting with A; nsc describe account shows it)", "%s is not a NATS account's public key", kp)
		}
	case "signing_key":
		if resolve(v).Kind == yaml.MappingNode {
			c.SigningKey = d.secretRef(v, kp)
			return
		}
		// Never echo the value: it may be the seed itself.
		d.errf(ECodeNatsAccount, v, kp, "remove the value and store the seed with kusaw config set "+kp+" --secret, which writes {secret: "+kp+"} in its place", "%s must reference the secret store ({secret: KEY}); never write a seed in the file", kp)
	case "ca":
		c.CA = f.abs(d.str(v, kp))
		if msg := checkCABundle(c.CA); msg != "" {
			d.errf(ECodeNatsCA, v, kp, "name a PEM file with the CA certificate(s) the NATS servers' certificates chain to (relative paths start at the factory file's folder), or remove ca to trust the system's roots", "%s: %s", kp, msg)
		}
	case "system_account":
		c.SystemAccount = d.str(v, kp)
		if c.SystemAccount != "" && !nkeys.IsValidPublicAccountKey(c.SystemAccount) {
			d.errf(ECodeNatsAccount, v, kp, "write the system account's public key (56 characters starting with A; kusaw cluster nats-config writes it in serve-cluster.yaml)", "%s is not a NATS account's public key", kp)
		}
	case "system_key", "operator_key":
		if resolve(v).Kind == yaml.MappingNode {
			ref := d.secretRef(v, kp)
			if key == "system_key" {
				c.SystemKey = ref
			} else {
				c.OperatorKey = ref
			}
			return
		}
		d.errf(ECodeNatsAccount, v, kp, "remove the value and store the seed with kusaw config set "+kp+" --secret, which writes {secret: "+kp+"} in its place", "%s must reference the secret store ({secret: KEY}); never write a seed in the file", kp)
	case "replicas":
		c.Replicas = d.integer(v, kp)
		if c.Replicas < 1 || c.Replicas > 5 {
			d.errf(ECodeBadValue, v, kp, "use 1 to 5, at most the number of JetStream servers in the NATS cluster (3 for a cluster of three)", "%s must be from 1 to 5", kp)
		}
	}
}

// checkCABundle says what is wrong with a CA bundle file, or "".
func checkCABundle(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("%s cannot be read: %v", path, errors.Unwrap(err))
	}
	if _, err := ParseCABundle(b); err != nil {
		return fmt.Sprintf("%s: %v", path, err)
	}
	return ""
}

// ParseCABundle reads the certificates of a PEM bundle; it needs at least
// one, and refuses anything else in the file.
func ParseCABundle(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a %s: a CA bundle holds only certificates", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("a certificate does not parse: %v", err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return out, nil
}

// pipelineKeys are the keys of a pipeline written as a map; the list form
// is the shorthand for {steps: [...]}.
var pipelineKeys = []string{"steps", "limits", "deliver", "notify"}

func (d *decoder) pipelines(f *Factory, n *yaml.Node) {
	for _, fl := range d.fields(n, "pipelines", nil) {
		p := join("pipelines", fl.key)
		if !idPattern().MatchString(fl.key) {
			d.errf(ECodeBadName, fl.keyN, p, "use letters, digits, '.', '_' and '-'", "pipeline name %q has characters it may not have", fl.key)
			continue
		}
		pl := &Pipeline{Name: fl.key}
		stepsN, stepsPath := fl.value, p
		if v := resolve(fl.value); v != nil && v.Kind == yaml.MappingNode {
			stepsN, stepsPath = nil, join(p, "steps")
			for _, kv := range d.fields(v, p, pipelineKeys) {
				switch kv.key {
				case "steps":
					stepsN = kv.value
				case "limits":
					pl.Limits = d.limits(kv.value, join(p, "limits"))
				case "deliver":
					pl.Deliver = d.deliver(f, kv.value, join(p, "deliver"))
				case "notify":
					pl.Notify = d.notifyList(kv.value, join(p, "notify"))
				}
			}
		}
		if stepsN != nil {
			pl.Steps = d.pipelineItems(f, stepsN, stepsPath, fl.key)
		}
		if len(pl.Steps) == 0 {
			at := fl.value
			if stepsN != nil {
				at = stepsN
			}
			d.errf(ECodeEmptyPipeline, at, stepsPath, "list at least one step: [step-a, step-b]", "pipeline %s has no steps", fl.key)
		}
		f.Pipelines[fl.key] = pl
		f.PipelineOrder = append(f.PipelineOrder, fl.key)
	}
}

// pipelineItems reads a pipeline's list: each item a step id, or a list of
// step ids that run at the same time (a parallel group).
func (d *decoder) pipelineItems(f *Factory, n *yaml.Node, p, name string) []PipelineItem {
	n = resolve(n)
	if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errf(ECodeType, n, p, "write a list: [step-a, [step-b, step-c], step-d]", "%s must be a list, not %s", p, kindName(n))
		return nil
	}
	known := func(id string, node *yaml.Node, ip string) {
		if _, ok := f.Steps[id]; !ok {
			fix := "define steps." + id + ", or fix the name"
			if s := closest(id, f.StepOrder); s != "" {
				fix = "did you mean " + s + "?"
			}
			d.errf(ECodeUnknownStep, node, ip, fix, "pipeline %s names unknown step %q", name, id)
		}
	}
	var items []PipelineItem
	for i, c := range n.Content {
		ip := fmt.Sprintf("%s[%d]", p, i)
		c = resolve(c)
		if c.Kind == yaml.SequenceNode {
			ids, nodes := d.strList(c, ip)
			if len(ids) < 2 {
				d.errf(ECodeGroup, c, ip, "list two or more steps in a parallel group, or write the step id alone", "pipeline %s: a parallel group needs at least two steps", name)
			}
			seen := map[string]bool{}
			for j, id := range ids {
				if seen[id] {
					d.errf(ECodeGroup, nodes[j], fmt.Sprintf("%s[%d]", ip, j), "name each step once in a group; use candidates: N to run one step several times", "pipeline %s names step %s twice in one parallel group", name, id)
				}
				seen[id] = true
				known(id, nodes[j], fmt.Sprintf("%s[%d]", ip, j))
			}
			d.pos[ip] = Pos{c.Line, c.Column}
			items = append(items, PipelineItem{Group: ids})
			continue
		}
		if c.Kind != yaml.ScalarNode || c.Tag == "!!null" {
			d.errf(ECodeType, c, ip, "write a step id, or a list of step ids for a parallel group", "%s must be a step id or a list of step ids, not %s", ip, kindName(c))
			continue
		}
		d.pos[ip] = Pos{c.Line, c.Column}
		known(c.Value, c, ip)
		items = append(items, PipelineItem{Step: c.Value})
	}
	return items
}

var stepKeys = append([]string{"provider", "builtin", "run", "prompt", "prompt_file", "repos", "per_repo", "attempts", "timeout", "env", "sandbox", "requires", "limits", "pool", "caches", "ports"}, shapeKeys...)

func (d *decoder) steps(f *Factory, n *yaml.Node) {
	for _, fl := range d.fields(n, "steps", nil) {
		p := join("steps", fl.key)
		if !idPattern().MatchString(fl.key) {
			d.errf(ECodeBadName, fl.keyN, p, "use letters, digits, '.', '_' and '-'", "step id %q has characters it may not have", fl.key)
			continue
		}
		s := &Step{ID: fl.key, Attempts: 1, Env: map[string]EnvValue{}}
		kinds := 0
		var kindNode *yaml.Node = fl.value
		for _, sf := range d.fields(fl.value, p, stepKeys) {
			kp := join(p, sf.key)
			switch sf.key {
			case "provider":
				s.Provider = d.str(sf.value, kp)
				if !f.KnowsProvider(s.Provider) {
					d.errf(ECodeUnknownProvider, sf.value, kp, "known providers: "+strings.Join(f.ProviderChoices(), ", ")+"; or describe it under providers."+s.Provider+".agent", "unknown provider %q", s.Provider)
				}
			case "builtin":
				kinds++
				kindNode = sf.value
				s.Builtin = d.str(sf.value, kp)
				if !contains(BuiltinNames, s.Builtin) {
					d.errf(ECodeUnknownBuiltin, sf.value, kp, "built-in steps: "+strings.Join(BuiltinNames, ", "), "unknown built-in step %q", s.Builtin)
				}
			case "run":
				kinds++
				kindNode = sf.value
				s.Run, _ = d.strList(sf.value, kp)
				if len(s.Run) == 0 && resolve(sf.value).Kind == yaml.SequenceNode {
					d.errf(ECodeMissing, sf.value, kp, "write the command as [program, arg, ...]", "%s is empty", kp)
				}
			case "prompt":
				s.Prompt = d.str(sf.value, kp)
			case "prompt_file":
				pf := d.str(sf.value, kp)
				s.PromptFile = f.abs(pf)
				if _, err := os.Stat(s.PromptFile); err != nil {
					d.errf(ECodePathMissing, sf.value, kp, "create the file or fix the path (relative to the factory file's folder)", "%s: %s does not exist", kp, s.PromptFile)
				}
			case "repos":
				var nodes []*yaml.Node
				s.Repos, nodes = d.strList(sf.value, kp)
				seen := map[string]bool{}
				for i, r := range s.Repos {
					ip := fmt.Sprintf("%s[%d]", kp, i)
					if seen[r] {
						d.errf(ECodeDuplicate, nodes[i], ip, "list each repo once", "%s names repo %s twice", kp, r)
					}
					seen[r] = true
					if _, ok := f.Repos[r]; !ok {
						fix := "define repos." + r + ", or fix the name"
						if c := closest(r, f.RepoOrder); c != "" {
							fix = "did you mean " + c + "?"
						}
						d.errf(ECodeUnknownRepo, nodes[i], ip, fix, "%s names unknown repo %q", kp, r)
					}
				}
			case "per_repo":
				s.PerRepo = d.boolean(sf.value, kp)
			case "attempts":
				s.Attempts = d.integer(sf.value, kp)
				if s.Attempts < 1 || s.Attempts > 100 {
					d.errf(ECodeBadValue, sf.value, kp, "use a number from 1 to 100", "%s must be from 1 to 100", kp)
					s.Attempts = 1
				}
			case "timeout":
				s.Timeout = d.duration(sf.value, kp)
			case "pool":
				s.Pool = d.str(sf.value, kp)
				if !poolPattern().MatchString(s.Pool) {
					d.errf(ECodeBadName, sf.value, kp, "use letters, digits, '_' and '-' (at most 64)", "pool name %q has characters it may not have", s.Pool)
				}
			case "limits":
				s.Limits = d.limits(sf.value, kp)
			case "caches":
				s.Caches = d.caches(f, sf.value, kp)
			case "ports":
				s.Ports = d.integer(sf.value, kp)
				if s.Ports < 0 || s.Ports > MaxPorts {
					d.errf(ECodeBadValue, sf.value, kp, fmt.Sprintf("lease 1 to %d ports", MaxPorts), "%s must be between 0 and %d", kp, MaxPorts)
					s.Ports = 0
				}
			case "env":
				d.env(s, sf.value, kp)
			case "sandbox":
				s.Sandbox = d.stepSandbox(f, sf.value, kp)
			default:
				d.stepShape(s, sf.key, sf.value, kp)
			case "requires":
				var nodes []*yaml.Node
				s.Requires, nodes = d.strList(sf.value, kp)
				for i, c := range s.Requires {
					if !contains(Capabilities, c) {
						d.errf(ECodeUnknownCap, nodes[i], fmt.Sprintf("%s[%d]", kp, i), "capabilities: "+strings.Join(Capabilities, ", "), "unknown capability %q", c)
					}
				}
			}
		}
		if kinds > 1 || (kinds == 1 && (s.Provider != "" || s.Prompt != "" || s.PromptFile != "")) {
			d.errf(ECodeStepKind, kindNode, p, "keep one of: provider/prompt (agent step), builtin, run (command step)", "step %s is more than one kind of step", s.ID)
		}
		if s.Kind() == KindAgent && kinds == 0 {
			if s.Provider == "" {
				s.Provider = DefaultProvider
			}
			if (s.Prompt == "") == (s.PromptFile == "") && resolve(fl.value).Kind == yaml.MappingNode {
				d.errf(ECodeNoPrompt, fl.value, p, "give an agent step exactly one of prompt or prompt_file (or make it a run: or builtin: step)", "agent step %s needs exactly one of prompt and prompt_file", s.ID)
			}
		}
		f.Steps[s.ID] = s
		f.StepOrder = append(f.StepOrder, s.ID)
	}
}

var reservedSecretEnv = []string{"PATH", "HOME", "NODE_OPTIONS"}

func (d *decoder) env(s *Step, n *yaml.Node, path string) {
	for _, fl := range d.fields(n, path, nil) {
		kp := join(path, fl.key)
		if !envNamePattern().MatchString(fl.key) {
			d.errf(ECodeBadName, fl.keyN, kp, "use letters, digits and '_', not starting with a digit", "%q is not an environment variable name", fl.key)
			continue
		}
		v := resolve(fl.value)
		if v.Kind == yaml.MappingNode {
			ref := d.secretRef(v, kp)
			if ref == nil {
				continue
			}
			if contains(reservedSecretEnv, fl.key) || strings.HasPrefix(fl.key, "LD_") || strings.HasPrefix(fl.key, "DYLD_") {
				d.errf(ECodeBadName, fl.keyN, kp, "use another variable name for the secret", "%s cannot hold a secret: it changes how programs start", fl.key)
				continue
			}
			s.Env[fl.key] = EnvValue{Secret: ref}
		} else {
			s.Env[fl.key] = EnvValue{Value: d.str(v, kp)}
		}
		s.EnvOrder = append(s.EnvOrder, fl.key)
	}
}

func (d *decoder) stepSandbox(f *Factory, n *yaml.Node, path string) *StepSandbox {
	n = resolve(n)
	ss := &StepSandbox{}
	if n.Kind == yaml.ScalarNode {
		ss.Mode = Mode(d.enum(n, path, "off", "required"))
		return ss
	}
	for _, fl := range d.fields(n, path, []string{"mode", "network", "allow_read", "allow_write", "egress", "resources"}) {
		kp := join(path, fl.key)
		switch fl.key {
		case "resources":
			r := d.resources(fl.value, kp)
			ss.Resources = &r
		case "mode":
			ss.Mode = Mode(d.enum(fl.value, kp, "off", "required"))
		case "network":
			ss.Network = Network(d.enum(fl.value, kp, "open", "allowlist", "audit"))
		case "allow_read":
			ss.AllowRead = d.pathList(f, fl.value, kp, false)
		case "allow_write":
			ss.AllowWrite = d.pathList(f, fl.value, kp, true)
		case "egress":
			for _, ef := range d.fields(fl.value, kp, []string{"allow", "inject"}) {
				ep := join(kp, ef.key)
				switch ef.key {
				case "allow":
					ss.Allow = d.hostList(ef.value, ep)
				case "inject":
					ss.Inject = d.inject(ef.value, ep)
					ss.InjectSet = true
				}
			}
		}
	}
	return ss
}

// needsModel are the providers whose CLI has no model of its own that
// kusaw could fall back on: opencode reaches the model through a provider
// of kusaw's in its configuration, which lists exactly one model.
var needsModel = map[string]string{"opencode": "gpt-5"}

// checkProviderModel refuses an agent step whose provider needs
// providers.NAME.model when it is unset (once per provider): the step
// would fail at its start instead.
func (d *decoder) checkProviderModel(f *Factory, s *Step, done map[string]bool) {
	if s.Kind() != KindAgent {
		return
	}
	for _, name := range append([]string{s.Provider}, s.CandidateProviders...) {
		eg, ok := needsModel[name]
		if !ok || done[name] {
			continue
		}
		if pc := f.Providers[name]; pc != nil && pc.Model != "" {
			continue
		}
		done[name] = true
		p := join("providers", name)
		at := f.posNode(join(p, "model"), p, join(join("steps", s.ID), "provider"), join("steps", s.ID))
		d.errf(ECodeProviderModel, at, join(p, "model"), fmt.Sprintf("set %s.model to a model your API serves, e.g. %s: {model: %s}", p, p, eg),
			"step %s runs %s, which needs %s.model: kusaw's provider in its configuration lists the one model the step uses", s.ID, name, p)
	}
}

// crossChecks are the rules that look at more than one key.
func (d *decoder) crossChecks(f *Factory) {
	upstreamChecked, modelChecked := map[string]bool{}, map[string]bool{}
	for _, id := range f.StepOrder {
		s := f.Steps[id]
		p := join("steps", id)
		net := f.StepNetwork(s)
		hasInject := len(f.Inject(s)) > 0
		d.checkProviderUpstream(f, s, upstreamChecked)
		d.checkProviderModel(f, s, modelChecked)
		if hasInject && !net.Proxied() {
			at := f.posNode(join(p, "sandbox"), "sandbox.egress.inject")
			d.errf(ECodeInjectNeedsList, at, p, "set network: allowlist for this step (sandbox.network or steps."+id+".sandbox.network)", "step %s injects a key but its network is not allowlist: there is no proxy to hold the key", id)
		}
		if contains(s.Requires, "network") && net != NetworkAllowlist {
			// audit admits every host, so it restricts nothing either.
			d.errf(ECodeNetworkOpen, f.posNode(join(p, "requires"), p), join(p, "requires"), "set steps."+id+".sandbox: {mode: required, network: allowlist}", "step %s requires network, but its network is %s: nothing restricts it", id, net)
		}
		if contains(s.Requires, "sandbox") {
			for _, a := range f.Attempts(s) {
				if m, _ := f.EffectiveMode(s, a); m != ModeRequired {
					d.errf(ECodeCapMissing, f.posNode(join(p, "requires"), p), join(p, "requires"), "set steps."+id+".sandbox: required", "step %s requires sandbox, but its effective sandbox mode is off", id)
					break
				}
			}
		}
		if net.Proxied() {
			for _, a := range f.Attempts(s) {
				if m, origin := f.EffectiveMode(s, a); m == ModeOff {
					d.add(SevWarning, WCodeNoRestriction, f.posNode(join(p, "sandbox"), "sandbox.network"), p,
						"set the step's sandbox to required, or its network to open", "step %s has network: %s but its sandbox is off (%s): the network is open", id, net, origin)
					break
				}
			}
		}
	}
	d.checkWriteLayers(f)
	used := map[string]bool{}
	for _, pl := range f.Pipelines {
		for _, id := range pl.StepIDs() {
			used[id] = true
			// The helpers a shape runs are used with it.
			if s := f.Steps[id]; s != nil {
				for _, h := range []string{s.OnFailure, s.Judge, s.Resolve} {
					if h != "" {
						used[h] = true
					}
				}
			}
		}
	}
	for _, id := range f.StepOrder {
		if !used[id] {
			d.add(SevWarning, WCodeUnusedStep, f.posNode("steps."+id, ""), "steps."+id, "add it to a pipeline or remove it", "step %s is in no pipeline", id)
		}
	}
}

// posNode makes a stand-in node carrying the position of the first key path
// that has one.
func (f *Factory) posNode(paths ...string) *yaml.Node {
	for _, p := range paths {
		if pos, ok := f.pos[p]; ok {
			return &yaml.Node{Line: pos.Line, Column: pos.Column}
		}
	}
	return nil
}

var yamlLineRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`line (\d+)(?::(\d+))?`) })

func yamlErrPos(err error) (int, int) {
	m := yamlLineRE().FindStringSubmatch(err.Error())
	if m == nil {
		return 0, 0
	}
	var l, c int
	fmt.Sscan(m[1], &l)
	if m[2] != "" {
		fmt.Sscan(m[2], &c)
	} else {
		c = 1
	}
	return l, c
}

func yamlErrMsg(err error) string {
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	s = yamlLineRE().ReplaceAllString(s, "")
	s = strings.TrimLeft(s, ": ")
	return strings.Join(strings.Fields(s), " ")
}

// stateDirMode reads state_dir_mode: an octal folder mode that keeps the
// owner's rwx and gives no one else write (the records are kusaw's proof).
func (d *decoder) stateDirMode(n *yaml.Node) os.FileMode {
	s := d.str(n, "state_dir_mode")
	if s == "" {
		return 0
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m&^0o777 != 0 || m&0o700 != 0o700 || m&0o022 != 0 {
		d.errf(ECodeBadValue, n, "state_dir_mode", `give an octal folder mode with the owner's rwx and no write for others, e.g. "0750" to share the records with your group; leave it out to keep them private (0700)`,
			"state_dir_mode %q is not a usable folder mode", s)
		return 0
	}
	return os.FileMode(m)
}

// mapValue is the value of key in a mapping node, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if resolve(n.Content[i]).Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// checkProviderUpstream refuses, once per provider, a base_url that a step
// of that provider injects its key to and the proxy would refuse at the
// run (CheckInjectUpstream), with the proxy's words.
func (d *decoder) checkProviderUpstream(f *Factory, s *Step, done map[string]bool) {
	pc := f.Providers[s.Provider]
	if s.Provider == "" || pc == nil || pc.BaseURL == "" || done[s.Provider] {
		return
	}
	for _, e := range f.Inject(s) {
		if !e.Provider {
			continue
		}
		done[s.Provider] = true
		if err := CheckInjectUpstream(pc.BaseURL); err != nil {
			kp := join(join("providers", s.Provider), "base_url")
			d.errf(ECodeBadURL, f.posNode(kp, join("providers", s.Provider)), kp,
				"write an https:// URL such as https://gateway.example.com (a private CA: providers."+s.Provider+".ca_file)",
				"%s: %v: step %s injects the key there, and inject forwards it only over verified TLS", kp, err, s.ID)
		}
		return
	}
}
