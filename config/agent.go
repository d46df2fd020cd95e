package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// The keys of providers.NAME.agent and its parts.
var (
	agentKeys       = []string{"argv", "stream", "key_env", "base_url_env", "login_token_env", "env", "login_folders", "egress_hosts", "handshake_hosts", "sandbox_off_args", "inject"}
	agentStreamKeys = []string{"format", "result", "success", "text", "session", "usage"}
	agentUsageKeys  = []string{"input_tokens", "output_tokens", "cache_read_tokens", "cost_usd"}
	agentInjectKeys = []string{"host", "header", "upstream"}
)

// Compiled on first use, not at every start of kusaw.
var placeholderRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{[a-z_]+\}`) })

// agent reads providers.NAME.agent: an agent CLI described as data. Every
// refusal is E092 unless a general code (type, name, host) says it better.
func (d *decoder) agent(name string, n *yaml.Node, path string) *Agent {
	a := &Agent{Format: AgentJSONL}
	var argvN, streamN *yaml.Node
	bad := func(at *yaml.Node, kp, fix, format string, args ...any) {
		d.errf(ECodeAgent, at, kp, fix, format, args...)
	}
	for _, fl := range d.fields(n, path, agentKeys) {
		kp := join(path, fl.key)
		switch fl.key {
		case "argv":
			argvN = fl.value
			var nodes []*yaml.Node
			a.Argv, nodes = d.strList(fl.value, kp)
			for i, s := range a.Argv {
				for _, ph := range placeholderRe().FindAllString(s, -1) {
					if !contains(AgentPlaceholders, ph) {
						bad(nodes[i], fmt.Sprintf("%s[%d]", kp, i), "use "+strings.Join(AgentPlaceholders, ", "), "%s[%d]: unknown placeholder %s", kp, i, ph)
					}
				}
			}
		case "stream":
			streamN = fl.value
			d.agentStream(a, fl.value, kp)
		case "key_env":
			a.KeyEnv = d.envName(fl.value, kp)
		case "base_url_env":
			a.BaseURLEnv = d.envName(fl.value, kp)
		case "login_token_env":
			names, nodes := d.strList(fl.value, kp)
			for i, s := range names {
				if !envNamePattern().MatchString(s) {
					d.errf(ECodeBadName, nodes[i], fmt.Sprintf("%s[%d]", kp, i), "use letters, digits and '_', not starting with a digit", "%q is not an environment variable name", s)
					continue
				}
				a.LoginTokenEnv = append(a.LoginTokenEnv, s)
			}
		case "env":
			for _, ef := range d.fields(fl.value, kp, nil) {
				ep := join(kp, ef.key)
				if !envNamePattern().MatchString(ef.key) {
					d.errf(ECodeBadName, ef.keyN, ep, "use letters, digits and '_', not starting with a digit", "%q is not an environment variable name", ef.key)
					continue
				}
				a.Env = append(a.Env, ef.key+"="+d.str(ef.value, ep))
			}
		case "login_folders":
			folders, nodes := d.strList(fl.value, kp)
			for i, s := range folders {
				ip := fmt.Sprintf("%s[%d]", kp, i)
				if err := CheckLoginFolder(s); err != nil {
					bad(nodes[i], ip, "name the CLI's own state folder under the home, such as ~/."+name, "%s: %v", ip, err)
					continue
				}
				a.LoginFolders = append(a.LoginFolders, s)
			}
		case "egress_hosts":
			for _, h := range d.hostList(fl.value, kp) {
				a.EgressHosts = append(a.EgressHosts, h.Raw)
			}
		case "handshake_hosts":
			for _, h := range d.hostList(fl.value, kp) {
				a.HandshakeHosts = append(a.HandshakeHosts, h.Raw)
			}
		case "sandbox_off_args":
			a.SandboxOffArgs, _ = d.strList(fl.value, kp)
		case "inject":
			for _, jf := range d.fields(fl.value, kp, agentInjectKeys) {
				jp := join(kp, jf.key)
				switch jf.key {
				case "host":
					a.InjectHost = d.str(jf.value, jp)
					if _, err := ParseHostPattern(a.InjectHost); err != nil || strings.Contains(a.InjectHost, "*") {
						d.errf(ECodeHostRefused, resolve(jf.value), jp, "write the API's host name, such as api.openai.com", "%s: %q is not a host name", jp, a.InjectHost)
					}
				case "header":
					a.InjectHeader = d.str(jf.value, jp)
				case "upstream":
					a.InjectUpstream = d.str(jf.value, jp)
					d.checkURL(jf.value, jp, a.InjectUpstream)
				}
			}
		}
	}
	d.agentChecks(name, a, n, argvN, streamN, path)
	return a
}

func (d *decoder) envName(n *yaml.Node, kp string) string {
	s := d.str(n, kp)
	if s != "" && !envNamePattern().MatchString(s) {
		d.errf(ECodeBadName, resolve(n), kp, "use letters, digits and '_', not starting with a digit", "%q is not an environment variable name", s)
		return ""
	}
	return s
}

func (d *decoder) agentStream(a *Agent, n *yaml.Node, path string) {
	ptr := func(v *yaml.Node, kp string, withValue bool) string {
		s := d.str(v, kp)
		p := s
		if withValue {
			p, _, _ = strings.Cut(s, "=")
		}
		if s != "" && !strings.HasPrefix(p, "/") {
			eg := "/key/sub"
			if withValue {
				eg = "/type=result"
			}
			d.errf(ECodeAgent, resolve(v), kp, "write a JSON pointer such as "+eg, "%s: %q is not a JSON pointer (it starts with /)", kp, s)
			return ""
		}
		return s
	}
	for _, fl := range d.fields(n, path, agentStreamKeys) {
		kp := join(path, fl.key)
		switch fl.key {
		case "format":
			a.Format = d.enum(fl.value, kp, AgentJSONL, AgentText)
		case "result":
			a.Result = ptr(fl.value, kp, true)
		case "success":
			a.Success = ptr(fl.value, kp, true)
		case "text":
			a.Text = ptr(fl.value, kp, false)
		case "session":
			a.Session = ptr(fl.value, kp, false)
		case "usage":
			for _, uf := range d.fields(fl.value, kp, agentUsageKeys) {
				up := join(kp, uf.key)
				v := ptr(uf.value, up, false)
				switch uf.key {
				case "input_tokens":
					a.InputTokens = v
				case "output_tokens":
					a.OutputTokens = v
				case "cache_read_tokens":
					a.CacheReadTokens = v
				case "cost_usd":
					a.CostUSD = v
				}
			}
		}
	}
}

// agentChecks are the checks across an agent's keys.
func (d *decoder) agentChecks(name string, a *Agent, n, argvN, streamN *yaml.Node, path string) {
	at := func(x *yaml.Node) *yaml.Node {
		if x != nil {
			return resolve(x)
		}
		return resolve(n)
	}
	switch {
	case argvN == nil:
		d.errf(ECodeMissing, at(nil), path+".argv", "add argv: [program, ..., \"{prompt}\"]", "%s has no argv: kusaw does not know how to run the agent", path)
	case len(a.Argv) > 0 && !strings.Contains(strings.Join(a.Argv[1:], "\x00"), "{prompt"):
		d.errf(ECodeAgent, at(argvN), path+".argv", `add "{prompt}" (the prompt as an argument) or "{prompt_file}" (a file holding it)`, "%s.argv names neither {prompt} nor {prompt_file}: the agent would never get the step's prompt", path)
	case len(a.Argv) > 0 && placeholderRe().MatchString(a.Argv[0]):
		d.errf(ECodeAgent, at(argvN), path+".argv[0]", "start argv with the program", "%s.argv[0] must be the program, not %s", path, a.Argv[0])
	}
	sp := path + ".stream"
	if a.Format == AgentJSONL && a.Result == "" {
		d.errf(ECodeAgent, at(streamN), sp+".result", `say which line is the result, e.g. result: "/type=result" (or stream: {format: text} to let the exit code decide)`, "%s: with format jsonl, kusaw needs the result line's pointer", sp)
	}
	if a.Format == AgentText && (a.Result != "" || a.Success != "" || a.Text != "" || a.Session != "" || a.InputTokens != "" || a.OutputTokens != "" || a.CacheReadTokens != "" || a.CostUSD != "") {
		d.errf(ECodeAgent, at(streamN), sp, "remove the pointers, or set format: jsonl", "%s: format text has no lines to point into; result, success, text, session and usage are read with format jsonl only", sp)
	}
	ip := path + ".inject"
	if a.InjectHost != "" || a.InjectHeader != "" || a.InjectUpstream != "" {
		switch {
		case a.InjectHost == "" || a.InjectHeader == "":
			d.errf(ECodeAgent, at(n), ip, "set inject: {host: API_HOST, header: Authorization}", "%s needs both host and header", ip)
		case a.KeyEnv == "" || a.BaseURLEnv == "":
			d.errf(ECodeAgent, at(n), ip, "set key_env and base_url_env: the variables the CLI reads its key and base URL from", "%s: the proxy can hold %s's key only when kusaw can point the CLI at it: key_env and base_url_env are needed", ip, name)
		}
	}
	for _, kv := range a.Env {
		k, _, _ := strings.Cut(kv, "=")
		if k == a.KeyEnv || k == a.BaseURLEnv || contains(a.LoginTokenEnv, k) {
			d.errf(ECodeAgent, at(n), path+".env."+k, "put the key in the step's env as {secret: KEY}, or use inject", "%s.env.%s: a key, token or base URL variable is never written in the file", path, k)
		}
	}
}

// CheckLoginFolder refuses a login folder kusaw would mount read/write
// into the sandbox although it is not the CLI's own: anything outside the
// home, the home itself, credential and start-up files, another agent's
// folder.
func CheckLoginFolder(s string) error {
	rest, ok := strings.CutPrefix(s, "~/")
	if !ok {
		return fmt.Errorf("%q is not under the home (write ~/.FOLDER)", s)
	}
	rest = filepath.Clean(rest)
	if rest == "." || strings.HasPrefix(rest, "..") {
		return fmt.Errorf("%q is the home directory or above it", s)
	}
	for _, r := range homeRefused {
		// .config and Library hold every program's settings: a folder of
		// the agent's own below them is fine, the whole of them never.
		if rest == r || (r != ".config" && r != "Library" && strings.HasPrefix(rest, r+"/")) {
			return fmt.Errorf("%q is a credential, start-up or another agent's settings path", s)
		}
	}
	return nil
}
