package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// stubRegistries is one HTTP server on the host's 127.0.0.1 standing in
// for the package registries a project uses: an npm registry, a Python
// simple index, a Go module proxy, each serving one package named greet,
// and a plain page for curl.
type stubRegistries struct {
	port                          string
	tgz, wheel, goZip, goMod      []byte
	tgzIntegrity, tgzSHA1, wheelH string
}

func newStubRegistries(t *testing.T) *stubRegistries {
	t.Helper()
	s := &stubRegistries{}
	// npm: a tarball with package/package.json and package/index.js.
	var tb bytes.Buffer
	gz := gzip.NewWriter(&tb)
	tw := tar.NewWriter(gz)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", `{"name":"greet","version":"1.0.0","main":"index.js"}`},
		{"package/index.js", "module.exports = () => 'hello from npm'\n"},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1700000000, 0)})
		tw.Write([]byte(f.body))
	}
	tw.Close()
	gz.Close()
	s.tgz = tb.Bytes()
	sum := sha512.Sum512(s.tgz)
	s.tgzIntegrity = "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	s1 := sha1.Sum(s.tgz)
	s.tgzSHA1 = hex.EncodeToString(s1[:])
	// Python: a pure wheel with its dist-info and RECORD.
	files := []struct{ name, body string }{
		{"greet/__init__.py", "def hello():\n    return 'hello from pip'\n"},
		{"greet-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: greet\nVersion: 1.0\n"},
		{"greet-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: kusaw-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var wb bytes.Buffer
	zw := zip.NewWriter(&wb)
	var record strings.Builder
	for _, f := range files {
		w, _ := zw.Create(f.name)
		w.Write([]byte(f.body))
		h := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(h[:]), len(f.body))
	}
	record.WriteString("greet-1.0.dist-info/RECORD,,\n")
	w, _ := zw.Create("greet-1.0.dist-info/RECORD")
	w.Write([]byte(record.String()))
	zw.Close()
	s.wheel = wb.Bytes()
	wh := sha256.Sum256(s.wheel)
	s.wheelH = hex.EncodeToString(wh[:])
	// Go: module example.com/greet v1.0.0.
	s.goMod = []byte("module example.com/greet\n\ngo 1.21\n")
	var gb bytes.Buffer
	zw = zip.NewWriter(&gb)
	for _, f := range []struct{ name, body string }{
		{"example.com/greet@v1.0.0/go.mod", string(s.goMod)},
		{"example.com/greet@v1.0.0/greet.go", "package greet\n\nfunc Hello() string { return \"hello from go\" }\n"},
	} {
		w, _ := zw.Create(f.name)
		w.Write([]byte(f.body))
	}
	zw.Close()
	s.goZip = gb.Bytes()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, s.port, _ = net.SplitHostPort(ln.Addr().String())
	srv := &http.Server{Handler: http.HandlerFunc(s.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

func (s *stubRegistries) url(p string) string { return "http://localhost:" + s.port + p }

func (s *stubRegistries) serve(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/curl":
		fmt.Fprint(w, "hello through the proxy")
	case "/npm/greet":
		w.Header().Set("content-type", "application/json")
		fmt.Fprintf(w, `{"name":"greet","dist-tags":{"latest":"1.0.0"},"versions":{"1.0.0":{"name":"greet","version":"1.0.0","main":"index.js","dist":{"tarball":%q,"integrity":%q,"shasum":%q}}}}`,
			s.url("/npm/greet/-/greet-1.0.0.tgz"), s.tgzIntegrity, s.tgzSHA1)
	case "/npm/greet/-/greet-1.0.0.tgz":
		w.Write(s.tgz)
	case "/pypi/simple/greet/":
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/pypi/greet-1.0-py3-none-any.whl#sha256=%s">greet-1.0-py3-none-any.whl</a></body></html>`, s.wheelH)
	case "/pypi/greet-1.0-py3-none-any.whl":
		w.Write(s.wheel)
	case "/goproxy/example.com/greet/@v/list":
		fmt.Fprint(w, "v1.0.0\n")
	case "/goproxy/example.com/greet/@v/v1.0.0.info":
		fmt.Fprint(w, `{"Version":"v1.0.0","Time":"2024-01-01T00:00:00Z"}`)
	case "/goproxy/example.com/greet/@v/v1.0.0.mod":
		w.Write(s.goMod)
	case "/goproxy/example.com/greet/@v/v1.0.0.zip":
		w.Write(s.goZip)
	default:
		http.NotFound(w, r)
	}
}

// twinGoCache is a Go build cache for uid kept between test runs (root's
// own for root), so the go test twin does not build the standard library
// again each time.
func twinGoCache(t *testing.T, uid int) string {
	t.Helper()
	if uid == 0 {
		if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
			return strings.TrimSpace(string(out))
		}
	}
	d := fmt.Sprintf("/var/tmp/kusaw-e2e-gocache-%d", uid)
	os.MkdirAll(d, 0o755)
	os.Chown(d, uid, uid)
	return d
}

// The legitimate twins of the sandbox's protections (#24): what a project
// does every day still works inside a `mode: required, network: allowlist`
// sandbox, as root and as a normal user, with every package coming from a
// local registry through kusaw's egress (the only way out):
//   - go test with the factory's module and build caches: the module is
//     fetched once from a Go proxy; the next step, with the proxy off,
//     builds from the module cache and compiles only its own package (its
//     worktree is a new folder), the rest from the build cache;
//   - npm ci from a registry, with the npm cache;
//   - a Python venv and pip install from a simple index, with the pip cache;
//   - curl through the proxy to an allowed local host.
//
// (git commit and tag inside the sandbox: TestSeamStepCommitsBranchesTags.)
// Every log of the run verifies with kusaw log verify --strict.
func TestTwinsProjectToolsInTheSandbox(t *testing.T) {
	t.Parallel() // one of the package's longest: beside the others of them (make test's 15 minutes)
	needSandbox(t)
	for _, tool := range []string{"git", "go", "npm", "node", "curl"} {
		need(t, tool)
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatal("the Python venv twin needs /usr/bin/python3 with venv and ensurepip: apt-get install python3-venv python3-pip-whl")
	}
	reg := newStubRegistries(t)
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, app := seamDir(t, uid)
			writeFile(t, filepath.Join(app, "go.mod"), "module example.com/app\n\ngo 1.21\n\nrequire example.com/greet v1.0.0\n")
			writeFile(t, filepath.Join(app, "app_test.go"), "package app\n\nimport (\n\t\"testing\"\n\n\t\"example.com/greet\"\n)\n\nfunc TestGreet(t *testing.T) {\n\tif greet.Hello() != \"hello from go\" {\n\t\tt.Fatal(greet.Hello())\n\t}\n}\n")
			writeFile(t, filepath.Join(app, "package.json"), `{"name":"app","version":"1.0.0","private":true,"dependencies":{"greet":"1.0.0"}}`)
			writeFile(t, filepath.Join(app, "package-lock.json"), fmt.Sprintf(`{"name":"app","version":"1.0.0","lockfileVersion":3,"requires":true,"packages":{"":{"name":"app","version":"1.0.0","dependencies":{"greet":"1.0.0"}},"node_modules/greet":{"version":"1.0.0","resolved":%q,"integrity":%q}}}`,
				reg.url("/npm/greet/-/greet-1.0.0.tgz"), reg.tgzIntegrity))
			writeFile(t, filepath.Join(app, ".gitignore"), "node_modules/\n")
			git(t, app, "add", "-A")
			git(t, app, "commit", "-q", "-m", "a project")
			gocache := twinGoCache(t, uid)
			allow := fmt.Sprintf(`{mode: required, network: allowlist, egress: {allow: ["localhost:%[1]s", "127.0.0.1:%[1]s"]}}`, reg.port)
			goEnv := "GOTOOLCHAIN: local\n      GOSUMDB: \"off\"\n      GOFLAGS: -mod=mod"
			writeFile(t, filepath.Join(dir, "factory.yaml"), fmt.Sprintf(`version: 1
repos:
  app: {path: app}
caches:
  gomod: {env: GOMODCACHE}
  gobuild: {path: %[1]s, env: GOCACHE}
  npm: {}
  pip: {}
pipelines:
  default: [gotest, gocached, npmci, venv, curl]
steps:
  gotest:
    run: [sh, -c, 'go test ./... && ls "$GOMODCACHE/cache/download/example.com/greet/@v/" | grep -qx v1.0.0.zip && echo fetched']
    sandbox: %[2]s
    env:
      GOPROXY: %[3]s
      %[4]s
  gocached:
    run: [sh, -c, 'go test -x ./... > "$TMPDIR/x" 2>&1 || { cat "$TMPDIR/x"; exit 1; }; n=$(grep -c "tool/[a-z0-9_]*/compile " "$TMPDIR/x"); echo "compiled $n"; test "$n" -le 2 && echo from-the-caches']
    sandbox: %[2]s
    env:
      GOPROXY: "off"
      %[4]s
  npmci:
    run: [sh, -c, 'env -u NO_PROXY -u no_proxy npm ci --no-audit --no-fund --registry %[5]s && node -e "console.log(require(\"greet\")())"']
    sandbox: %[2]s
  venv:
    run: [sh, -c, '/usr/bin/python3 -m venv "$TMPDIR/venv" && env -u NO_PROXY -u no_proxy "$TMPDIR/venv/bin/pip" install -q --index-url %[6]s greet && "$TMPDIR/venv/bin/python" -c "import sys, greet; assert sys.prefix != sys.base_prefix; print(greet.hello())"']
    sandbox: %[2]s
    env:
      PIP_DISABLE_PIP_VERSION_CHECK: "1"
  curl:
    run: [sh, -c, 'env -u NO_PROXY -u no_proxy curl -sS --max-time 20 %[7]s']
    sandbox: %[2]s
`, gocache, allow, reg.url("/goproxy"), goEnv, reg.url("/npm/"), reg.url("/pypi/simple/"), reg.url("/curl")))
			res := runKusawAs(t, uid, 8*time.Minute, dir, "run")
			id := runIDOf(t, res)
			steps := filepath.Join(dir, ".kusaw", "runs", id, "steps")
			logs := func(step string) string {
				return mayRead(filepath.Join(steps, step, "1", "stdout.log")) + mayRead(filepath.Join(steps, step, "1", "stderr.log"))
			}
			if res.code != 0 {
				var all string
				for _, s := range []string{"gotest", "gocached", "npmci", "venv", "curl"} {
					all += "\n--- " + s + ":\n" + logs(s)
				}
				t.Fatalf("kusaw run exit %d\n%s%s%s", res.code, res.stdout, res.stderr, all)
			}
			for step, want := range map[string]string{"gotest": "fetched", "gocached": "from-the-caches", "npmci": "hello from npm", "venv": "hello from pip", "curl": "hello through the proxy"} {
				if out := logs(step); !strings.Contains(out, want) {
					t.Errorf("step %s: want %q in its output:\n%s", step, want, out)
				}
			}
			// curl went through kusaw's proxy (NO_PROXY unset), which let
			// the allowed local host through.
			if e := mayRead(filepath.Join(steps, "curl", "1", "egress.log")); !strings.Contains(e, `"localhost"`) || !strings.Contains(e, reg.port) {
				t.Errorf("curl's egress.log has no allowed request to localhost:%s:\n%s", reg.port, e)
			}
			verifyRecords(t, uid, dir)
		})
	}
}
