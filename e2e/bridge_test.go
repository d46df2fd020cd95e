package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/sandbox/confine"
)

// TestBridgeBinary: with kusaw-bridge beside kusaw, an allowlist step runs
// through it (a small binary, not the whole of kusaw), reaches an allowed
// local server through the proxy, and cannot overwrite the bridge (bound
// read-only; reading it works, the legitimate twin). Without kusaw-bridge,
// kusaw's own hidden __egress-bridge does the same.
func TestBridgeBinary(t *testing.T) {
	needSandbox(t)
	need(t, "curl")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	lone := loneKusaw(t)
	for _, c := range []struct {
		name, kusaw, wrap0, sub string
	}{
		{"beside", kusawBin, filepath.Join(filepath.Dir(kusawBin), "kusaw-bridge"), ""},
		{"alone", lone, lone, "__egress-bridge"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := factoryDir(t, `version: 1
repos:
  app: {path: ./app}
pipelines:
  default: [fetch]
steps:
  fetch:
    sandbox: {mode: required, network: allowlist, egress: {allow: ["localhost:`+port+`"]}}
    run:
      - sh
      - -c
      - |
        curl -sf --noproxy '' -x "$HTTP_PROXY" http://localhost:`+port+`/ > got.txt || exit 11
        if echo x > '`+c.wrap0+`' 2>/dev/null; then echo written > write.txt; else echo refused > write.txt; fi
        if cat '`+c.wrap0+`' > /dev/null; then echo readable > read.txt; fi
        if kill -0 1 2>/dev/null; then echo reached > signal.txt; else echo refused > signal.txt; fi
        sleep 5 & if kill $!; then echo own > own.txt; fi
`, "app")
			cmd := exec.Command(c.kusaw, "run")
			cmd.Dir, cmd.Env = dir, testEnv(t, dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("kusaw run: %v\n%s", err, out)
			}
			id := onlyRun(t, dir)
			app := filepath.Join(dir, "app")
			want := map[string]string{"got.txt": "reached", "write.txt": "refused", "read.txt": "readable", "own.txt": "own"}
			// The confinement holds under the bridge too (kusaw-bridge runs
			// the stage and the bridge in one start): Landlock's scope keeps
			// the step from signalling bwrap's init, outside its domain.
			if abi, _ := confine.LandlockABI(); abi >= 6 {
				want["signal.txt"] = "refused"
			}
			for f, want := range want {
				if got := git(t, app, "show", "kusaw/"+id+":"+f); got != want {
					t.Errorf("%s: %q, want %q", f, got, want)
				}
			}
			var att struct {
				Processes []struct {
					Plan struct {
						WrapArgv []string `json:"wrap_argv"`
					} `json:"sandbox_plan"`
				} `json:"processes"`
			}
			raw := readFile(t, filepath.Join(dir, ".kusaw", "runs", id, "steps", "fetch", "1", "attempt.json"))
			if err := json.Unmarshal([]byte(raw), &att); err != nil {
				t.Fatal(err)
			}
			if len(att.Processes) != 1 {
				t.Fatalf("attempt.json has %d processes", len(att.Processes))
			}
			w := att.Processes[0].Plan.WrapArgv
			if len(w) < 2 || w[0] != c.wrap0 || (c.sub != "") != (w[1] == c.sub) {
				t.Errorf("wrap argv %v; want it to start with %s %s", w, c.wrap0, c.sub)
			}
			if c.sub == "" && strings.Contains(raw, "__egress-bridge") {
				t.Error("kusaw-bridge is beside kusaw but the whole kusaw ran as the bridge")
			}
			verifyRecords(t, os.Geteuid(), dir)
		})
	}
}
