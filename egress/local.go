package egress

import (
	"bufio"
	"context"
	"net"
)

// addLocalListener serves a local-service listener the bridge bound in
// the sandbox's namespace: each connection is admitted like a tunnel to
// localhost:port and relayed to the host's loopback port, counted and
// logged. The proxy accepts it itself, so bytes are copied once.
func (l *Lease) addLocalListener(ln net.Listener, port int) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		ln.Close()
		return false
	}
	ln = newLimitListener(ln, l.c.MaxConns)
	l.localLns = append(l.localLns, ln)
	l.wg.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.serveLocal(c, port)
		}
	}()
	return true
}

// serveLocal forwards one connection made inside the sandbox to a local
// service port. A refusal (a used-up budget) or an unreachable host port
// closes it; the decision is logged either way.
func (l *Lease) serveLocal(c net.Conn, port int) {
	if !l.enter() {
		c.Close()
		return
	}
	defer l.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), l.p.o.DialTimeout)
	t, ref := l.admit(ctx, KindLocal, "localhost", port, port, false)
	var up *meteredConn
	if ref == nil {
		up, ref = l.dial(ctx, t)
	}
	cancel()
	if ref != nil {
		c.Close()
		return
	}
	if !l.track(c) {
		c.Close()
		up.Close()
		return
	}
	defer l.untrack(c)
	defer c.Close()
	defer up.Close()
	l.relay(c, bufio.NewReaderSize(c, 16), up, up)
}
