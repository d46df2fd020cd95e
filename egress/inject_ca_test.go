package egress

import (
	"crypto/x509"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// An inject upstream whose certificate the proxy does not trust is
// answered with a final 4xx (X-Should-Retry: false) naming the cause and
// the setting that trusts its CA, and recorded as a failure; the same
// upstream with its CA in the inject's own roots (providers.NAME.ca_file)
// is reached with the key.
func TestInjectUntrustedUpstreamIsFinal(t *testing.T) {
	var keys []string
	up := tlsUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("X-Api-Key"))
		io.WriteString(w, `{"ok":true}`)
	}))
	port := strconv.Itoa(portOf(t, up.Addr().String()))
	upstream := "https://api.inject.test:" + port
	e := newEnv(t, Options{}, LeaseConfig{AllowRanges: loopback8, RootCAs: x509.NewCertPool(), Inject: []Inject{
		{Name: "untrusted", Header: "x-api-key", Key: "k-untrusted", Upstream: upstream, BaseURLEnv: "A", KeyEnv: "B", CAKey: "providers.untrusted.ca_file"},
		{Name: "trusted", Header: "x-api-key", Key: "k-trusted", Upstream: upstream, BaseURLEnv: "C", KeyEnv: "D", RootCAs: getCA(t).pool},
	}})
	e.dns.set("api.inject.test", "127.0.0.1")
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Post(e.l.InjectURL("untrusted")+"/v1/messages", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != untrustedStatus || resp.StatusCode >= 500 || resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("untrusted upstream: %d, X-Should-Retry %q", resp.StatusCode, resp.Header.Get("X-Should-Retry"))
	}
	for _, want := range []string{"api.inject.test:" + port + " refused", "authority kusaw's proxy does not trust", "set providers.untrusted.ca_file to the PEM file of the CA"} {
		if !strings.Contains(body, want) {
			t.Errorf("the answer lacks %q: %s", want, body)
		}
	}
	if len(keys) != 0 {
		t.Errorf("the untrusted upstream got a request: %v", keys)
	}
	resp, err = client.Post(e.l.InjectURL("trusted")+"/v1/messages", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body = readBody(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(keys) != 1 || keys[0] != "k-trusted" {
		t.Errorf("with the CA in the inject's roots: %d %s, keys %v", resp.StatusCode, body, keys)
	}
	e.l.Close()
	var fails int
	for _, d := range e.rec.all() {
		if d.Reason == ReasonUpstreamTLS {
			fails++
			if d.Decision != Fail || d.Host != "api.inject.test" || !strings.Contains(d.Detail, "providers.untrusted.ca_file") {
				t.Errorf("decision %+v", d)
			}
		}
	}
	if fails != 1 {
		t.Errorf("%d %s decisions, want 1", fails, ReasonUpstreamTLS)
	}
}
