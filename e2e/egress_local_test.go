package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// echoServer is a raw TCP service on the host's 127.0.0.1 (a stand-in for
// Postgres or Redis): it answers each line with "echo: LINE".
func echoServer(t *testing.T) (port string, conns func() int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	n := make(chan struct{}, 1000)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n <- struct{}{}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "echo: %s", line)
				}
			}()
		}
	}()
	_, port, _ = net.SplitHostPort(ln.Addr().String())
	return port, func() int { return len(n) }
}

// Local services: localhost:PORT entries admit the host's loopback on
// exactly those ports, straight from the sandbox's own loopback (clients
// that honour NO_PROXY, any protocol) and through the proxy. Another
// loopback port, and a name that resolves to loopback, stay refused.
func TestEgressLocalServices(t *testing.T) {
	needSandbox(t)
	need(t, "bash")
	fx := newEgressFixture(t)
	echoPort, echoConns := echoServer(t)
	far := newUpstream(t)
	fx.serveHTTP(t, far, false, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "far") })
	dir := fx.factory(t, "", `  local:
    run: ["true"]
    sandbox:
      egress:
        allow: ["127.0.0.1:`+echoPort+`", "sneaky.test:`+echoPort+`"]
`)
	ca := fx.caPEM
	client := filepath.Join(fx.tools, "egressclient")

	// Twin: curl honours NO_PROXY=localhost and connects to the
	// sandbox's own loopback, where the bridge forwards to the host; the
	// Go client goes through the proxy (CONNECT); raw TCP both ways.
	r := execIn(t, dir, "local", fmt.Sprintf(`curl -sS --cacert %[1]s https://localhost:%[2]s/direct-tls; echo
%[3]s get https://localhost:%[2]s/proxied-tls %[1]s
%[3]s raw localhost:%[4]s direct-raw direct
%[3]s raw 127.0.0.1:%[4]s proxied-raw
bash -c 'exec 3<>/dev/tcp/127.0.0.1/%[4]s && echo devtcp-raw >&3 && head -n1 <&3'`, ca, fx.tlsUp.port, client, echoPort))
	for _, want := range []string{"hello over tls /direct-tls", "hello over tls /proxied-tls", "answer: echo: direct-raw", "answer: echo: proxied-raw", "echo: devtcp-raw"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if !fx.tlsUp.saw("/direct-tls") || !fx.tlsUp.saw("/proxied-tls") || echoConns() != 3 {
		t.Errorf("the host services saw tls %v/%v, echo %d connections", fx.tlsUp.saw("/direct-tls"), fx.tlsUp.saw("/proxied-tls"), echoConns())
	}
	// Every connection is logged with its bytes, like a tunnel.
	locals := 0
	for _, m := range r.egressLines(t) {
		if m["kind"] == "local" && m["decision"] == "allow" {
			locals++
			if up, _ := m["bytes_up"].(float64); up == 0 {
				t.Errorf("a local connection logged no bytes: %v", m)
			}
		}
	}
	if locals != 3 || !r.logged(t, "allow", "localhost", atoi(echoPort), "") || !r.logged(t, "allow", "127.0.0.1", atoi(echoPort), "") {
		t.Errorf("egress.log: want 3 local connections and the proxied one: %v", r.egressLines(t))
	}
	r.verify(t, dir)

	// Attack: a host loopback port no entry lists, straight and through
	// the proxy; a name pointing at loopback without allow_ranges.
	fx.dns.set("sneaky.test", "127.0.0.1")
	before := far.conns.Load()
	r = execIn(t, dir, "local", fmt.Sprintf(`curl -sS -m 3 http://localhost:%[1]s/direct-far || echo direct-refused
%[2]s get http://127.0.0.1:%[1]s/proxied-far %[3]s
%[2]s get http://localhost:%[1]s/proxied-far2 %[3]s
%[2]s raw sneaky.test:%[4]s sneaky || echo sneaky-refused`, far.port, client, ca, echoPort))
	if !strings.Contains(r.stdout, "direct-refused") || strings.Contains(r.stdout, "far\n") || !strings.Contains(r.stdout, "sneaky-refused") {
		t.Errorf("an unlisted port or a rebound name was reached:\n%s%s", r.stdout, r.stderr)
	}
	if n := far.conns.Load() - before; n != 0 || echoConns() != 3 {
		t.Errorf("the host saw %d connection(s) to the unlisted port, echo %d", n, echoConns())
	}
	if !r.logged(t, "refuse", "127.0.0.1", atoi(far.port), "local.port_not_allowed") || !r.logged(t, "refuse", "localhost", atoi(far.port), "local.port_not_allowed") ||
		!r.logged(t, "refuse", "sneaky.test", atoi(echoPort), "address.refused") {
		t.Errorf("egress.log: %v", r.egressLines(t))
	}
	r.verify(t, dir)

	// validate names the leased ports.
	if v := runKusaw(t, dir, "validate"); !strings.Contains(v.stdout, "step local: local services: the host's loopback ports") || !strings.Contains(v.stdout, echoPort) {
		t.Errorf("validate does not list the leased ports:\n%s%s", v.stdout, v.stderr)
	}
	// egress check says the same, with the entry's origin.
	c := runKusaw(t, dir, "egress", "check", "--step", "local", "localhost:"+echoPort)
	if c.code != 0 || !strings.Contains(c.stdout, "allowed: localhost:"+echoPort+" by 127.0.0.1:"+echoPort+" (step:local)") {
		t.Errorf("egress check: %d\n%s%s", c.code, c.stdout, c.stderr)
	}
	c = runKusaw(t, dir, "egress", "check", "--step", "local", "127.0.0.1:"+far.port)
	if c.code != 8 || !strings.Contains(c.stdout, "local.port_not_allowed") || !strings.Contains(c.stdout, "fix: add localhost:"+far.port+" to steps.local.sandbox.egress.allow") {
		t.Errorf("egress check of an unlisted port: %d\n%s%s", c.code, c.stdout, c.stderr)
	}
}

// As root and as a normal user (uid 65534): a local service on a high port
// is reached straight from the sandbox; one below 1024, which a normal
// user's namespace cannot bind, does not stop the step: the bridge says
// so and the port stays reachable through the proxy.
func TestEgressLocalServicesAsUser(t *testing.T) {
	needSandbox(t)
	need(t, "bash")
	echoPort, echoConns := echoServer(t)
	for _, uid := range seamUIDs() {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) {
			dir, _ := seamDir(t, uid)
			writeFile(t, filepath.Join(dir, "factory.yaml"), `version: 1
repos:
  app: {path: ./app}
sandbox:
  mode: required
  network: allowlist
  egress:
    allow: ["localhost:`+echoPort+`", "localhost:1"]
pipelines:
  default: [x]
steps:
  x:
    run: ["true"]
`)
			before := echoConns()
			r := runKusawAs(t, uid, 2*time.Minute, dir, "sandbox", "exec", "--step", "x", "--", "bash", "-c",
				`exec 3<>/dev/tcp/127.0.0.1/`+echoPort+` && echo straight >&3 && head -n1 <&3`)
			if r.code != 0 || !strings.Contains(r.stdout, "echo: straight") || echoConns() != before+1 {
				t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
			if uid != 0 && !strings.Contains(r.stderr, "local service port 1 cannot be bound in the sandbox as this user") {
				t.Errorf("the bridge did not say why port 1 is not bound:\n%s", r.stderr)
			}
		})
	}
}
