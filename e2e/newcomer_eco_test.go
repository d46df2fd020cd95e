package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A newcomer's first day on a project of theirs (issue 27): kusaw init
// --sandbox, then kusaw run checks, green on the first try, with the
// project's dependencies fetched through kusaw's egress from a package
// mirror on this machine (a GOPROXY and an npm registry stand-in on
// loopback, as Athens or Verdaccio would be). The user sets only what a
// user on a private mirror has set anyway: GOPROXY, npm_config_registry.
// The file init writes is not edited.

// pkgMirror is a package mirror on 127.0.0.1, reached as localhost:PORT:
// it serves fixed files by path and counts what was asked.
type pkgMirror struct {
	srv   *http.Server
	port  string
	mu    sync.Mutex
	files map[string][]byte
	types map[string]string
	asked map[string]int
}

func newPkgMirror(t testing.TB) *pkgMirror {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	m := &pkgMirror{port: port, files: map[string][]byte{}, types: map[string]string{}, asked: map[string]int{}}
	m.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.asked[r.URL.Path]++
		b, ok := m.files[r.URL.Path]
		ct := m.types[r.URL.Path]
		m.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		if ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		w.Write(b)
	})}
	go m.srv.Serve(l)
	t.Cleanup(func() { m.srv.Close() })
	return m
}

func (m *pkgMirror) url() string { return "http://localhost:" + m.port }

func (m *pkgMirror) put(path, contentType string, b []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.files[path], m.types[path] = b, contentType
}

// served is how many times the paths were fetched, in all.
func (m *pkgMirror) served(paths ...string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, p := range paths {
		n += m.asked[p]
	}
	return n
}

// goModule serves module mod@ver with files per the GOPROXY protocol
// (.info, .mod, .zip) and returns its two go.sum lines.
func (m *pkgMirror) goModule(t testing.TB, mod, ver string, files map[string]string) string {
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, mod+"@"+ver+"/"+n)
	}
	sort.Strings(names)
	var summary strings.Builder
	for _, n := range names {
		body := files[strings.TrimPrefix(n, mod+"@"+ver+"/")]
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(body))
		fmt.Fprintf(&summary, "%x  %s\n", sha256.Sum256([]byte(body)), n)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	// go.sum's h1: the SHA-256 of the sorted list of the files' SHA-256s
	// (golang.org/x/mod/sumdb/dirhash's Hash1); go.mod's alone as "go.mod".
	h1 := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "h1:" + base64.StdEncoding.EncodeToString(sum[:])
	}
	gomod := files["go.mod"]
	base := "/" + mod + "/@v/" + ver
	m.put("/"+mod+"/@v/list", "text/plain", []byte(ver+"\n"))
	m.put(base+".info", "application/json", []byte(`{"Version":"`+ver+`","Time":"2026-01-02T03:04:05Z"}`))
	m.put(base+".mod", "text/plain", []byte(gomod))
	m.put(base+".zip", "application/zip", zb.Bytes())
	return fmt.Sprintf("%s %s %s\n%s %s/go.mod %s\n", mod, ver, h1(summary.String()),
		mod, ver, h1(fmt.Sprintf("%x  go.mod\n", sha256.Sum256([]byte(gomod)))))
}

// npmPackage serves name@ver's packument and tarball (files under
// package/, cli.js executable) and returns the tarball's URL and integrity.
func (m *pkgMirror) npmPackage(t testing.TB, name, ver string, files map[string]string) (tarball, integrity string) {
	var tb bytes.Buffer
	gz := gzip.NewWriter(&tb)
	tw := tar.NewWriter(gz)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		mode := int64(0o644)
		if strings.HasSuffix(n, "cli.js") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: "package/" + n, Mode: mode, Size: int64(len(files[n])), ModTime: time.Unix(1767322800, 0), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[n]))
	}
	if tw.Close() != nil || gz.Close() != nil {
		t.Fatal("tarball")
	}
	sha := sha512.Sum512(tb.Bytes())
	integrity = "sha512-" + base64.StdEncoding.EncodeToString(sha[:])
	s1 := sha1.Sum(tb.Bytes())
	tarPath := "/" + name + "/-/" + name + "-" + ver + ".tgz"
	tarball = m.url() + tarPath
	var manifest map[string]any
	if err := json.Unmarshal([]byte(files["package.json"]), &manifest); err != nil {
		t.Fatal(err)
	}
	manifest["dist"] = map[string]string{"tarball": tarball, "integrity": integrity, "shasum": hex.EncodeToString(s1[:])}
	manifest["_id"] = name + "@" + ver
	packument, _ := json.Marshal(map[string]any{
		"name": name, "dist-tags": map[string]string{"latest": ver},
		"versions": map[string]any{ver: manifest},
	})
	m.put("/"+name, "application/json", packument)
	m.put(tarPath, "application/octet-stream", tb.Bytes())
	return tarball, integrity
}

// newcomerGoRepo makes a Go module requiring kusaw.test/greet from the
// mirror, with its go.sum, committed: what a user's repository is.
func newcomerGoRepo(t testing.TB, dir string, m *pkgMirror) string {
	sum := m.goModule(t, "kusaw.test/greet", "v1.2.0", map[string]string{
		"go.mod":   "module kusaw.test/greet\n\ngo 1.22\n",
		"greet.go": "// Package greet says hello.\npackage greet\n\n// Hello greets name.\nfunc Hello(name string) string { return \"hello, \" + name }\n",
	})
	app := newRepo(t, dir, "app")
	writeFile(t, filepath.Join(app, "go.mod"), "module example.com/app\n\ngo 1.22\n\nrequire kusaw.test/greet v1.2.0\n")
	writeFile(t, filepath.Join(app, "go.sum"), sum)
	writeFile(t, filepath.Join(app, "app.go"), "package app\n\nimport \"kusaw.test/greet\"\n\n// Welcome greets a newcomer.\nfunc Welcome() string { return greet.Hello(\"newcomer\") }\n")
	writeFile(t, filepath.Join(app, "app_test.go"), "package app\n\nimport \"testing\"\n\nfunc TestWelcome(t *testing.T) {\n\tif got := Welcome(); got != \"hello, newcomer\" {\n\t\tt.Fatalf(\"Welcome() = %q\", got)\n\t}\n}\n")
	git(t, app, "add", ".")
	git(t, app, "commit", "-q", "-m", "a Go module with a dependency")
	return app
}

// newcomerNpmRepo makes an npm package whose test script is the
// devDependency tiny-test from the mirror, with its package-lock.json.
func newcomerNpmRepo(t testing.TB, dir string, m *pkgMirror) string {
	tarball, integrity := m.npmPackage(t, "tiny-test", "1.0.0", map[string]string{
		"package.json": `{"name":"tiny-test","version":"1.0.0","bin":{"tiny-test":"cli.js"}}`,
		"cli.js": `#!/usr/bin/env node
const fs = require("fs"), path = require("path");
const dir = path.join(process.cwd(), "test");
const files = fs.readdirSync(dir).filter((f) => f.endsWith(".js"));
for (const f of files) require(path.join(dir, f));
console.log("tiny-test: " + files.length + " file(s) passed");
`,
	})
	app := newRepo(t, dir, "app")
	writeFile(t, filepath.Join(app, "package.json"), `{
  "name": "app",
  "version": "1.0.0",
  "main": "index.js",
  "scripts": {"test": "tiny-test"},
  "devDependencies": {"tiny-test": "^1.0.0"}
}
`)
	lock, _ := json.MarshalIndent(map[string]any{
		"name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
		"packages": map[string]any{
			"": map[string]any{"name": "app", "version": "1.0.0", "devDependencies": map[string]string{"tiny-test": "^1.0.0"}},
			"node_modules/tiny-test": map[string]any{"version": "1.0.0", "resolved": tarball, "integrity": integrity,
				"dev": true, "bin": map[string]string{"tiny-test": "cli.js"}},
		},
	}, "", "  ")
	writeFile(t, filepath.Join(app, "package-lock.json"), string(lock)+"\n")
	writeFile(t, filepath.Join(app, "index.js"), "exports.greet = (name) => \"hello, \" + name;\n")
	writeFile(t, filepath.Join(app, "test", "greet.test.js"), "const assert = require(\"assert\");\nassert.strictEqual(require(\"..\").greet(\"newcomer\"), \"hello, newcomer\");\n")
	writeFile(t, filepath.Join(app, ".gitignore"), "node_modules/\n")
	git(t, app, "add", ".")
	git(t, app, "commit", "-q", "-m", "an npm package with a devDependency")
	return app
}

// newcomerKusaw runs kusaw as uid in cwd, with kusaw's home and secrets
// under home and extra variables, bounded by limit.
func newcomerKusaw(t testing.TB, uid int, limit time.Duration, cwd, home string, extra []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, kusawBin, args...)
	cmd.Dir = cwd
	cmd.Env = append(newcomerEnv(home), extra...)
	if uid != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kusaw %v did not end within %s\n%s%s", args, limit, out.String(), errb.String())
	}
	if err != nil && exitCode(err) < 0 {
		t.Fatalf("kusaw %v: %v", args, err)
	}
	return result{out.String(), errb.String(), exitCode(err)}
}

// newcomerEnv is a newcomer's environment: their own HOME (empty), no Go
// or npm settings of the test's, kusaw's secret store beside the repo.
func newcomerEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "KUSAW_") || strings.HasPrefix(k, "GIT_") || strings.HasPrefix(k, "GO") || strings.HasPrefix(strings.ToLower(k), "npm_") {
			continue
		}
		env = append(env, kv)
	}
	h := filepath.Join(home, "home")
	_ = os.MkdirAll(h, 0o755)
	return append(env, "HOME="+h, "XDG_CONFIG_HOME="+filepath.Join(h, ".config"), "XDG_CACHE_HOME="+filepath.Join(h, ".cache"),
		"KUSAW_SECRETS_DIR="+filepath.Join(home, "secrets"), "KUSAW_KILL_GRACE=2s")
}

// newcomerFirstRun: init --sandbox with the mirror in the environment,
// validate, run checks: green on the first try, the file as init wrote
// it, and the dependencies fetched from the mirror through kusaw's egress
// (egress.log has the decision). It returns the factory folder.
func newcomerFirstRun(t *testing.T, uid int, app, dir string, mirrorEnv []string, mirror *pkgMirror, deps []string, wantOut string) {
	t.Helper()
	chownAll(t, dir, uid)
	in := newcomerKusaw(t, uid, time.Minute, app, dir, mirrorEnv, "init", "--sandbox")
	if in.code != 0 || !strings.Contains(in.stdout, "sandbox required, network allowlist") {
		t.Fatalf("init --sandbox: exit %d\n%s%s", in.code, in.stdout, in.stderr)
	}
	written := readFile(t, filepath.Join(app, "factory.yaml"))
	if !strings.Contains(written, "localhost:"+mirror.port) {
		t.Fatalf("init did not allow the mirror localhost:%s:\n%s", mirror.port, written)
	}
	if v := newcomerKusaw(t, uid, time.Minute, app, dir, nil, "validate"); v.code != 0 {
		t.Fatalf("validate: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	// The mirror's variables are not in kusaw's environment from here on:
	// what the step needs is in the file.
	r := newcomerKusaw(t, uid, 5*time.Minute, app, dir, nil, "run", "checks")
	if r.code != 0 {
		t.Fatalf("run checks (first try): exit %d\n%s%s\nfactory.yaml:\n%s", r.code, r.stdout, r.stderr, written)
	}
	if got := readFile(t, filepath.Join(app, "factory.yaml")); got != written {
		t.Errorf("factory.yaml changed after init:\n%s", got)
	}
	if n := mirror.served(deps...); n == 0 {
		t.Errorf("the dependencies %v were not fetched from the mirror", deps)
	}
	id := onlyRun(t, app)
	adir := filepath.Join(app, ".kusaw", "runs", id, "steps", "checks", "1")
	if out := readFile(t, filepath.Join(adir, "stdout.log")) + readFile(t, filepath.Join(adir, "stderr.log")); !strings.Contains(out, wantOut) {
		t.Errorf("the tests' output lacks %q:\n%s", wantOut, out)
	}
	if att := readFile(t, filepath.Join(adir, "attempt.json")); !strings.Contains(att, `"mode": "required"`) {
		t.Errorf("checks did not run sandboxed:\n%s", att)
	}
	if log := readFile(t, filepath.Join(adir, "egress.log")); !strings.Contains(log, `"port":`+mirror.port) || !strings.Contains(log, `"allow"`) {
		t.Errorf("egress.log has no allowed connection to the mirror's port %s:\n%s", mirror.port, log)
	}
}

// TestNewcomerGoModule: a Go module with a third-party dependency.
// The second run fetches nothing: the module cache is kept (how much
// faster it is, is make bench's "first run" figure).
func TestNewcomerGoModule(t *testing.T) {
	t.Parallel() // one of the package's longest: beside the others of them (make test's 15 minutes)
	needSandbox(t)
	need(t, "go")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			mirror := newPkgMirror(t)
			dir, _ := seamDir(t, uid)
			os.RemoveAll(filepath.Join(dir, "app"))
			app := newcomerGoRepo(t, dir, mirror)
			deps := []string{"/kusaw.test/greet/@v/v1.2.0.zip"}
			newcomerFirstRun(t, uid, app, dir, []string{"GOPROXY=" + mirror.url()}, mirror, deps, "ok  \texample.com/app")
			before := mirror.served(deps...)
			if r := newcomerKusaw(t, uid, 5*time.Minute, app, dir, nil, "run", "checks"); r.code != 0 {
				t.Fatalf("second run checks: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if n := mirror.served(deps...); n != before {
				t.Errorf("the second run fetched the module again (%d → %d): the module cache was not kept", before, n)
			}
		})
	}
}

// TestNewcomerNpmPackage: an npm package with a devDependency (its test
// runner), installed with npm ci from its lockfile.
func TestNewcomerNpmPackage(t *testing.T) {
	t.Parallel() // one of the package's longest: beside the others of them (make test's 15 minutes)
	needSandbox(t)
	need(t, "npm")
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			mirror := newPkgMirror(t)
			dir, _ := seamDir(t, uid)
			os.RemoveAll(filepath.Join(dir, "app"))
			app := newcomerNpmRepo(t, dir, mirror)
			newcomerFirstRun(t, uid, app, dir, []string{"npm_config_registry=" + mirror.url() + "/"}, mirror,
				[]string{"/tiny-test/-/tiny-test-1.0.0.tgz"}, "tiny-test: 1 file(s) passed")
		})
	}
}

// BenchmarkNewcomerGoChecks: kusaw run checks on a fresh Go module with a
// dependency (as TestNewcomerGoModule), the first run (empty caches: the
// module is fetched, everything compiled) against the second (the go
// preset's module and build caches kept). Reported as cold/warm.
func BenchmarkNewcomerGoChecks(b *testing.B) {
	if os.Getenv("CI") != "true" {
		if _, err := exec.LookPath("go"); err != nil {
			b.Skip("go is not installed")
		}
	}
	var cold, warm time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		mirror := newPkgMirror(b)
		dir := b.TempDir()
		app := newcomerGoRepo(b, dir, mirror)
		if r := newcomerKusaw(b, os.Geteuid(), time.Minute, app, dir, []string{"GOPROXY=" + mirror.url()}, "init", "--sandbox"); r.code != 0 {
			b.Fatalf("init: %d %s%s", r.code, r.stdout, r.stderr)
		}
		b.StartTimer()
		for j, d := range []*time.Duration{&cold, &warm} {
			start := time.Now()
			if r := newcomerKusaw(b, os.Geteuid(), 5*time.Minute, app, dir, nil, "run", "checks"); r.code != 0 {
				b.Fatalf("run checks #%d: %d %s%s", j+1, r.code, r.stdout, r.stderr)
			}
			*d += time.Since(start)
		}
	}
	b.ReportMetric(cold.Seconds()/float64(b.N), "first-s")
	b.ReportMetric(warm.Seconds()/float64(b.N), "second-s")
	b.ReportMetric(float64(cold)/float64(warm), "first/second")
}
