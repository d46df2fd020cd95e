package steps

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/internal/mountinfo"
)

func TestEnvName(t *testing.T) {
	for in, want := range map[string]string{"app": "APP", "web-docs": "WEB_DOCS", "a.b_c9": "A_B_C9"} {
		if got := EnvName(in); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTestCommandDetection(t *testing.T) {
	cases := []struct {
		files map[string]string
		want  []string
	}{
		{map[string]string{"Makefile": "build:\n\tgo build\ntest:\n\tgo test\n", "go.mod": "module x\n"}, []string{"make", "test"}},
		{map[string]string{"Makefile": "build:\n\ttrue\n", "go.mod": "module x\n"}, []string{"go", "test", "./..."}},
		{map[string]string{"package.json": `{"scripts":{"test":"jest"}}`}, []string{"sh", "-c", "npm install && npm test"}},
		{map[string]string{"package.json": `{"scripts":{"test":"xo"}}`, "package-lock.json": "{}"}, []string{"sh", "-c", "npm ci && npm test"}},
		{map[string]string{"package.json": `{"scripts":{"test":"xo"}}`, "yarn.lock": ""}, []string{"sh", "-c", "yarn install --frozen-lockfile && yarn test"}},
		{map[string]string{"package.json": `{"scripts":{"build":"tsc"}}`}, nil},
		{map[string]string{"Cargo.toml": "[package]\n"}, []string{"cargo", "test"}},
		{map[string]string{"pyproject.toml": "[project]\n"}, []string{"sh", "-c", "python3 -m venv .venv && .venv/bin/pip install -q pytest -e . && .venv/bin/python -m pytest"}},
		{map[string]string{"requirements.txt": "requests\n"}, []string{"sh", "-c", "python3 -m venv .venv && .venv/bin/pip install -q pytest -r requirements.txt && .venv/bin/python -m pytest"}},
		{map[string]string{"README": "x"}, nil},
	}
	for i, c := range cases {
		dir := t.TempDir()
		for n, body := range c.files {
			os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644)
		}
		if got, _ := TestCommand(dir); !reflect.DeepEqual(got, c.want) {
			t.Errorf("case %d: %v, want %v", i, got, c.want)
		}
	}
}

// TestDetectCachesAndHosts: each ecosystem names the cache presets and
// package hosts its install needs; a Makefile keeps its language's.
func TestDetectCachesAndHosts(t *testing.T) {
	for _, c := range []struct {
		files  map[string]string
		name   string
		caches []string
		host   string
	}{
		{map[string]string{"go.mod": "module x\n"}, "go", []string{"go"}, "proxy.golang.org"},
		{map[string]string{"go.mod": "module x\n", "Makefile": "test:\n\tgo test ./...\n"}, "make", []string{"go"}, "sum.golang.org"},
		{map[string]string{"package.json": `{"scripts":{"test":"x"}}`}, "node", []string{"npm"}, "registry.npmjs.org"},
		{map[string]string{"Cargo.toml": ""}, "rust", []string{"cargo"}, "index.crates.io"},
		{map[string]string{"requirements.txt": ""}, "python", []string{"pip"}, "files.pythonhosted.org"},
	} {
		dir := t.TempDir()
		for n, body := range c.files {
			os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644)
		}
		e, ok := Detect(dir)
		if !ok || e.Name != c.name || !reflect.DeepEqual(e.Caches, c.caches) || !slices.Contains(e.Hosts, c.host) {
			t.Errorf("%v: %+v %v", c.files, e, ok)
		}
		for _, p := range e.Caches {
			if _, known := config.CachePresets[p]; !known {
				t.Errorf("%s names cache %q, not a preset", e.Name, p)
			}
		}
	}
}

func TestChecksRunsAndFails(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("make is not installed")
		}
		t.Skip("make is not installed")
	}
	good, bad, none, art := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(good, "Makefile"), []byte("test:\n\t@echo good-ran\n"), 0o644)
	os.WriteFile(filepath.Join(bad, "Makefile"), []byte("test:\n\t@exit 3\n"), 0o644)
	var out, errb bytes.Buffer
	env := Env{Worktrees: map[string]string{"GOOD": good, "NONE": none}, Artifacts: art, Getenv: os.Getenv}
	if code := RunBuiltin("checks", env, &out, &errb); code != 0 {
		t.Fatalf("checks on a passing repo: %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "good-ran") || !strings.Contains(out.String(), "no test command found") {
		t.Errorf("output: %s", out.String())
	}
	env.Worktrees["BAD"] = bad
	if code := RunBuiltin("checks", env, &out, &errb); code != 1 {
		t.Errorf("checks with a failing repo: exit %d", code)
	}
	if b, _ := os.ReadFile(filepath.Join(art, "checks.json")); !strings.Contains(string(b), `"failed": 1`) {
		t.Errorf("checks.json: %s", b)
	}
	if code := RunBuiltin("nope", env, &out, &errb); code != 2 || !strings.Contains(errb.String(), "checks, diff") {
		t.Errorf("unknown built-in: %d %s", code, errb.String())
	}
}

func TestDiffIncludesUntrackedAndCommitted(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("git is not installed")
		}
		t.Skip("git is not installed")
	}
	dir, art := t.TempDir(), t.TempDir()
	g := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	g("init", "-q", "-b", "main")
	g("config", "user.email", "t@t.invalid")
	g("config", "user.name", "t")
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\n"), 0o644)
	g("add", ".")
	g("commit", "-qm", "base")
	base := g("rev-parse", "HEAD")
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a\nb\n"), 0o644)
	g("commit", "-qam", "earlier step")
	os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new\n"), 0o644)
	var out, errb bytes.Buffer
	env := Env{Worktrees: map[string]string{"APP": dir}, Bases: map[string]string{"APP": base}, Artifacts: art, Getenv: func(string) string { return t.TempDir() }}
	if code := RunBuiltin("diff", env, &out, &errb); code != 0 {
		t.Fatalf("diff: %d %s", code, errb.String())
	}
	patch, _ := os.ReadFile(filepath.Join(art, "app.patch"))
	if !strings.Contains(string(patch), "+b") || !strings.Contains(string(patch), "+new") {
		t.Errorf("patch: %s", patch)
	}
	if st := g("status", "--porcelain"); st != "?? new.txt" {
		t.Errorf("the worktree's index was touched: %q", st)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := mountinfo.Unescape(`/a\040b/c`); got != "/a b/c" {
		t.Errorf("%q", got)
	}
}

func TestBuildCommandEnv(t *testing.T) {
	s := &config.Step{ID: "s", Run: []string{"echo"}, Attempts: 1, Env: map[string]config.EnvValue{
		"A": {Value: "1"}, "T": {Secret: &config.SecretRef{Key: "k"}}}, EnvOrder: []string{"A", "T"}}
	sp, err := Build(Attempt{Run: "r1", Step: s, Number: 2, Repos: []string{"b"}, Artifacts: "/art",
		Worktrees: []Worktree{{Repo: "a", Path: "/wa"}, {Repo: "b", Path: "/wb", BaseSHA: "abc"}}})
	if err != nil {
		t.Fatal(err)
	}
	if sp.Dir != "/wb" || sp.Env["KUSAW_WORKTREE_A"] != "/wa" || sp.Env["KUSAW_ATTEMPT"] != "2" || sp.Env["KUSAW_BASE_B"] != "abc" || sp.Env["A"] != "1" {
		t.Errorf("spec: %+v", sp)
	}
	if _, ok := sp.Env["T"]; ok || sp.Secrets["T"] != "k" {
		t.Errorf("secret handling: env %v secrets %v", sp.Env, sp.Secrets)
	}
}
