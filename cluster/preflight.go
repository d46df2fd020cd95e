package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kusaw/kusaw/cluster/limits"
)

// StoreNeeded is the JetStream storage serve's streams, buckets and one
// pool's stores may take together: what an account must allow.
const StoreNeeded = limits.StoreNeeded

// Preflight checks, before serve says it is ready, that the NATS server
// it reached takes what kusaw sends: messages up to MaxPayload, and
// JetStream for the account with room for its streams (replicas copies
// each). A refusal names the setting to change; later the same gap would
// fail every run.
func Preflight(ctx context.Context, nc *nats.Conn, replicas int) error {
	if got := nc.MaxPayload(); got < MaxPayload {
		return fmt.Errorf("the NATS server at %s takes messages of at most %s (max_payload), and kusaw sends up to %s: set max_payload: %dMB in the server's configuration and restart it (kusaw cluster nats-config writes one that does)",
			Where(nc), size(got), size(MaxPayload), MaxPayload>>20)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	info, err := accountInfo(ctx, js)
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("the NATS server at %s has no JetStream for serve's account: enable JetStream on the servers (jetstream {store_dir: ..., max_file_store: ...}) and for the account (its JWT's JetStream limits: nsc edit account --js-disk-storage 20G --js-streams -1 --js-consumer -1)", Where(nc))
	case err != nil:
		return fmt.Errorf("cannot read the account's JetStream limits from %s: %v", Where(nc), err)
	}
	lim := info.Limits
	if t, ok := info.Tiers[fmt.Sprintf("R%d", max(replicas, 1))]; ok {
		lim = t.Limits
	}
	need := StoreNeeded
	if lim.MaxStore >= 0 && lim.MaxStore < need {
		return fmt.Errorf("serve's NATS account may keep %s in JetStream files, and kusaw's streams and one pool's stores take up to %s: raise the account's disk storage (nsc edit account --js-disk-storage %dG) and push it to the servers",
			size(lim.MaxStore), size(need), (need>>30)+1)
	}
	if lim.MaxStreams >= 0 && lim.MaxStreams < 8 {
		return fmt.Errorf("serve's NATS account may have %d JetStream streams, and kusaw needs 4 plus 2 per pool: allow more (nsc edit account --js-streams -1)", lim.MaxStreams)
	}
	return nil
}

// jetStreamStartWait is how long a server that says JetStream is off is
// asked again before serve believes it: a clustered nats-server answers
// so for its first seconds, until its JetStream has started and taken
// the account (CI saw it from one of three servers just started). A
// server without JetStream still fails serve's start, this much later.
var jetStreamStartWait = 10 * time.Second

// accountInfo is the account's JetStream information, asked again every
// quarter second while the server says JetStream is off, up to
// jetStreamStartWait.
func accountInfo(ctx context.Context, js jetstream.JetStream) (*jetstream.AccountInfo, error) {
	deadline := time.Now().Add(jetStreamStartWait)
	for {
		info, err := js.AccountInfo(ctx)
		off := errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
		if !off || time.Now().After(deadline) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return info, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d bytes", n)
	}
}

// tlsTrouble explains a TLS failure against an existing NATS cluster in
// terms of the keys to set ("" when err is something else).
func tlsTrouble(err error, urls string, ca bool) string {
	if err == nil {
		return ""
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	msg := err.Error()
	switch {
	case errors.As(err, &he) || strings.Contains(msg, "certificate is valid for") || strings.Contains(msg, "doesn't contain any IP SANs"):
		return fmt.Sprintf("the NATS server's certificate does not name the host as serve.cluster.nats_url writes it (%s): write the URL with a name the certificate holds, or make the certificate name that host", urls)
	case errors.As(err, &ua) || strings.Contains(msg, "unknown authority"):
		if ca {
			return "the NATS servers' certificate does not chain to serve.cluster.ca: set serve.cluster.ca to the PEM file of the CA that signed it"
		}
		return "the NATS servers' certificate does not chain to the system's roots: set serve.cluster.ca to the PEM file of the CA that signed it"
	}
	return ""
}
