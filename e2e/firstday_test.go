package e2e

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// repoRoot is the checkout the e2e tests build from.
func repoRoot() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(self))
}

// TestVersionUnstamped: a plain go build says devel, and --version is the
// same as the version command; a wrong flag's hint names the program once.
func TestVersionUnstamped(t *testing.T) {
	dir := t.TempDir()
	r := runKusaw(t, dir, "version", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var bi map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &bi); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if bi["version"] != "devel" || bi["go"] != runtime.Version() || bi["platform"] != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("unstamped build: %s", r.stdout)
	}
	if b, _ := bi["sandbox_backend"].(string); b == "" {
		t.Errorf("no sandbox backend: %s", r.stdout)
	}
	v := runKusaw(t, dir, "--version")
	if v.code != 0 || !strings.HasPrefix(v.stdout, "kusaw devel\n") || !strings.Contains(v.stdout, "platform: "+runtime.GOOS) {
		t.Errorf("--version: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	bad := runKusaw(t, dir, "--bogus")
	if bad.code != 2 || !strings.Contains(bad.stderr, "(see 'kusaw --help')") {
		t.Errorf("unknown root flag: exit %d %q", bad.code, bad.stderr)
	}
	bad = runKusaw(t, dir, "sandbox", "exec", "--bogus")
	if bad.code != 2 || !strings.Contains(bad.stderr, "(see 'kusaw sandbox exec --help')") {
		t.Errorf("unknown sub-command flag: exit %d %q", bad.code, bad.stderr)
	}
}

// TestVersionMakeBuild: make build stamps the commit of the tree it ran
// in, and whether that tree had changes.
func TestVersionMakeBuild(t *testing.T) {
	need(t, "make")
	root := repoRoot()
	bin := filepath.Join(t.TempDir(), "kusaw")
	mk := exec.Command("make", "-s", "build", "BIN="+bin)
	mk.Dir = root
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var bi struct {
		Version, Commit string
		Modified        bool
	}
	if err := json.Unmarshal(out, &bi); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	head := strings.TrimSpace(git(t, root, "rev-parse", "HEAD"))
	dirty := strings.TrimSpace(git(t, root, "status", "--porcelain")) != ""
	if bi.Commit != head || bi.Modified != dirty || bi.Version == "devel" || bi.Version == "" {
		t.Errorf("stamps: %s; want commit %s modified %v", out, head, dirty)
	}
}

// TestLintUntidyGoMod: make lint's tidy check (scripts/check-tidy.sh)
// fails on a go.mod that requires a module nothing imports, naming the
// change, and passes on the same module once tidy. Offline: the module
// is a local replace.
func TestLintUntidyGoMod(t *testing.T) {
	// Not t.TempDir: go may leave a detached child (telemetry) writing
	// under the test's HOME while the folder is removed, and the test's
	// cleanup then fails on "directory not empty".
	dir, err := os.MkdirTemp("", "kusaw-tidy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	writeFile(t, filepath.Join(dir, "dep", "go.mod"), "module example.invalid/dep\n\ngo 1.22\n")
	writeFile(t, filepath.Join(dir, "dep", "dep.go"), "package dep\n")
	writeFile(t, filepath.Join(dir, "main.go"), "package main\n\nfunc main() {}\n")
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.invalid/m\n\ngo 1.22\n\nrequire example.invalid/dep v0.0.0\n\nreplace example.invalid/dep => ./dep\n")
	check := func() (string, error) {
		cmd := exec.Command(filepath.Join(repoRoot(), "scripts", "check-tidy.sh"))
		cmd.Dir = dir
		cmd.Env = append(testEnv(t, dir), "GOFLAGS=", "GOPROXY=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := check()
	if err == nil || !strings.Contains(out, "not tidy") || !strings.Contains(out, "-require example.invalid/dep") {
		t.Fatalf("untidy go.mod passed the check (err %v):\n%s", err, out)
	}
	writeFile(t, filepath.Join(dir, "go.mod"), "module example.invalid/m\n\ngo 1.22\n")
	if out, err := check(); err != nil {
		t.Fatalf("a tidy go.mod failed the check: %v\n%s", err, out)
	}
}

// TestEnvLayering: kusaw env shows each setting's value and origin:
// default, the user settings file, KUSAW_* over the file, a flag over
// all; a bad value or an unknown key names where it came from (exit 2).
func TestEnvLayering(t *testing.T) {
	dir := t.TempDir()
	settingsPath := filepath.Join(dir, "home", ".config", "kusaw", "config.yaml")
	writeFile(t, settingsPath, "log_level: debug\ncolor: never\nlisten: 127.0.0.1:7001\n")
	env := func(extra ...string) map[string][2]string {
		cmd := exec.Command(kusawBin, "env", "--json")
		cmd.Dir = dir
		cmd.Env = append(testEnv(t, dir), extra...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("kusaw env: %v", err)
		}
		var r struct {
			SettingsFile string `json:"settings_file"`
			Settings     []struct{ Key, Value, Source string }
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if r.SettingsFile != settingsPath {
			t.Errorf("settings file %q, want %q", r.SettingsFile, settingsPath)
		}
		m := map[string][2]string{}
		for _, s := range r.Settings {
			m[s.Key] = [2]string{s.Value, s.Source}
		}
		return m
	}
	m := env("KUSAW_LISTEN=127.0.0.1:7002")
	want := map[string][2]string{
		"log_level":  {"debug", "file " + settingsPath},
		"color":      {"never", "file " + settingsPath},
		"listen":     {"127.0.0.1:7002", "env KUSAW_LISTEN"},
		"log_format": {"json", "default"},
		"token_file": {"", "unset"},
	}
	for k, w := range want {
		if m[k] != w {
			t.Errorf("%s = %v, want %v", k, m[k], w)
		}
	}
	// A factory.yaml in the folder decides the file before KUSAW_CONFIG.
	writeFile(t, filepath.Join(dir, "factory.yaml"), "version: 1\n")
	if got := env("KUSAW_CONFIG=/elsewhere.yaml")["file"]; got != [2]string{"factory.yaml", "current folder"} {
		t.Errorf("file = %v", got)
	}
	// A flag wins over the file and the environment: its bad value is
	// reported as the flag's.
	cmd := exec.Command(kusawBin, "serve", "--log-level", "loud")
	cmd.Dir = dir
	cmd.Env = append(testEnv(t, dir), "KUSAW_LOG_LEVEL=warn")
	out, err := cmd.CombinedOutput()
	if exitCode(err) != 2 || !strings.Contains(string(out), `log_level "loud" (from flag --log-level) is not one of debug, info, warn, error`) {
		t.Errorf("serve --log-level loud: exit %d: %s", exitCode(err), out)
	}
	writeFile(t, settingsPath, "log_levl: debug\n")
	r := runKusaw(t, dir, "env")
	if r.code != 2 || !strings.Contains(r.stderr, `settings file `+settingsPath+`: unknown setting "log_levl"`) {
		t.Errorf("unknown key: exit %d: %s", r.code, r.stderr)
	}
}

// TestServeTokenFile: the token_file setting gives serve's TCP listener
// its token; a file others can read is refused before serve starts; a
// request without the token is refused and one with it answers.
func TestServeTokenFile(t *testing.T) {
	dir := factoryDir(t, "version: 1\nrepos:\n  app: {path: app}\npipelines:\n  default: [t]\nsteps:\n  t: {run: [\"true\"]}\n", "app")
	tok := filepath.Join(dir, "token")
	writeFile(t, tok, "tok-from-file-0123456789\n")
	if err := os.Chmod(tok, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(kusawBin, "serve", "--listen", addr)
	cmd.Dir = dir
	cmd.Env = append(testEnv(t, dir), "KUSAW_TOKEN_FILE="+tok)
	out, err := cmd.CombinedOutput()
	if exitCode(err) != 3 || !strings.Contains(string(out), "can be read by others") {
		t.Fatalf("a 0644 token file: exit %d: %s", exitCode(err), out)
	}
	if err := os.Chmod(tok, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(kusawBin, "serve", "--listen", addr)
	srv.Dir = dir
	srv.Env = append(testEnv(t, dir), "KUSAW_TOKEN_FILE="+tok)
	var logs syncBuffer
	srv.Stderr = &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() })
	get := func(token string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/health", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	waitFor(t, "serve to listen", 20*time.Second, func() bool { return get("") != 0 })
	if c := get(""); c != http.StatusUnauthorized {
		t.Errorf("no token: %d", c)
	}
	if c := get("tok-from-file-0123456789"); c != http.StatusOK {
		t.Errorf("token from the file: %d\n%s", c, logs.String())
	}
}

// TestSchemaCommand: kusaw schema prints the committed reference copy,
// which a draft 2020-12 validator compiles (the metaschema checked) and
// under which the example factories are valid and a broken one is not.
func TestSchemaCommand(t *testing.T) {
	dir := t.TempDir()
	r := runKusaw(t, dir, "schema")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	committed := readFile(t, filepath.Join(repoRoot(), "docs", "reference", "factory.schema.json"))
	if r.stdout != committed {
		t.Fatal("kusaw schema differs from docs/reference/factory.schema.json (make docs)")
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(r.stdout))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("factory.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("factory.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	check := func(data []byte) error {
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		return s.Validate(inst)
	}
	examples, _ := filepath.Glob(filepath.Join(repoRoot(), "examples", "*.yaml"))
	for _, f := range examples {
		if err := check([]byte(readFile(t, f))); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if err := check([]byte("version: 1\npipelines: {default: [a]}\nsteps:\n  a: {run: [make], timout: 5m}\n")); err == nil {
		t.Error("a misspelt key passed the schema")
	}
}

// TestInitValidateRun: kusaw init in a fresh repository writes a file that
// validates, whose checks pipeline runs the repository's own tests in the
// sandbox; it points editors at a schema copy; it never overwrites.
func TestInitValidateRun(t *testing.T) {
	need(t, "git")
	need(t, "make")
	dir := t.TempDir()
	app := newRepo(t, dir, "app")
	writeFile(t, filepath.Join(app, "Makefile"), "test:\n\t@echo the tests passed\n")
	git(t, app, "add", ".")
	git(t, app, "commit", "-q", "-m", "tests")
	// HOME and the secret store in dir, beside the repository, as a
	// user's are: not inside it.
	kusaw := func(cwd string, args ...string) result { return runKusawWith(t, cwd, testEnv(t, dir), args...) }
	r := kusaw(app, "init", "--sandbox")
	if r.code != 0 {
		t.Fatalf("init: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"wrote factory.yaml: repo app at .: make test (Makefile has a test target); sandbox required, network allowlist", "kusaw validate\n", "kusaw run checks\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("init output lacks %q:\n%s", want, r.stdout)
		}
	}
	written := readFile(t, filepath.Join(app, "factory.yaml"))
	if !strings.HasPrefix(written, "# yaml-language-server: $schema=.kusaw/factory.schema.json\n") {
		t.Errorf("no schema modeline:\n%s", written)
	}
	if s := kusaw(app, "schema"); readFile(t, filepath.Join(app, ".kusaw", "factory.schema.json")) != s.stdout {
		t.Error("the schema copy is not kusaw schema's output")
	}
	if v := kusaw(app, "validate"); v.code != 0 || !strings.Contains(v.stdout, "valid") {
		t.Fatalf("validate: exit %d: %s%s", v.code, v.stdout, v.stderr)
	}
	run := kusaw(app, "run", "checks")
	if run.code != 0 {
		t.Fatalf("run checks: exit %d: %s%s", run.code, run.stdout, run.stderr)
	}
	id := onlyRun(t, app)
	out := readFile(t, filepath.Join(app, ".kusaw", "runs", id, "steps", "checks", "1", "stdout.log"))
	if !strings.Contains(out, "the tests passed") {
		t.Errorf("checks did not run make test: %q", out)
	}
	att := readFile(t, filepath.Join(app, ".kusaw", "runs", id, "steps", "checks", "1", "attempt.json"))
	if !strings.Contains(att, `"mode": "required"`) {
		t.Errorf("checks did not run sandboxed:\n%s", att)
	}
	if st := git(t, app, "status", "--porcelain"); strings.Contains(st, ".kusaw") {
		t.Errorf("the records show in git status:\n%s", st)
	}
	again := kusaw(app, "init")
	if again.code != 2 || !strings.Contains(again.stderr, "never overwrites") || readFile(t, filepath.Join(app, "factory.yaml")) != written {
		t.Errorf("second init: exit %d %q", again.code, again.stderr)
	}
	if b := kusaw(dir, "init", "--provider", "no-such-agent"); b.code != 2 || !strings.Contains(b.stderr, `--provider "no-such-agent" is not one of claude-code, codex, cursor`) {
		t.Errorf("bad provider: exit %d %q", b.code, b.stderr)
	}
	empty := t.TempDir()
	if b := runKusaw(t, empty, "init"); b.code != 2 || !strings.Contains(b.stderr, "no git repository here") {
		t.Errorf("no repo: exit %d %q", b.code, b.stderr)
	}
	// Above two repositories: both, and the built-in checks step.
	newRepo(t, dir, "lib")
	top := kusaw(dir, "init", "--provider", "cursor")
	if top.code != 0 {
		t.Fatalf("init above repos: exit %d %s", top.code, top.stderr)
	}
	f := readFile(t, filepath.Join(dir, "factory.yaml"))
	for _, want := range []string{"  app:\n    path: app\n", "  lib:\n    path: lib\n", "builtin: checks", "provider: cursor", "CURSOR_API_KEY"} {
		if !strings.Contains(f, want) {
			t.Errorf("factory above repos lacks %q:\n%s", want, f)
		}
	}
	if v := kusaw(dir, "validate"); v.code != 0 {
		t.Errorf("validate above repos: exit %d: %s", v.code, v.stdout)
	}
}

// runKusawWith runs the built binary in dir with exactly env.
func runKusawWith(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(kusawBin, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil && exitCode(err) < 0 {
		t.Fatalf("kusaw %v: %v", args, err)
	}
	return result{out.String(), errb.String(), exitCode(err)}
}

// TestDemo runs make demo's script against the built binary: the
// pipeline passes, the allowlist step reaches the demo's local server and
// is refused example.com, and the refusal line, the egress.log entries and
// the verified logs are printed.
func TestDemo(t *testing.T) {
	needSandbox(t)
	need(t, "node")
	need(t, "curl")
	dir := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(repoRoot(), "scripts", "demo.sh"))
	cmd.Dir = dir
	cmd.Env = append(testEnv(t, dir), "KUSAW="+kusawBin, "DEMO_WORK="+filepath.Join(dir, "work"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	for _, want := range []string{
		"fetched from the allowed local server: greeter-data 1.0",
		"example.com (not on the list): HTTP 403",
		"example.com:80 refused: kusaw: example.com:80 is not allowed; add it to steps.fetch.sandbox.egress.allow",
		"  example.com:80  refuse  host.not_allowed",
		"  localhost:",
		"checks: passed after 1 attempt(s)",
		"+greeter-data 1.0",
		"fetch/1/egress.log: OK",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestSettingsStateDirAndProbeCache: the state_dir setting moves a run's
// records out of the factory's state_dir; probe_cache names where a
// passed sandbox check is remembered, and off remembers nothing.
func TestSettingsStateDirAndProbeCache(t *testing.T) {
	needSandbox(t)
	dir := factoryDir(t, "version: 1\nrepos:\n  app: {path: app}\npipelines:\n  default: [t]\nsteps:\n  t: {run: [\"true\"], sandbox: required}\n", "app")
	state := filepath.Join(t.TempDir(), "state")
	cache := filepath.Join(t.TempDir(), "probe.json")
	env := append(testEnv(t, dir), "KUSAW_STATE_DIR="+state, "KUSAW_PROBE_CACHE="+cache)
	if r := runKusawWith(t, dir, env, "run"); r.code != 0 {
		t.Fatalf("run: exit %d %s%s", r.code, r.stdout, r.stderr)
	}
	if runs, _ := os.ReadDir(filepath.Join(state, "runs")); len(runs) != 1 {
		t.Errorf("the run is not under the state_dir setting: %v", runs)
	}
	if _, err := os.Stat(filepath.Join(dir, ".kusaw", "runs")); err == nil {
		t.Error("the run was recorded under the factory's state_dir too")
	}
	if _, err := os.Stat(cache); err != nil {
		t.Errorf("the passed check was not remembered at the probe_cache path: %v", err)
	}
	off := filepath.Join(t.TempDir(), "home")
	env = append(testEnv(t, off), "KUSAW_PROBE_CACHE=off")
	if r := runKusawWith(t, dir, env, "version"); r.code != 0 {
		t.Fatalf("version: %d %s", r.code, r.stderr)
	}
	if hits, _ := filepath.Glob(filepath.Join(off, "home", ".cache", "kusaw", "*")); len(hits) > 0 {
		t.Errorf("probe_cache off still wrote %v", hits)
	}
}
