package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kusaw/kusaw/cluster/limits"
)

// ErrNotEnrolled is returned when serve refuses a worker's key.
var ErrNotEnrolled = errors.New("serve refused this worker's key: it is not enrolled, or it was retired (join again with a new token from kusaw cluster token, from a new --state-dir after a retire)")

// ErrNotJoined is returned for a worker that has no enrollment to use.
var ErrNotJoined = errors.New("this worker has not joined a serve")

// Dial connects a worker with its enrolled identity; it reconnects by
// itself for as long as the connection lives.
func Dial(id *Identity, name string, opts ...nats.Option) (*nats.Conn, error) {
	if id.Server == "" || id.CAPin == "" {
		return nil, fmt.Errorf("%w: run kusaw worker --join TOKEN", ErrNotJoined)
	}
	url, auth, tc := "tls://"+id.Server, nats.Nkey(id.NKey(), id.Sign), PinnedTLS(id.CAPin)
	if id.JWT != "" {
		var err error
		if tc, err = ClusterTLS([]byte(id.CAPEM)); err != nil {
			return nil, err
		}
		url, auth = id.Server, nats.UserJWT(func() (string, error) { return id.JWT, nil }, id.Sign)
	}
	all := append([]nats.Option{nats.Name(name), auth, nats.Secure(tc), nats.CustomInboxPrefix(WorkerInbox(id.Name)),
		nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.RetryOnFailedConnect(false)}, opts...)
	nc, err := nats.Connect(url, all...)
	if err != nil && isAuthErr(err) {
		return nil, ErrNotEnrolled
	}
	return nc, err
}

// Where names the NATS server a connection is (or was last) on, for
// messages: the one it is connected to, else those it dials.
func Where(nc *nats.Conn) string {
	if u := nc.ConnectedUrlRedacted(); u != "" {
		return u
	}
	if len(nc.Opts.Servers) > 0 {
		return strings.Join(nc.Opts.Servers, ",")
	}
	if nc.Opts.Url == "" {
		return "in process"
	}
	return nc.Opts.Url
}

func isAuthErr(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked)
}

// Enroll trades a token for a registered identity: it connects with the
// token's secret (the server lets such a client only ask to enroll), sends
// the identity's public keys, and records serve's address, pin and curve
// key in the identity (on an existing NATS cluster, also the JWT serve
// issued for it). pools are those the worker means to offer: serve refuses
// the enrollment when its token does not allow one.
func Enroll(ctx context.Context, tok Token, id *Identity, version string, pools []string) error {
	where, url := tok.Addr, "tls://"+tok.Addr
	opts := []nats.Option{nats.Name("kusaw worker " + id.Name + " (joining)"), nats.MaxReconnects(0), nats.Timeout(10 * time.Second)}
	if tok.JWT != "" {
		tc, err := ClusterTLS([]byte(tok.CAPEM))
		if err != nil {
			return err
		}
		where, url = tok.URLs, tok.URLs
		// A bearer JWT: the server checks no nonce signature. It may
		// receive replies only under its own inbox.
		opts = append(opts, nats.Secure(tc), nats.UserJWT(func() (string, error) { return tok.JWT, nil }, func([]byte) ([]byte, error) { return nil, nil }),
			nats.CustomInboxPrefix(enrollInboxOf(tok.JWT)))
	} else {
		opts = append(opts, nats.UserInfo(EnrollUser, tok.Secret), nats.Secure(PinnedTLS(tok.CA)), nats.CustomInboxPrefix(secretInbox(tok.Secret)))
	}
	nc, err := connectPatiently(ctx, url, opts...)
	if err != nil {
		if isAuthErr(err) {
			return fmt.Errorf("serve refused the join token: it was used already or has expired; make a new one with kusaw cluster token")
		}
		return fmt.Errorf("cannot reach serve at %s: %v", where, err)
	}
	defer nc.Close()
	sig, err := id.Sign([]byte(tok.Secret))
	if err != nil {
		return err
	}
	b, _ := json.Marshal(EnrollRequest{Secret: tok.Secret, Name: id.Name, NKey: id.NKey(), XKey: id.XKey(), Version: version, Pools: pools,
		Sig: base64.RawURLEncoding.EncodeToString(sig)})
	m, err := nc.RequestWithContext(ctx, SubjEnroll, b)
	if err != nil {
		return fmt.Errorf("enrollment: %v", err)
	}
	var rep EnrollReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return fmt.Errorf("enrollment: bad reply from serve")
	}
	if rep.Error != "" {
		return fmt.Errorf("serve refused the enrollment: %s", rep.Error)
	}
	if tok.JWT != "" && rep.JWT == "" {
		return fmt.Errorf("enrollment: serve sent no credential for the NATS cluster")
	}
	id.Server, id.CAPin, id.ServeXKey = where, tok.CA, rep.ServeXKey
	id.CAPEM, id.JWT, id.Grant = tok.CAPEM, rep.JWT, rep.Grant
	id.Joined = TokenID(tok)
	return nil
}

// Handles are the streams, buckets and object stores of the cluster.
type Handles struct {
	JS      jetstream.JetStream
	Workers jetstream.KeyValue
	// Objects are every pool's object stores (ObjectName names the pool).
	Objects ObjectStore

	mu       sync.Mutex
	pools    map[string]bool // pools whose streams this serve made
	poolOpts PoolOptions
	// leader: serve's, reading claims and objects from the streams'
	// leaders (see readMsg).
	leader bool
}

// What workers write lands on serve's disk (or the NATS cluster's), so
// every stream, bucket and object store has a byte limit and a limit on
// one message (docs/cluster.md, "How much serve's disk holds"):
//   - the events stream keeps at most EventsMaxBytes, dropping its oldest
//     events first: serve writes each event into the attempt's sealed
//     record as it arrives, so what goes is what serve already holds;
//   - each pool's object store holds at most ObjectsMaxBytes and refuses
//     a chunk that does not fit (the attempt then fails saying so); serve
//     frees an attempt's objects, and the chunks of an upload cut short,
//     when it stops waiting for it, and an object older than
//     ObjectsMaxAge expires;
//   - the work queue, each pool's claims and the heartbeats are small and
//     refuse what goes past their limit.
//
// And nothing in them can be rolled up (a publish header that empties a
// subject or a whole stream). No worker may delete or purge anything
// either: its permissions do not name those APIs, and the events stream
// and the heartbeats deny them to everyone. Serve alone withdraws work
// (a message it published, or all of it at start), revokes claims and
// frees objects (store.go).
const (
	EventsMaxBytes   = limits.EventsMaxBytes  // 1 GiB
	EventMaxSize     = 4 << 20                // one event or result (a result carries the worker's attempt record)
	ObjectsMaxBytes  = limits.ObjectsMaxBytes // 4 GiB per pool: several attempts' artifacts (at most 1 GiB each) at once
	ObjectsMaxAge    = 7 * 24 * time.Hour
	WorkMaxBytes     = limits.WorkMaxBytes
	WorkersMaxBytes  = limits.WorkersMaxBytes
	HeartbeatMaxSize = 256 << 10
	// MaxPayload is the largest message the embedded server takes: an
	// attempt's spec travels in one.
	MaxPayload = limits.MaxPayload
)

// SetupOptions size what Setup creates; zero values take the defaults.
type SetupOptions struct {
	// Replicas: how many JetStream servers keep each stream, bucket and
	// object store (an existing NATS cluster's serve.cluster.replicas).
	Replicas        int
	EventsMaxBytes  int64
	ObjectsMaxBytes int64 // per pool
	ClaimsMaxBytes  int64 // per pool
}

// Setup creates (serve, at start) the streams, the heartbeats bucket and
// pool default's claims and object store, and empties the work queue.
// Other pools' come with their first attempt (EnsurePool).
func Setup(ctx context.Context, nc *nats.Conn) (*Handles, error) {
	return SetupWith(ctx, nc, SetupOptions{})
}

// SetupReplicas is Setup with every stream, bucket and object store kept
// on that many JetStream servers.
func SetupReplicas(ctx context.Context, nc *nats.Conn, replicas int) (*Handles, error) {
	return SetupWith(ctx, nc, SetupOptions{Replicas: replicas})
}

// legacyStores are what an earlier kusaw kept for every pool at once;
// their claims and objects belong to attempts that serve cannot re-attach
// to in the per-pool stores, so they go.
var legacyStores = []string{"KV_KUSAW_CLAIMS", "OBJ_KUSAW_OBJECTS"}

// SetupWith is Setup as o says.
func SetupWith(ctx context.Context, nc *nats.Conn, o SetupOptions) (*Handles, error) {
	replicas := max(o.Replicas, 1)
	if o.EventsMaxBytes <= 0 {
		o.EventsMaxBytes = EventsMaxBytes
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	// Serve withdraws work, so the work queue allows deletes and purges;
	// no worker may publish there or call either.
	work, err := createWhenLed(ctx, js, jetstream.StreamConfig{Name: WorkStream, Subjects: []string{subjWork + ">"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas,
		MaxBytes: WorkMaxBytes, MaxMsgSize: MaxPayload, Discard: jetstream.DiscardNew})
	if err != nil && replicas > 1 {
		return nil, fmt.Errorf("stream %s with %d replicas: %v (serve.cluster.replicas needs that many JetStream servers in the NATS cluster)", WorkStream, replicas, err)
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %v", WorkStream, err)
	}
	// Work a previous serve published and nobody claimed is nobody's now:
	// its runs were recovered as interrupted (and, with serve.resume,
	// queued again as new attempts).
	if err := work.Purge(ctx); err != nil {
		return nil, fmt.Errorf("stream %s: %v", WorkStream, err)
	}
	if _, err := createWhenLed(ctx, js, jetstream.StreamConfig{Name: EventsStream, Subjects: []string{subjEvents + ">", subjResult + ">"},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: 7 * 24 * time.Hour, Replicas: replicas,
		MaxBytes: o.EventsMaxBytes, MaxMsgSize: EventMaxSize, Discard: jetstream.DiscardOld, DenyDelete: true, DenyPurge: true}); err != nil {
		return nil, fmt.Errorf("stream %s: %v", EventsStream, err)
	}
	h := &Handles{JS: js, Objects: streamObjects{js: js, leader: true}, pools: map[string]bool{}, leader: true,
		poolOpts: PoolOptions{Replicas: replicas, ClaimsMaxBytes: o.ClaimsMaxBytes, ObjectsMaxBytes: o.ObjectsMaxBytes}}
	// The heartbeats bucket as nats.go would make it, less roll-ups,
	// deletes and purges: each worker puts its own key, serve only reads.
	if _, err := createWhenLed(ctx, js, jetstream.StreamConfig{Name: "KV_" + WorkersBucket, Subjects: []string{"$KV." + WorkersBucket + ".>"},
		MaxMsgsPerSubject: 1, MaxBytes: WorkersMaxBytes, MaxMsgSize: HeartbeatMaxSize, Storage: jetstream.FileStorage, Replicas: replicas,
		Discard: jetstream.DiscardNew, AllowDirect: true, DenyDelete: true, DenyPurge: true, Duplicates: 2 * time.Minute,
		MaxMsgs: -1, MaxConsumers: -1}); err != nil {
		return nil, fmt.Errorf("bucket %s: %v", WorkersBucket, err)
	}
	if h.Workers, err = js.KeyValue(ctx, WorkersBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %v", WorkersBucket, err)
	}
	for _, name := range legacyStores {
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("stream %s (an earlier kusaw's): %v", name, err)
		}
	}
	// A previous serve's claims and objects stay: a resumed run
	// re-attaches to attempts still running on workers, and serve ends
	// the rest once it knows (dispatch.Settle).
	if err := h.EnsurePool(ctx, config.DefaultPool); err != nil {
		return nil, err
	}
	return h, nil
}

// Open binds (a worker) to what serve created.
func Open(ctx context.Context, nc *nats.Conn) (*Handles, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	h := &Handles{JS: js, Objects: streamObjects{js: js}, pools: map[string]bool{}}
	if h.Workers, err = js.KeyValue(ctx, WorkersBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %v (is serve running?)", WorkersBucket, err)
	}
	return h, nil
}

// connectPatiently connects, trying again for a few seconds when the
// server was there but the handshake failed: a server under load may
// send its first RTT PING before the PONG nats.go waits for
// (nats-server#1174), and a serve just started may not listen yet. A
// refused identity is final at once.
func connectPatiently(ctx context.Context, url string, opts ...nats.Option) (*nats.Conn, error) {
	deadline := time.Now().Add(connectPatience)
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil || isAuthErr(err) || time.Now().After(deadline) {
			return nc, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

const connectPatience = 15 * time.Second

// createWhenLed makes a stream, waiting while a NATS cluster that has
// just started (or restarted a server) still settles: it elects its
// JetStream leader (requests time out, or the server answers that
// JetStream is temporarily unavailable), or its leader still counts a
// peer offline that is reconnecting its routes; for up to clusterSettle.
func createWhenLed(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	deadline := time.Now().Add(clusterSettle)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := js.CreateOrUpdateStream(rctx, cfg)
		cancel()
		if err == nil || !leaderless(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return s, err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

const clusterSettle = 60 * time.Second

// jsTemporarilyUnavailable is the server's "JetStream system temporarily
// unavailable" (no meta leader yet); nats.go names no constant for it.
const jsTemporarilyUnavailable jetstream.ErrorCode = 10008

// jsNoPeers is "no suitable peers for placement"; with "peer offline" a
// server the leader waits to hear from again, else (storage, tags) lasting.
const jsNoPeers jetstream.ErrorCode = 10005

func leaderless(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsTemporarilyUnavailable ||
		apiErr.ErrorCode == jsNoPeers && strings.Contains(apiErr.Description, "offline")) {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
}
