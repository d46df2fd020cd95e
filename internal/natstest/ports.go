package natstest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// PortTriples are n loopback ports p, each with p+2000 and p+4000 free
// too (the route and monitoring ports nats-config derives), all below the
// range the kernel picks ports from itself (ip_local_port_range): no
// other test's listener on port 0 and no outgoing connection can take one
// between this check and the server's start, as they could when p was
// such a port.
func PortTriples(t testing.TB, n int) []int {
	t.Helper()
	low := kernelPortsFrom()
	const first = 10000
	if low-4000 <= first+1000 {
		t.Fatalf("the kernel hands out ports from %d on: too few below it for NATS test servers (net.ipv4.ip_local_port_range)", low)
	}
	var out []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries == 1000 {
			t.Fatalf("no %d free port triples below %d on 127.0.0.1", n, low)
		}
		p := first + rand.IntN(low-4000-first)
		var ls []net.Listener
		for _, q := range []int{p, p + 2000, p + 4000} {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		held = append(held, ls...) // what this triple holds stays out of the next
		if len(ls) == 3 {
			out = append(out, p)
		}
	}
	return out
}

// kernelPortsFrom is the first port the kernel hands out itself (32768,
// Linux's default, when /proc does not say).
func kernelPortsFrom() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				return v
			}
		}
	}
	return 32768
}
