package egress

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/kusaw/kusaw/egress/bridge"
	"github.com/kusaw/kusaw/internal/peercred"
)

// Who may hand a listener over. The socket lies in the attempt's own
// folder, which no other sandbox sees; this is the second wall: a process
// outside every sandbox (kusaw's own user and PID namespaces), or one
// below the process the lease's sandbox runs in. Another sandbox holding
// the socket's path would otherwise hand over a listener of its own
// network namespace and be served with this lease's allowlist and keys.

// ExpectPeer names the process the lease's sandbox runs in (the bwrap
// kusaw started): from then on only a process below it, or one outside
// every sandbox, may hand over. With LeaseConfig.AwaitPeer the hand-over
// waits for it.
func (l *Lease) ExpectPeer(pid int) {
	l.peerOnce.Do(func() {
		l.peerPID = pid
		close(l.peerSet)
	})
}

// handOverRule is the rule for one connection to the hand-over socket:
// below the expected process, or below kusaw itself until one is named
// (without AwaitPeer).
func (l *Lease) handOverRule() (peercred.Rule, error) {
	select {
	case <-l.peerSet:
		return peercred.HostOrDescends(l.peerPID), nil
	default:
	}
	if !l.c.AwaitPeer {
		return peercred.HostOrDescends(os.Getpid()), nil
	}
	t := time.NewTimer(bridge.Timeout)
	defer t.Stop()
	select {
	case <-l.peerSet:
		return peercred.HostOrDescends(l.peerPID), nil
	case <-l.quit:
		return nil, errors.New("the lease is closed")
	case <-t.C:
		return nil, errors.New("kusaw did not name the sandbox's process in time")
	}
}

// checkPeer applies handOverRule to c.
func (l *Lease) checkPeer(c *net.UnixConn) error {
	rule, err := l.handOverRule()
	if err != nil {
		return err
	}
	return rule(c)
}
