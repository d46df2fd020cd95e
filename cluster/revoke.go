package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/kusaw/kusaw/cluster/enroll"
)

// On an existing NATS cluster a worker's user JWT never expires, so
// retiring it must reach the servers: the account JWT's revocations list
// its user key, and every server then closes its connections and refuses
// it. An account JWT is the operator's to sign and the system account's to
// push, so serve holds an operator signing key and a scoped signing key of
// the system account whose users may only look up and update kusaw's
// account (RevokerPerms). kusaw cluster nats-config writes both; the
// servers keep accounts in a full resolver, so the update outlives a
// restart and reaches a server that was down.

// revokeInbox: serve's system user receives only here.
const revokeInbox = enroll.RevokeInbox

// RevokerPerms is enroll.RevokerPerms.
func RevokerPerms(account string) jwt.Permissions { return enroll.RevokerPerms(account) }

// RevokerOptions are what serve needs to revoke users of Account.
type RevokerOptions struct {
	URLs    string
	CAPEM   []byte
	Account string
	// SystemAccount is the system account's public key; SystemSeed a
	// signing key of it (SA...), scoped to RevokerPerms; OperatorSeed an
	// operator signing key (SO...) of the operator that signed Account.
	SystemAccount string
	SystemSeed    string
	OperatorSeed  string
}

// Revoker updates kusaw's account JWT with the revocations of retired
// workers' user keys.
type Revoker struct {
	o        RevokerOptions
	sys, opk nkeys.KeyPair
	mu       sync.Mutex // one read-change-write of the account at a time
}

// NewRevoker checks the keys.
func NewRevoker(o RevokerOptions) (*Revoker, error) {
	if !nkeys.IsValidPublicAccountKey(o.SystemAccount) {
		return nil, errors.New("system_account is not a NATS account's public key (A...): write the system account's (kusaw cluster nats-config prints it)")
	}
	sys, err := nkeys.FromSeed([]byte(strings.TrimSpace(o.SystemSeed)))
	if pub, _ := keyPub(sys, err); !nkeys.IsValidPublicAccountKey(pub) {
		return nil, fmt.Errorf("system_key is not an account signing seed (SA...): store a signing key of the system account %s", o.SystemAccount)
	}
	opk, err := nkeys.FromSeed([]byte(strings.TrimSpace(o.OperatorSeed)))
	if pub, _ := keyPub(opk, err); !nkeys.IsValidPublicOperatorKey(pub) {
		return nil, errors.New("operator_key is not an operator signing seed (SO...): store a signing key of the operator that signed the account")
	}
	if _, err := ClusterTLS(o.CAPEM); err != nil {
		return nil, err
	}
	return &Revoker{o: o, sys: sys, opk: opk}, nil
}

func keyPub(kp nkeys.KeyPair, err error) (string, error) {
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// connect is a short-lived connection as a fresh user of the system
// account (its key never kept).
func (r *Revoker) connect() (*nats.Conn, error) {
	tc, err := ClusterTLS(r.o.CAPEM)
	if err != nil {
		return nil, err
	}
	u, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	pub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = "kusaw serve (revocations)"
	uc.IssuerAccount = r.o.SystemAccount
	// A scoped key's user carries no permissions or limits of its own
	// (the servers refuse one that does): the scope's template applies.
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	tok, err := uc.Encode(r.sys)
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(r.o.URLs, nats.Name("kusaw serve (revocations)"), nats.Secure(tc), nats.CustomInboxPrefix(revokeInbox),
		nats.UserJWT(func() (string, error) { return tok, nil }, func(n []byte) ([]byte, error) { return u.Sign(n) }))
	if err != nil {
		if isAuthErr(err) {
			return nil, fmt.Errorf("the NATS cluster refused serve's system user: is system_key a signing key of system account %s? (%v)", r.o.SystemAccount, err)
		}
		if why := tlsTrouble(err, r.o.URLs, len(r.o.CAPEM) > 0); why != "" {
			return nil, fmt.Errorf("cannot connect to the NATS cluster at %s as the system account: %s (%v)", r.o.URLs, why, err)
		}
		return nil, fmt.Errorf("cannot connect to the NATS cluster at %s as the system account: %v", r.o.URLs, err)
	}
	return nc, nil
}

// RevokeRetired revokes every key reg has retired, not only the newest:
// the account JWT Revoke reads may come from a server that missed an
// earlier retirement (down then, or rebuilt from its configuration), and
// the JWT Revoke pushes replaces the account on every server, so a
// revocation missing from it is undone everywhere. serve's registry is
// what must be revoked.
func (r *Revoker) RevokeRetired(ctx context.Context, reg *Registry) error {
	return r.Revoke(ctx, reg.RetiredKeys())
}

// Revoke makes sure the account revokes each user key of users with
// every JWT issued up to the time given (when the worker was retired:
// serve issues it none after): it reads the account's JWT from the
// servers, adds what is missing, signs it with the operator key and
// pushes it. The servers close the revoked users' connections at once.
// Nothing missing: nothing is pushed.
func (r *Revoker) Revoke(ctx context.Context, users map[string]time.Time) error {
	if len(users) == 0 {
		return nil // no worker retired: nothing to ask the servers
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	nc, err := r.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	acc := r.o.Account
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, "$SYS.REQ.ACCOUNT."+acc+".CLAIMS.LOOKUP", nil)
	if err != nil {
		return fmt.Errorf("no NATS server answered a lookup of account %s (%v): its resolver must be a full one (resolver {type: full}, what kusaw cluster nats-config writes)", acc, err)
	}
	ac, err := jwt.DecodeAccountClaims(string(m.Data))
	if err != nil || ac.Subject != acc {
		return fmt.Errorf("the NATS servers answered no JWT of account %s: is serve.cluster.account the account on the servers? (%q)", acc, truncate(string(m.Data), 200))
	}
	now := time.Now()
	changed := false
	for u, since := range users {
		if !nkeys.IsValidPublicUserKey(u) {
			return fmt.Errorf("%q is not a user's public key", u)
		}
		// A revocation covers the JWTs issued up to its time.
		if t, ok := ac.Revocations[u]; ok && t >= since.Unix() {
			continue
		}
		ac.RevokeAt(u, now)
		changed = true
	}
	if !changed {
		return nil
	}
	// A server keeps the JWT with the later issue time (whole seconds),
	// and one that restarts offers its preloaded one again: the update
	// must be strictly later than what it replaces.
	for time.Now().Unix() <= ac.IssuedAt {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	signed, err := ac.Encode(r.opk)
	if err != nil {
		return err
	}
	m, err = nc.RequestWithContext(ctx, "$SYS.REQ.ACCOUNT."+acc+".CLAIMS.UPDATE", []byte(signed))
	if err != nil {
		return fmt.Errorf("no NATS server answered the update of account %s: %v", acc, err)
	}
	var resp struct {
		Data *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"data"`
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil || resp.Data == nil {
		why := truncate(string(m.Data), 200)
		if resp.Error != nil {
			why = resp.Error.Description
		}
		return fmt.Errorf("the NATS servers refused the update of account %s: %s (is operator_key a signing key of the operator that signed it?)", acc, why)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
