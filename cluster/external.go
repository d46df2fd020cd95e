package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// An existing NATS cluster (serve.cluster.nats_url) cannot run serve's
// authenticator, so there serve speaks NATS's own decentralized auth: it
// holds a signing key of the account it works in and issues user JWTs,
// which the cluster's servers check against the account's JWT. Serve's own
// JWT has every permission in the account; a worker's carries exactly
// workerPerms(name, grant); a join token carries a short-lived bearer JWT that
// may only ask to enroll (enrollPerms). The same two functions make the
// embedded server's permissions, so both ways in allow the same subjects.

// SystemRoots in a token's or identity's CA field: the cluster's
// certificates are checked against the system's roots.
const SystemRoots = "system"

// ExternalOptions configure serve on an existing NATS cluster.
type ExternalOptions struct {
	// Dir is state_dir/cluster: serve's identity, the registry and the
	// outstanding tokens (no CA and no JetStream store here).
	Dir string
	// URLs is serve.cluster.nats_url (comma-separated).
	URLs string
	// Account is the account's public key (A...); SigningSeed a signing
	// key of it (SA...), from the secret store.
	Account     string
	SigningSeed string
	// CAPEM is the cluster's CA bundle; nil: the system's roots.
	CAPEM []byte
}

// External is serve's side of an existing NATS cluster.
type External struct {
	URLs     string
	Account  string
	CAPEM    []byte
	Tokens   *Tokens
	Registry *Registry
	Identity *Identity // serve's own
	signer   nkeys.KeyPair
}

// OpenExternal checks the keys and reads serve's state in o.Dir.
func OpenExternal(o ExternalOptions) (*External, error) {
	if !nkeys.IsValidPublicAccountKey(o.Account) {
		return nil, fmt.Errorf("account is not a NATS account's public key (A...)")
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(o.SigningSeed)))
	if err != nil {
		return nil, fmt.Errorf("signing_key is not an nkey seed: store the account's signing seed (SA...)")
	}
	if pub, _ := kp.PublicKey(); !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("signing_key is not an account signing seed (SA...): store a signing key of account %s", o.Account)
	}
	if _, err := ClusterTLS(o.CAPEM); err != nil {
		return nil, err
	}
	id, err := LoadOrCreateIdentity(o.Dir, "serve")
	if err != nil {
		return nil, fmt.Errorf("serve's cluster identity: %v", err)
	}
	return &External{URLs: o.URLs, Account: o.Account, CAPEM: o.CAPEM, Tokens: OpenTokens(o.Dir), Registry: OpenRegistry(o.Dir),
		Identity: id, signer: kp}, nil
}

// ClusterTLS is the TLS config for an existing NATS cluster: its CA bundle
// when given (and nothing else), else the system's roots. Host names are
// checked (nats.go names each server it dials).
func ClusterTLS(caPEM []byte) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("the NATS cluster's CA bundle holds no PEM certificate")
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// jwtPermissions is the same permission set in a user JWT.
func jwtPermissions(p *server.Permissions) jwt.Permissions {
	var out jwt.Permissions
	if p == nil {
		return out
	}
	if p.Publish != nil {
		out.Pub = jwt.Permission{Allow: p.Publish.Allow, Deny: p.Publish.Deny}
	}
	if p.Subscribe != nil {
		out.Sub = jwt.Permission{Allow: p.Subscribe.Allow, Deny: p.Subscribe.Deny}
	}
	if p.Response != nil {
		out.Resp = &jwt.ResponsePermission{MaxMsgs: p.Response.MaxMsgs, Expires: p.Response.Expires}
	}
	return out
}

// userJWT issues a user JWT for nkey in the account, signed by the
// signing key; expires zero: no expiry.
func (x *External) userJWT(nkey, name string, perms *server.Permissions, expires time.Time, bearer bool) (string, error) {
	uc := jwt.NewUserClaims(nkey)
	uc.Name = name
	if pub, _ := x.signer.PublicKey(); pub != x.Account {
		uc.IssuerAccount = x.Account
	}
	uc.Permissions = jwtPermissions(perms)
	uc.BearerToken = bearer
	if !expires.IsZero() {
		uc.Expires = expires.Unix()
	}
	return uc.Encode(x.signer)
}

// WorkerJWT is the credential an enrolled worker connects with: its nkey,
// exactly workerPerms(name), no expiry (revoke it on the account to shut
// the worker out).
func (x *External) WorkerJWT(name, nkey string, g Grant) (string, error) {
	return x.userJWT(nkey, "kusaw worker "+name, workerPerms(name, g), time.Time{}, false)
}

// servePerms: serve may do anything in the account. Written out rather
// than left empty, because a JWT without permissions takes the account's
// default permissions, which a team may have narrowed for its own users.
func servePerms() *server.Permissions {
	return &server.Permissions{Publish: &server.SubjectPermission{Allow: []string{">"}},
		Subscribe: &server.SubjectPermission{Allow: []string{">"}}}
}

// Connect is serve's connection: a fresh JWT with every permission in the
// account for serve's nkey, TLS always, reconnecting by itself.
func (x *External) Connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	tc, err := ClusterTLS(x.CAPEM)
	if err != nil {
		return nil, err
	}
	all := append([]nats.Option{nats.Name(name), nats.Secure(tc), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.UserJWT(func() (string, error) {
			return x.userJWT(x.Identity.NKey(), "kusaw serve", servePerms(), time.Time{}, false)
		}, x.Identity.Sign)},
		opts...)
	nc, err := nats.Connect(x.URLs, all...)
	if err != nil && isAuthErr(err) {
		return nil, fmt.Errorf("the NATS cluster at %s refused serve's credentials: is signing_key a signing key of account %s, and is the account on the cluster? (%v)", x.URLs, x.Account, err)
	}
	if why := tlsTrouble(err, x.URLs, len(x.CAPEM) > 0); why != "" {
		return nil, fmt.Errorf("cannot connect to the NATS cluster at %s: %s (%v)", x.URLs, why, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot connect to the NATS cluster at %s: %v", x.URLs, err)
	}
	return nc, nil
}

// NewToken makes a one-time join token: the cluster's URLs (urls
// replaces nats_url when workers reach it by other names), its CA bundle
// or SystemRoots, the secret, and a bearer JWT that expires with the
// token and may only ask to enroll.
func (x *External) NewToken(urls string, g Grant) (Token, error) {
	if urls == "" {
		urls = x.URLs
	}
	urls = withScheme(urls)
	tok, expires, err := x.Tokens.newSecret(g)
	if err != nil {
		return Token{}, err
	}
	tok.URLs, tok.CA = urls, SystemRoots
	if len(x.CAPEM) > 0 {
		tok.CAPEM = string(x.CAPEM)
		tok.CA = pemFingerprint(x.CAPEM)
	}
	// A bearer JWT needs a subject but no key: whoever holds the token may
	// use it, and the nkey's seed is never kept.
	kp, err := nkeys.CreateUser()
	if err != nil {
		return Token{}, err
	}
	sub, _ := kp.PublicKey()
	if tok.JWT, err = x.userJWT(sub, EnrollUser, enrollPerms(EnrollInbox(sub)), expires, true); err != nil {
		return Token{}, err
	}
	return tok, nil
}

// EnrollInbox is the inbox prefix a join token's JWT may receive replies
// under: the JWT's own subject (each token has a fresh one). The joining
// worker reads it from the JWT.
func EnrollInbox(jwtSubject string) string { return "_INBOX_ENROLL." + jwtSubject }

// enrollInboxOf is EnrollInbox for a token's JWT ("" when it is damaged).
func enrollInboxOf(token string) string {
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return ""
	}
	return EnrollInbox(uc.Subject)
}

// withScheme gives each URL of a comma-separated list without a scheme
// tls:// (kusaw cluster token --addr host:port,host2:port).
func withScheme(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "tls://" + p
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}

// Enroller answers enrollments for this cluster: each enrolled worker
// gets its JWT in the reply.
func (x *External) Enroller() *Enroller {
	return &Enroller{Tokens: x.Tokens, Registry: x.Registry, Identity: x.Identity, Issue: x.WorkerJWT}
}

// ServeEnrollments answers enrollment requests on nc until ctx ends.
func (x *External) ServeEnrollments(ctx context.Context, nc *nats.Conn) error {
	return x.Enroller().Serve(ctx, nc)
}
