package config

import (
	"fmt"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Cache is a named folder shared by the attempts of a factory (caches.NAME):
// mounted read-write into the sandbox of a step that uses it, one writer at
// a time, with Env set to its path.
type Cache struct {
	Name string
	Path string // absolute; default <state_dir>/caches/<name>
	Env  string
}

// CachePresets are the caches kusaw knows: the variable each tool reads
// (the cache's env), and for each its folder in the cache. A preset keeps
// everything that makes a second run warm: go its module and its build
// cache, cargo its registry and git checkouts (both in CARGO_HOME).
var CachePresets = map[string][]CacheVar{
	"go":    {{Env: "GOMODCACHE", Sub: "mod"}, {Env: "GOCACHE", Sub: "build"}},
	"npm":   {{Env: "npm_config_cache"}},
	"pip":   {{Env: "PIP_CACHE_DIR"}},
	"cargo": {{Env: "CARGO_HOME"}},
}

// CacheVar is one variable a cache sets: Env names the cache's folder, or
// its sub-folder Sub.
type CacheVar struct{ Env, Sub string }

// Vars are the variables the cache sets and their paths: a preset's (when
// the cache keeps the preset's env), else its env alone.
func (c *Cache) Vars() map[string]string {
	if p := CachePresets[c.Name]; len(p) > 0 && p[0].Env == c.Env {
		out := map[string]string{}
		for _, v := range p {
			out[v.Env] = filepath.Join(c.Path, v.Sub)
		}
		return out
	}
	return map[string]string{c.Env: c.Path}
}

// MaxPorts is the most host ports one attempt may lease (steps.<id>.ports).
const MaxPorts = 20

// caches reads caches: a map NAME → {path, env} (a preset's name may stand
// alone: {go: {}}), or the list shorthand [go, npm] of presets.
func (d *decoder) caches(f *Factory, n *yaml.Node, path string) map[string]*Cache {
	out := map[string]*Cache{}
	add := func(name string, node *yaml.Node, kp string, c *Cache) {
		if !idPattern().MatchString(name) {
			d.errf(ECodeBadName, node, kp, "use letters, digits, '.', '_' and '-'", "cache name %q has characters it may not have", name)
			return
		}
		if c.Env == "" && len(CachePresets[name]) > 0 {
			c.Env = CachePresets[name][0].Env
		}
		if c.Env == "" {
			d.errf(ECodeMissing, node, kp, "add env: VARIABLE (the presets "+presetNames()+" know theirs)", "cache %s needs env: the variable the step's tools read its path from", name)
			return
		}
		if !envNamePattern().MatchString(c.Env) {
			d.errf(ECodeBadName, node, join(kp, "env"), "use an environment name: letters, digits and _", "%s is not an environment variable name", c.Env)
			return
		}
		if c.Path == "" {
			c.Path = filepath.Join(f.StateDir, "caches", name)
		} else if err := CheckAllowWrite(c.Path); err != nil {
			d.errf(ECodeAllowWrite, node, join(kp, "path"), "keep caches in a folder of their own (the default is <state_dir>/caches/NAME)", "cache %s: %v", name, err)
			return
		}
		c.Name = name
		out[name] = c
	}
	nn := resolve(n)
	if nn != nil && nn.Kind == yaml.SequenceNode {
		names, nodes := d.strList(nn, path)
		for i, name := range names {
			ip := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := CachePresets[name]; !ok {
				d.errf(ECodeBadValue, nodes[i], ip, "name a preset ("+presetNames()+") or write caches: {"+name+": {env: VAR}}", "%s is not a cache preset", name)
				continue
			}
			add(name, nodes[i], ip, &Cache{})
		}
		return out
	}
	for _, fl := range d.fields(n, path, nil) {
		kp := join(path, fl.key)
		c := &Cache{}
		for _, cf := range d.fields(fl.value, kp, []string{"path", "env"}) {
			switch cf.key {
			case "path":
				if s := d.str(cf.value, join(kp, "path")); s != "" {
					c.Path = f.abs(s)
				}
			case "env":
				c.Env = d.str(cf.value, join(kp, "env"))
			}
		}
		add(fl.key, fl.keyN, kp, c)
	}
	return out
}

func presetNames() string {
	var names []string
	for k := range CachePresets {
		names = append(names, k)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// include reads repos.NAME.include: globs of gitignored files to copy from
// the main checkout into each new worktree.
func (d *decoder) include(n *yaml.Node, kp string) []string {
	globs, nodes := d.strList(n, kp)
	var out []string
	for i, g := range globs {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		clean := path.Clean(g)
		if _, err := path.Match(g, ""); err != nil || g == "" || path.IsAbs(g) || clean == ".." || strings.HasPrefix(clean, "../") {
			d.errf(ECodeBadValue, nodes[i], ip, "write a glob relative to the repository, such as .env or config/*.local.yaml", "%s: %q is not a glob inside the repository", ip, g)
			continue
		}
		out = append(out, g)
	}
	return out
}

// sparse reads repos.NAME.sparse: the cone folders of its worktrees.
func (d *decoder) sparse(n *yaml.Node, kp string) []string {
	folders, nodes := d.strList(n, kp)
	if len(nodes) == 0 && resolve(n).Kind != yaml.ScalarNode || resolve(n).Tag == "!!null" {
		d.errf(ECodeSparse, n, kp, "list the folders the steps work in, such as [services/api, libs/common], or remove sparse:", "%s lists no folder", kp)
		return nil
	}
	var out []string
	for i, f := range folders {
		ip := fmt.Sprintf("%s[%d]", kp, i)
		c := strings.TrimSuffix(f, "/")
		bad := c == "" || c != strings.TrimSpace(c) || strings.ContainsAny(c, "*?[]\\!#\n\r\x00") || path.IsAbs(c) || path.Clean(c) != c || c == "." || c == ".." || strings.HasPrefix(c, "../")
		for _, part := range strings.Split(c, "/") {
			bad = bad || strings.EqualFold(part, ".git")
		}
		if bad {
			d.errf(ECodeSparse, nodes[i], ip, "write a folder relative to the repository's top, such as services/api", "%s: %q is not a folder path inside the repository", ip, f)
			continue
		}
		out = append(out, c)
	}
	return out
}

// StepCaches are the caches a step uses: the factory's, then the step's
// (a step's cache of the same name replaces the factory's), by name.
func (f *Factory) StepCaches(s *Step) []*Cache {
	by := map[string]*Cache{}
	for k, c := range f.Caches {
		by[k] = c
	}
	if s != nil {
		for k, c := range s.Caches {
			by[k] = c
		}
	}
	var out []*Cache
	for _, c := range by {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// checkWriteLayers: repos.NAME.write_layer: overlay needs attempts that
// run in bwrap (Linux, sandbox required) on a whole tree.
func (d *decoder) checkWriteLayers(f *Factory) {
	for _, name := range f.RepoOrder {
		r := f.Repos[name]
		if r == nil || r.WriteLayer != WriteLayerOverlay {
			continue
		}
		kp := join("repos", name) + ".write_layer"
		at := f.posNode(kp, join("repos", name))
		if runtime.GOOS != "linux" {
			d.errf(ECodeWriteLayer, at, kp, "remove write_layer (or set it to none) on this machine", "%s: overlay needs bwrap on Linux, and this is %s", kp, runtime.GOOS)
			continue
		}
		if len(r.Sparse) > 0 {
			d.errf(ECodeWriteLayer, at, kp, "remove write_layer or sparse from repos."+name, "%s: overlay does not combine with sparse (a sparse tree is never reused)", kp)
			continue
		}
		sandboxed := false
		for _, id := range f.StepOrder {
			for _, a := range f.Attempts(f.Steps[id]) {
				if m, _ := f.EffectiveMode(f.Steps[id], a); m == ModeRequired && contains(a, name) {
					sandboxed = true
				}
			}
		}
		if !sandboxed && len(f.StepOrder) > 0 {
			d.errf(ECodeWriteLayer, at, kp, "set repos."+name+".sandbox: required (or sandbox.mode: required), or remove write_layer", "%s: overlay needs sandboxed attempts, but no step on repo %s runs in the sandbox", kp, name)
		}
	}
}
