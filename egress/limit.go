package egress

import (
	"net"
	"sync"
)

// limitListener caps a lease's simultaneous connections like
// x/net/netutil.LimitListener, but the connections it returns keep
// CloseWrite, so a tunnel can pass an upstream's half-close on to the
// client instead of closing both directions.
type limitListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func newLimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	lc := &limitConn{Conn: c, release: func() { <-l.sem }}
	if _, ok := c.(interface{ CloseWrite() error }); ok {
		return &limitHalfCloser{lc}, nil
	}
	return lc, nil
}

func (l *limitListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// limitHalfCloser is a limitConn whose connection can half-close.
type limitHalfCloser struct{ *limitConn }

func (c *limitHalfCloser) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}
