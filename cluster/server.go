package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/kusaw/kusaw/cluster/limits"
)

// ServerOptions configure serve's embedded NATS server.
type ServerOptions struct {
	// Dir is state_dir/cluster: the CA, serve's identity, the registry,
	// outstanding tokens and JetStream's store.
	Dir string
	// Listen opens the server to workers ("host:port"); empty: reachable
	// only in-process (serve's own local worker).
	Listen string
}

// Server is serve's embedded NATS server with JetStream.
type Server struct {
	NS       *server.Server
	Dir      string
	CA       *CA
	Tokens   *Tokens
	Registry *Registry
	Identity *Identity // serve's own
	addr     string
}

// JetStreamDir is where JetStream keeps its files under Dir.
const JetStreamDir = "jetstream"

// StartServer starts the embedded server: TLS always (with serve's own CA,
// made on first start) and every client authenticated by an enrolled nkey,
// except a joining worker holding an unused token secret, which may only
// ask to enroll.
func StartServer(o ServerOptions) (*Server, error) {
	ca, err := LoadOrCreateCA(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %v", err)
	}
	id, err := LoadOrCreateIdentity(o.Dir, "serve")
	if err != nil {
		return nil, fmt.Errorf("serve's cluster identity: %v", err)
	}
	s := &Server{Dir: o.Dir, CA: ca, Tokens: OpenTokens(o.Dir), Registry: OpenRegistry(o.Dir), Identity: id}
	opts := &server.Options{ServerName: "kusaw-serve", JetStream: true, StoreDir: filepath.Join(o.Dir, JetStreamDir),
		NoLog: true, NoSigs: true, AlwaysEnableNonce: true, CustomClientAuthentication: &auth{s: s},
		MaxPayload: MaxPayload, JetStreamMaxMemory: AccountMaxMemory, JetStreamMaxStore: storeRoom(filepath.Join(o.Dir, JetStreamDir))}
	if o.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(o.Listen)
		if err != nil {
			return nil, fmt.Errorf("serve.cluster.listen %q: %v", o.Listen, err)
		}
		opts.Host = host
		if opts.Port, err = strconv.Atoi(port); err != nil {
			return nil, fmt.Errorf("serve.cluster.listen %q: bad port", o.Listen)
		}
		if opts.Port == 0 {
			opts.Port = server.RANDOM_PORT
		}
		tc, err := ca.ServerTLS(o.Dir, o.Listen)
		if err != nil {
			return nil, err
		}
		opts.TLSConfig, opts.TLS, opts.TLSTimeout = tc, true, 5
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("cluster server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("the cluster server did not start (is %s in use?)", o.Listen)
	}
	if err := ns.GlobalAccount().UpdateJetStreamLimits(map[string]server.JetStreamAccountLimits{"": AccountLimits}); err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("cluster server: JetStream limits: %v", err)
	}
	s.NS = ns
	if a := ns.Addr(); a != nil && !opts.DontListen {
		s.addr = a.String()
	}
	return s, nil
}

// Disconnect closes every connection made with a worker's nkey (retired:
// it cannot come back, the key is no longer let in) and says how many.
func (s *Server) Disconnect(nkey string) int {
	cz, err := s.NS.Connz(&server.ConnzOptions{Username: true, User: nkey, Limit: 1 << 16})
	if err != nil {
		return 0
	}
	n := 0
	for _, c := range cz.Conns {
		if c.AuthorizedUser == nkey && s.NS.DisconnectClientByID(c.Cid) == nil {
			n++
		}
	}
	return n
}

// AccountLimits bound what the embedded server's one account keeps: a
// stream that does not say how much it holds is refused, and so is one
// larger than the largest kusaw makes; at most 256 streams (serve makes
// one pair per pool it dispatches to) and 4096 consumers (serve's reader
// of each attempt it waits for, the pools' work consumers: a worker may
// make nothing else). Its bytes are the server's: AccountMaxStore, or
// three quarters of the disk's free room when that is less (storeRoom),
// and AccountMaxMemory (kusaw keeps nothing in memory streams). They are
// the server's own limits rather than the account's, since the server
// would count a restarted serve's streams twice against the account's.
var AccountLimits = server.JetStreamAccountLimits{
	MaxMemory:           -1,
	MaxStore:            -1,
	MaxStreams:          256,
	MaxConsumers:        4096,
	StoreMaxStreamBytes: max(ObjectsMaxBytes, EventsMaxBytes),
	MaxBytesRequired:    true,
}

// AccountMaxStore is at most what the embedded server's JetStream keeps
// on disk: the events, the work queue and the heartbeats and about a
// dozen pools' claims and objects.
const (
	AccountMaxStore  int64 = 64 << 30
	AccountMaxMemory       = limits.AccountMaxMemory
)

// storeRoom is AccountMaxStore, or three quarters of the free room of the
// disk dir is on when that is less (as a NATS server reckons by itself).
func storeRoom(dir string) int64 {
	_ = os.MkdirAll(dir, 0o700)
	free := diskFree(dir)
	if free <= 0 {
		return AccountMaxStore
	}
	return min(AccountMaxStore, free/4*3)
}

// Addr is the address workers connect to ("" when not listening).
func (s *Server) Addr() string { return s.addr }

// URL is the address as a NATS URL.
func (s *Server) URL() string { return "tls://" + s.addr }

// Shutdown stops the server.
func (s *Server) Shutdown() {
	s.NS.Shutdown()
	s.NS.WaitForShutdown()
}

// ConnectInProcess is serve's own connection (no socket).
func (s *Server) ConnectInProcess(name string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect("", append([]nats.Option{nats.InProcessServer(s.NS), nats.Name(name), nats.Nkey(s.Identity.NKey(), s.Identity.Sign),
		nats.MaxReconnects(-1)}, opts...)...)
}

// NewToken makes a one-time join token for this server allowing g; addr
// is the address workers reach it by (default: the listen address).
func (s *Server) NewToken(addr string, g Grant) (Token, error) {
	if addr == "" {
		addr = s.addr
	}
	if addr == "" {
		return Token{}, fmt.Errorf("serve's cluster does not listen: set serve.cluster.listen")
	}
	return s.Tokens.New(addr, s.CA.Fingerprint(), g)
}

// auth is the server's only way in.
type auth struct{ s *Server }

// workerPerms are an enrolled worker's permissions, on the embedded
// server and in its JWT on an existing cluster alike: what it may do is
// named, the rest is refused. It may publish events, results, secrets and
// bundle requests under its own name only (serve reads the sender from
// the subject) and put its own heartbeat. Of its pools (every pool, for
// a grant of --any-pool) it may write and read the claims and the
// objects, by subject and by direct get only (store.go), and use the work
// queue's consumer: creating one only as pool-<P> filtered on P's subject
// (the server checks the body's filter against the subject's), pulling
// from it and acknowledging its messages. So it can never read, take or
// acknowledge another pool's attempts, nor read or touch another pool's
// claims, bundles, logs or artifacts; nor publish work, make, change,
// empty or delete a stream, make a consumer of a bucket or store, read
// the events stream (every attempt's events and results: a worker only
// ever publishes there) or read other workers' heartbeats.
func workerPerms(name string, g Grant) *server.Permissions {
	deny := []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
		"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>",
		// A snapshot reads a whole stream; a restore makes one.
		"$JS.API.STREAM.SNAPSHOT.>", "$JS.API.STREAM.RESTORE.>"}
	allow := []string{"$JS.API.INFO", "$KV." + WorkersBucket + "." + name, "$JS.API.STREAM.INFO.KV_" + WorkersBucket,
		EventsSubject("*", name), ResultSubject("*", name), SecretsSubject("*", name), BundleSubject("*", name)}
	pools := g.Pools
	if g.AnyPool {
		pools = []string{"*"}
	}
	for _, p := range pools {
		cons, claims, objects := WorkConsumer(p), ClaimsStream(p), ObjectsStream(p)
		if p == "*" {
			// The stream's name is one token; the subject after it, which
			// the server matches against the stream's own, keeps a direct
			// get to claims and objects.
			cons, claims, objects = "*", "*", "*"
		}
		allow = append(allow,
			subjClaims+p+".*", subjObjects+p+"."+workersWrite+".>",
			"$JS.API.DIRECT.GET."+claims+"."+subjClaims+p+".*",
			"$JS.API.DIRECT.GET."+objects+"."+subjObjects+p+".>",
			"$JS.API.CONSUMER.CREATE."+WorkStream+"."+cons+"."+WorkSubject(p),
			"$JS.API.CONSUMER.MSG.NEXT."+WorkStream+"."+cons,
			"$JS.API.CONSUMER.INFO."+WorkStream+"."+cons,
			// Acknowledgements, in both of the server's reply forms.
			"$JS.ACK."+WorkStream+"."+cons+".>", "$JS.ACK.*.*."+WorkStream+"."+cons+".>")
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: allow, Deny: append(deny, streamReaders(EventsStream)...)},
		// Replies only under its own inbox: whoever may subscribe to every
		// inbox reads every reply (serve's pulls of the events stream,
		// other workers' reads).
		Subscribe: &server.SubjectPermission{Allow: []string{WorkerInbox(name) + ".>", subjCancel + ">", ControlSubject(name)}},
	}
}

// streamReaders are the JetStream API subjects that read a stream's
// messages or make, list, inspect, pause or delete its consumers: a
// consumer of any kind (durable, ephemeral, ordered, push or pull; the
// legacy and the named create), a pull from an existing one (serve's),
// a message get, a direct get, and the stream's info (its subjects name
// every attempt and worker).
func streamReaders(stream string) []string {
	return []string{
		"$JS.API.CONSUMER.*." + stream,        // CREATE (legacy), LIST, NAMES
		"$JS.API.CONSUMER.*." + stream + ".>", // CREATE <name> [filter], INFO, DELETE, PAUSE, UNPIN
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.API.CONSUMER.LEADER.STEPDOWN." + stream + ".>",
		"$JS.API.STREAM.MSG.GET." + stream,
		"$JS.API.DIRECT.GET." + stream, "$JS.API.DIRECT.GET." + stream + ".>",
		"$JS.API.STREAM.INFO." + stream,
	}
}

// enrollPerms: a joining worker may ask to enroll and receive the reply
// under inbox, one of its token's own (the embedded server: secretInbox;
// a token's JWT on an existing cluster: EnrollInbox), so a token holder
// cannot listen to others' replies.
func enrollPerms(inbox string) *server.Permissions {
	return &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{SubjEnroll}},
		Subscribe: &server.SubjectPermission{Allow: []string{inbox + ".>"}}}
}

// WorkerInbox is the inbox prefix of a worker's connection: the only
// replies it may receive. Inside _INBOX, where serve's own inboxes (a
// random token) never start with kusaw-w.
func WorkerInbox(name string) string { return "_INBOX.kusaw-w." + name }

// secretInbox is the inbox of a connection that enrolls with a token's
// secret on the embedded server: derived from the secret, which only its
// holder knows.
func secretInbox(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "_INBOX_ENROLL." + hex.EncodeToString(sum[:16])
}

func (a *auth) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	o := c.GetOpts()
	switch {
	case o.Nkey != "":
		if !verifyNonce(o.Nkey, o.Sig, c.GetNonce()) {
			return false
		}
		if o.Nkey == a.s.Identity.NKey() {
			c.RegisterUser(&server.User{Username: "serve"})
			return true
		}
		w := a.s.Registry.ByNKey(o.Nkey)
		if w == nil {
			return false
		}
		c.RegisterUser(&server.User{Username: w.Name, Permissions: workerPerms(w.Name, w.Grant())})
		return true
	case o.Username == EnrollUser && a.s.Tokens.Valid(o.Password):
		c.RegisterUser(&server.User{Username: EnrollUser, Permissions: enrollPerms(secretInbox(o.Password)), ConnectionDeadline: time.Now().Add(time.Minute)})
		return true
	}
	return false
}

func verifyNonce(nkey, sig string, nonce []byte) bool {
	if len(nonce) == 0 || sig == "" {
		return false
	}
	pub, err := nkeys.FromPublicKey(nkey)
	if err != nil {
		return false
	}
	if nk, _ := pub.PublicKey(); len(nk) == 0 || nk[0] != 'U' {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if b, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	return pub.Verify(nonce, b) == nil
}

// EnrollRequest is what a joining worker sends with its token's secret.
type EnrollRequest struct {
	Secret  string `json:"secret"`
	Name    string `json:"name"`
	NKey    string `json:"nkey"`
	XKey    string `json:"xkey"`
	Version string `json:"version,omitempty"`
	// Pools the worker means to offer: each must be one its token allows.
	Pools []string `json:"pools,omitempty"`
	// Sig is the token's secret signed with the nkey: proof that the
	// asker holds it. Serve requires it to join an enrolled worker again
	// (new pools, a narrower JWT), so a token's holder cannot rewrite
	// another worker's entry by naming its public key.
	Sig string `json:"sig,omitempty"`
}

// EnrollReply is serve's answer; on an existing NATS cluster it carries
// the worker's user JWT.
type EnrollReply struct {
	Error     string `json:"error,omitempty"`
	ServeXKey string `json:"serve_xkey,omitempty"`
	JWT       string `json:"jwt,omitempty"`
	// Grant is what serve recorded the worker may take: its token's.
	Grant *Grant `json:"grant,omitempty"`
}

// ServeEnrollments answers enrollment requests on nc until ctx ends.
func (s *Server) ServeEnrollments(ctx context.Context, nc *nats.Conn) error {
	return (&Enroller{Tokens: s.Tokens, Registry: s.Registry, Identity: s.Identity}).Serve(ctx, nc)
}

// Enroller answers enrollment requests on any connection (the embedded
// server's or an existing cluster's): it checks the request, spends the
// token's secret and records the worker. Issue, when set, makes the
// credential the worker connects with from then on (a user JWT).
type Enroller struct {
	Tokens   *Tokens
	Registry *Registry
	Identity *Identity // serve's
	Issue    func(name, nkey string, g Grant) (string, error)
}

// Serve answers on nc until ctx ends.
func (e *Enroller) Serve(ctx context.Context, nc *nats.Conn) error {
	sub, err := nc.Subscribe(SubjEnroll, func(m *nats.Msg) {
		b, _ := json.Marshal(e.answer(m.Data))
		_ = m.Respond(b)
	})
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); _ = sub.Unsubscribe() }()
	return nil
}

func (e *Enroller) answer(data []byte) EnrollReply {
	var req EnrollRequest
	if json.Unmarshal(data, &req) != nil {
		return EnrollReply{Error: "bad enrollment request"}
	}
	switch {
	case !ValidName(req.Name):
		return EnrollReply{Error: fmt.Sprintf("worker name %q: use letters, digits, - and _ (at most 64)", req.Name)}
	case !validKey(req.NKey, 'U') || !validKey(req.XKey, 'X'):
		return EnrollReply{Error: "bad worker keys"}
	case e.Registry.Known(req.Name) != nil && e.Registry.Get(req.Name) == nil:
		return EnrollReply{Error: fmt.Sprintf("the worker named %s was retired (kusaw workers retire): pick another --name, and a new --state-dir", req.Name)}
	case e.Registry.RetiredKeys()[req.NKey] != (time.Time{}):
		// Revocation is by key: a retired key stays out under any name.
		return EnrollReply{Error: "this worker's key belongs to a retired worker (kusaw workers retire): join from a new --state-dir, which makes new keys"}
	case e.Registry.Get(req.Name) != nil && e.Registry.Get(req.Name).NKey != req.NKey:
		return EnrollReply{Error: fmt.Sprintf("a worker named %s is already enrolled with another key: pick another --name", req.Name)}
	case (req.Sig != "" || e.Registry.Get(req.Name) != nil) && !verifyNonce(req.NKey, req.Sig, []byte(req.Secret)):
		return EnrollReply{Error: fmt.Sprintf("the enrollment of %s is not signed by its key", req.Name)}
	}
	g, ok := e.Tokens.Grant(req.Secret)
	if !ok {
		return EnrollReply{Error: "the join token was used already or has expired: make a new one with kusaw cluster token"}
	}
	for _, p := range req.Pools {
		if !g.Allows(p) {
			return EnrollReply{Error: fmt.Sprintf("the join token allows pools %s, not %s: make a token for it with kusaw cluster token --pool %s", g, p, p)}
		}
	}
	rep := EnrollReply{ServeXKey: e.Identity.XKey(), Grant: &g}
	// Issued before the secret is spent: a failure leaves the token usable.
	if e.Issue != nil {
		var err error
		if rep.JWT, err = e.Issue(req.Name, req.NKey, g); err != nil {
			return EnrollReply{Error: "cannot issue the worker's credential"}
		}
	}
	switch {
	case !e.Tokens.Use(req.Secret):
		return EnrollReply{Error: "the join token was used already or has expired: make a new one with kusaw cluster token"}
	case !e.Registry.Add(Enrolled{Name: req.Name, NKey: req.NKey, XKey: req.XKey, Enrolled: time.Now().UTC(), Allowed: g.Pools, AnyPool: g.AnyPool}):
		return EnrollReply{Error: "cannot record the enrollment"}
	}
	return rep
}

func validKey(k string, prefix byte) bool {
	if len(k) == 0 || k[0] != prefix {
		return false
	}
	_, err := nkeys.FromPublicKey(k)
	return err == nil
}
