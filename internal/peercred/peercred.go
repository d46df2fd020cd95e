package peercred

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// Peer is the process at the other end of a Unix socket connection, as the
// kernel recorded it when it connected.
type Peer struct {
	PID, UID, GID int
}

// Rule decides whether a peer may use a socket: nil admits it, an error
// says why not (one line, for the peer and the log).
type Rule func(c *net.UnixConn) error

// ErrRefused is wrapped by every refusal, so callers can tell a refused
// peer from a broken connection.
var ErrRefused = errors.New("peer refused")

func refused(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, a...))
}

// Listener returns a listener that accepts from ln only the connections
// rule admits. A refused connection is handed to refuse (which must close
// it) in a goroutine of its own, at most 64 at a time beyond which it is
// closed at once: the accept loop never waits on a refused peer.
func Listener(ln *net.UnixListener, rule Rule, refuse func(net.Conn, error)) net.Listener {
	if refuse == nil {
		refuse = func(c net.Conn, _ error) { c.Close() }
	}
	return &listener{UnixListener: ln, rule: rule, refuse: refuse, busy: make(chan struct{}, 64)}
}

type listener struct {
	*net.UnixListener
	rule   Rule
	refuse func(net.Conn, error)
	busy   chan struct{}
	once   sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		err = l.rule(c)
		if err == nil {
			return c, nil
		}
		select {
		case l.busy <- struct{}{}:
			go func() {
				defer func() { <-l.busy }()
				l.refuse(c, err)
			}()
		default:
			c.Close()
		}
	}
}
