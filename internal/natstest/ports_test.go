package natstest

import (
	"net"
	"strconv"
	"testing"
)

// Each triple is free, none shares a port with another, and all lie
// below the ports the kernel hands out itself.
func TestPortTriples(t *testing.T) {
	ps := PortTriples(t, 3)
	low := kernelPortsFrom()
	seen := map[int]bool{}
	for _, p := range ps {
		for _, q := range []int{p, p + 2000, p + 4000} {
			if seen[q] || q >= low {
				t.Errorf("port %d of %v: taken twice or in the kernel's range", q, ps)
			}
			seen[q] = true
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
			if err != nil {
				t.Errorf("port %d is not free: %v", q, err)
				continue
			}
			l.Close()
		}
	}
}
