package cluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
	nc, err := nats.Connect(url, opts...)
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

// Handles are the streams, buckets and store of the cluster.
type Handles struct {
	JS      jetstream.JetStream
	Claims  jetstream.KeyValue
	Workers jetstream.KeyValue
	Objects jetstream.ObjectStore
}

// What workers write lands on serve's disk (or the NATS cluster's), so
// the two places they write most are bounded (docs/cluster.md):
//   - the events stream keeps at most EventsMaxBytes, dropping its oldest
//     events first: serve writes each event into the attempt's sealed
//     record as it arrives, so what goes is what serve already holds;
//   - the object store holds at most ObjectsMaxBytes and refuses an
//     upload that does not fit (the attempt then fails saying so); serve
//     deletes an attempt's objects when it stops waiting for it, and an
//     object older than ObjectsMaxAge (a refused upload's partial chunks,
//     which a worker may not purge) expires.
const (
	EventsMaxBytes  int64 = 1 << 30 // 1 GiB
	ObjectsMaxBytes int64 = 8 << 30 // 8 GiB: several attempts' artifacts (at most 1 GiB each) at once
	ObjectsMaxAge         = 7 * 24 * time.Hour
)

// SetupOptions size what Setup creates; zero values take the defaults.
type SetupOptions struct {
	// Replicas: how many JetStream servers keep each stream, bucket and
	// the object store (an existing NATS cluster's serve.cluster.replicas).
	Replicas        int
	EventsMaxBytes  int64
	ObjectsMaxBytes int64
}

// Setup creates (serve, at start) the streams, buckets and object store,
// and empties the work queue.
func Setup(ctx context.Context, nc *nats.Conn) (*Handles, error) {
	return SetupWith(ctx, nc, SetupOptions{})
}

// SetupReplicas is Setup with every stream, bucket and the object store
// kept on that many JetStream servers.
func SetupReplicas(ctx context.Context, nc *nats.Conn, replicas int) (*Handles, error) {
	return SetupWith(ctx, nc, SetupOptions{Replicas: replicas})
}

// SetupWith is Setup as o says.
func SetupWith(ctx context.Context, nc *nats.Conn, o SetupOptions) (*Handles, error) {
	replicas := max(o.Replicas, 1)
	if o.EventsMaxBytes <= 0 {
		o.EventsMaxBytes = EventsMaxBytes
	}
	if o.ObjectsMaxBytes <= 0 {
		o.ObjectsMaxBytes = ObjectsMaxBytes
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	work, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: WorkStream, Subjects: []string{subjWork + ">"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: replicas})
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
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: EventsStream, Subjects: []string{subjEvents + ">", subjResult + ">"},
		Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, MaxAge: 7 * 24 * time.Hour, Replicas: replicas,
		MaxBytes: o.EventsMaxBytes, Discard: jetstream.DiscardOld}); err != nil {
		return nil, fmt.Errorf("stream %s: %v", EventsStream, err)
	}
	h := &Handles{JS: js}
	if h.Claims, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: ClaimsBucket, History: 1, Storage: jetstream.FileStorage, Replicas: replicas}); err != nil {
		return nil, fmt.Errorf("bucket %s: %v", ClaimsBucket, err)
	}
	if h.Workers, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: WorkersBucket, History: 1, Storage: jetstream.FileStorage, Replicas: replicas}); err != nil {
		return nil, fmt.Errorf("bucket %s: %v", WorkersBucket, err)
	}
	if h.Objects, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: ObjectsBucket, Storage: jetstream.FileStorage, Replicas: replicas,
		MaxBytes: o.ObjectsMaxBytes, TTL: ObjectsMaxAge}); err != nil {
		return nil, fmt.Errorf("object store %s: %v", ObjectsBucket, err)
	}
	// A previous serve's claims and objects stay: a resumed run
	// re-attaches to attempts still running on workers, and serve ends
	// the rest once it knows (dispatch.Settle).
	return h, nil
}

// Open binds (a worker) to what serve created.
func Open(ctx context.Context, nc *nats.Conn) (*Handles, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	h := &Handles{JS: js}
	if h.Claims, err = js.KeyValue(ctx, ClaimsBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %v (is serve running?)", ClaimsBucket, err)
	}
	if h.Workers, err = js.KeyValue(ctx, WorkersBucket); err != nil {
		return nil, fmt.Errorf("bucket %s: %v", WorkersBucket, err)
	}
	if h.Objects, err = js.ObjectStore(ctx, ObjectsBucket); err != nil {
		return nil, fmt.Errorf("object store %s: %v", ObjectsBucket, err)
	}
	return h, nil
}
