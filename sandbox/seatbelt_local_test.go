package sandbox

import (
	"strings"
	"testing"
)

// On macOS a local service is the host's loopback port itself: the plan
// carries the lease's local-service ports and the profile admits exactly
// those besides the proxy's port (a port not leased stays closed).
func TestSeatbeltLocalServicePorts(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.FreshHome = true
	in.Network = NetworkAllowlist
	in.Proxy = &Proxy{Port: 41234, LocalPorts: []int{5432, 7000}, Env: []string{"HTTPS_PROXY=http://127.0.0.1:41234"}}
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.LocalPorts) != 2 || !strings.Contains(p.String(), "local services (host loopback ports): 5432 7000") {
		t.Fatalf("plan: %v\n%s", p.LocalPorts, p)
	}
	prof, err := p.Seatbelt(SeatbeltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []string{"41234", "5432", "7000"} {
		if !strings.Contains(prof.Text, `(remote ip "localhost:`+port+`")`) {
			t.Errorf("the profile does not admit localhost:%s:\n%s", port, prof.Text)
		}
	}
	if strings.Contains(prof.Text, `"localhost:6379"`) || strings.Contains(prof.Text, `(remote ip "localhost:*")`) {
		t.Errorf("the profile admits more than the leased ports:\n%s", prof.Text)
	}
}
