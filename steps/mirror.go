package steps

import (
	"bufio"
	"bytes"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
)

// Lookup reads one variable of the user's environment (os.LookupEnv).
type Lookup func(string) (string, bool)

// goDefaults are the Go settings kusaw init assumes when the user's are
// these: proxy.golang.org and sum.golang.org, already in the allowlist.
var goDefaults = map[string]string{"GOPROXY": "https://proxy.golang.org,direct", "GOSUMDB": "sum.golang.org"}

// goMirrorVars are the Go settings that say where modules come from. Only
// the step's env reaches the sandbox (and the home folder's content is
// hidden there), so a user's own values are written into the step.
var goMirrorVars = []string{"GOPROXY", "GOSUMDB", "GOPRIVATE", "GONOPROXY", "GONOSUMDB", "GOINSECURE"}

// Mirror adjusts an ecosystem found by Detect to the package mirror the
// user's tools use on this machine: a GOPROXY or npm registry of their own
// (in the environment, in go env -w's file, in ~/.npmrc) replaces the
// public hosts in Hosts and is carried into Env, which the checks step
// sets (the sandbox passes on nothing else). A registry named in the
// repository's own .npmrc is read by npm inside the worktree: only its
// host is added. home is the user's home folder.
func Mirror(eco Ecosystem, dir, home string, lookup Lookup) Ecosystem {
	switch {
	case fileExists(filepath.Join(dir, "go.mod")):
		return goMirror(eco, home, lookup)
	case fileExists(filepath.Join(dir, "package.json")):
		return npmMirror(eco, dir, home, lookup)
	}
	return eco
}

func goMirror(eco Ecosystem, home string, lookup Lookup) Ecosystem {
	file := goEnvFile(home, lookup)
	vals := map[string]string{}
	for _, k := range goMirrorVars {
		// As go reads them: an empty variable leaves the file's value.
		v, _ := lookup(k)
		if v == "" {
			v = file[k]
		}
		if v != "" && v != goDefaults[k] {
			vals[k] = v
		}
	}
	if len(vals) == 0 {
		return eco
	}
	eco.Env = map[string]string{}
	for k, v := range vals {
		eco.Env[k] = v
	}
	var hosts []string
	proxy := goDefaults["GOPROXY"]
	if v, ok := vals["GOPROXY"]; ok {
		proxy = v
	}
	for _, p := range strings.FieldsFunc(proxy, func(r rune) bool { return r == ',' || r == '|' }) {
		if h := urlEntry(p); h != "" {
			hosts = appendNew(hosts, h)
		}
	}
	sumdb := goDefaults["GOSUMDB"]
	if v, ok := vals["GOSUMDB"]; ok {
		sumdb = v
	}
	// GOSUMDB is off, a name (sum.golang.org, a name+key) or a name+key
	// and the URL it is served at.
	if f := strings.Fields(sumdb); len(f) > 0 && f[0] != "off" {
		if len(f) > 1 {
			hosts = appendNew(hosts, urlEntry(f[1]))
		} else if name, _, _ := strings.Cut(f[0], "+"); name != "" {
			hosts = appendNew(hosts, name)
		}
	}
	eco.Hosts = hosts
	return eco
}

// goEnvFile reads the file go env -w writes ($GOENV, else
// <config>/go/env): KEY=VALUE lines.
func goEnvFile(home string, lookup Lookup) map[string]string {
	p, ok := lookup("GOENV")
	if p == "off" {
		return nil
	}
	if !ok || p == "" {
		cfg, ok := lookup("XDG_CONFIG_HOME")
		if !ok || cfg == "" {
			cfg = filepath.Join(home, ".config")
		}
		p = filepath.Join(cfg, "go", "env")
	}
	b, err := readSmall(p)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			out[k] = v
		}
	}
	return out
}

const npmDefaultRegistry = "https://registry.npmjs.org/"

func npmMirror(eco Ecosystem, dir, home string, lookup Lookup) Ecosystem {
	reg, fromRepo := "", false
	for _, k := range []string{"npm_config_registry", "NPM_CONFIG_REGISTRY"} {
		if v, ok := lookup(k); ok && v != "" {
			reg = v
			break
		}
	}
	if reg == "" {
		if v := npmrcRegistry(filepath.Join(dir, ".npmrc")); v != "" {
			reg, fromRepo = v, true
		}
	}
	if reg == "" {
		user, ok := lookup("npm_config_userconfig")
		if !ok || user == "" {
			user = filepath.Join(home, ".npmrc")
		}
		reg = npmrcRegistry(user)
	}
	if reg == "" || strings.TrimSuffix(reg, "/") == strings.TrimSuffix(npmDefaultRegistry, "/") {
		return eco
	}
	h := urlEntry(reg)
	if h == "" {
		return eco
	}
	// Hosts the lockfile names stay: a registry.npmjs.org in its
	// resolved URLs is fetched from there.
	hosts := []string{h}
	for _, old := range eco.Hosts {
		if old != "registry.npmjs.org" && old != "registry.yarnpkg.com" {
			hosts = appendNew(hosts, old)
		}
	}
	eco.Hosts = hosts
	if !fromRepo {
		eco.Env = map[string]string{"npm_config_registry": reg}
	}
	return eco
}

// npmrcRegistry is the registry= line of an .npmrc, "" when it has none.
func npmrcRegistry(p string) string {
	b, err := readSmall(p)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	reg := ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && strings.TrimSpace(k) == "registry" {
			reg = strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return reg
}

// urlEntry is the allowlist entry for a URL's host: host, or host:port
// when the URL names a port; "" for what is no http(s) URL (direct, off).
func urlEntry(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return ""
	}
	if u.Port() != "" {
		return u.Host
	}
	return u.Hostname()
}

func appendNew(list []string, s string) []string {
	if s == "" {
		return list
	}
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// EnvNames lists an env map's names in order.
func EnvNames(env map[string]string) []string {
	names := make([]string, 0, len(env))
	for k := range env {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
