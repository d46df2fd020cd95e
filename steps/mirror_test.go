package steps

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestMirror: a user's own GOPROXY (environment or go env -w's file) or
// npm registry (environment, ~/.npmrc) replaces the public hosts and is
// carried into the step's env; the repository's .npmrc adds its host only
// (npm reads it in the worktree); the defaults change nothing.
func TestMirror(t *testing.T) {
	env := func(kv ...string) Lookup {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	repo := func(files map[string]string) string {
		d := t.TempDir()
		for n, b := range files {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(d, n)), 0o755); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(d, n), []byte(b), 0o644)
		}
		return d
	}
	home := t.TempDir()
	gomod := repo(map[string]string{"go.mod": "module x\n"})
	e, _ := Detect(gomod)
	if got := Mirror(e, gomod, home, env()); !reflect.DeepEqual(got, e) {
		t.Errorf("no mirror set: %+v", got)
	}
	if got := Mirror(e, gomod, home, env("GOPROXY", "https://proxy.golang.org,direct")); got.Env != nil {
		t.Errorf("the default GOPROXY: %+v", got)
	}
	got := Mirror(e, gomod, home, env("GOPROXY", "http://localhost:3000|https://goproxy.corp.example,direct", "GOSUMDB", "off"))
	if !reflect.DeepEqual(got.Hosts, []string{"localhost:3000", "goproxy.corp.example"}) || got.Env["GOPROXY"] != "http://localhost:3000|https://goproxy.corp.example,direct" || got.Env["GOSUMDB"] != "off" {
		t.Errorf("GOPROXY from the environment: %+v", got)
	}
	writeGoEnv := filepath.Join(home, ".config", "go", "env")
	os.MkdirAll(filepath.Dir(writeGoEnv), 0o755)
	os.WriteFile(writeGoEnv, []byte("GOPROXY=https://athens.corp.example:8443\nGONOSUMDB=corp.example\n"), 0o644)
	got = Mirror(e, gomod, home, env())
	if !reflect.DeepEqual(got.Hosts, []string{"athens.corp.example:8443", "sum.golang.org"}) || got.Env["GONOSUMDB"] != "corp.example" {
		t.Errorf("GOPROXY from go env -w: %+v", got)
	}
	if got = Mirror(e, gomod, home, env("GOPROXY", "https://proxy.golang.org,direct", "GONOSUMDB", "")); !reflect.DeepEqual(got.Hosts, e.Hosts) || got.Env["GONOSUMDB"] != "corp.example" {
		t.Errorf("the environment over the file: %+v", got)
	}
	os.Remove(writeGoEnv)

	pkg := repo(map[string]string{"package.json": `{"scripts":{"test":"tiny-test"}}`, "package-lock.json": "{}"})
	n, _ := Detect(pkg)
	if got := Mirror(n, pkg, home, env("npm_config_registry", "https://registry.npmjs.org/")); !reflect.DeepEqual(got, n) {
		t.Errorf("the default registry: %+v", got)
	}
	got = Mirror(n, pkg, home, env("npm_config_registry", "http://localhost:4873/"))
	if !reflect.DeepEqual(got.Hosts, []string{"localhost:4873"}) || got.Env["npm_config_registry"] != "http://localhost:4873/" {
		t.Errorf("registry from the environment: %+v", got)
	}
	os.WriteFile(filepath.Join(home, ".npmrc"), []byte("; mine\nregistry = https://npm.corp.example/\n"), 0o644)
	if got = Mirror(n, pkg, home, env()); !reflect.DeepEqual(got.Hosts, []string{"npm.corp.example"}) || got.Env["npm_config_registry"] != "https://npm.corp.example/" {
		t.Errorf("registry from ~/.npmrc: %+v", got)
	}
	own := repo(map[string]string{"package.json": `{"scripts":{"test":"x"}}`, ".npmrc": "registry=https://npm.team.example/\n"})
	o, _ := Detect(own)
	if got = Mirror(o, own, home, env()); !reflect.DeepEqual(got.Hosts, []string{"npm.team.example"}) || got.Env != nil {
		t.Errorf("registry from the repository's .npmrc: %+v", got)
	}
}
