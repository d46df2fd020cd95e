package cluster

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// TokenPrefix starts every join token, so a pasted token is recognisable.
const TokenPrefix = "kusaw-join-1."

// TokenTTL is how long a join token may wait for its worker.
const TokenTTL = 24 * time.Hour

// Token is what `kusaw cluster token` prints and `kusaw worker --join`
// reads: where serve is, the fingerprint of its CA, and a one-time secret.
// On an existing NATS cluster it carries the cluster's URLs instead of
// Addr, its CA bundle (CA is then the bundle's fingerprint, or SystemRoots)
// and a bearer JWT that lets its holder only ask to enroll.
type Token struct {
	Addr   string `json:"addr,omitempty"`
	CA     string `json:"ca"`
	Secret string `json:"secret"`
	URLs   string `json:"urls,omitempty"`
	CAPEM  string `json:"ca_pem,omitempty"`
	JWT    string `json:"jwt,omitempty"`
	// Pools are the pools the token lets its worker take, for the worker
	// to offer and check against: serve keeps its own copy with the
	// secret's hash and enrolls by that one, so editing them here gains
	// nothing.
	Pools   []string `json:"pools,omitempty"`
	AnyPool bool     `json:"any_pool,omitempty"`
}

// String encodes the token.
func (t Token) String() string {
	b, _ := json.Marshal(t)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ParseToken reads a token, refusing anything malformed.
func ParseToken(s string) (Token, error) {
	var t Token
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), TokenPrefix)
	if !ok {
		return t, fmt.Errorf("not a kusaw join token (it starts with %s): run kusaw cluster token on serve's machine", TokenPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || len(t.Secret) < 32 || !t.wellFormed() {
		return Token{}, fmt.Errorf("the join token is damaged: copy it again from kusaw cluster token")
	}
	return t, nil
}

// wellFormed: an embedded serve's token has an address and a CA
// fingerprint; an existing cluster's has URLs, a JWT and either
// SystemRoots or a CA bundle whose fingerprint is CA.
func (t Token) wellFormed() bool {
	if t.JWT == "" {
		return t.Addr != "" && len(t.CA) == 64 && t.URLs == "" && t.CAPEM == ""
	}
	if t.URLs == "" || t.Addr != "" || enrollInboxOf(t.JWT) == "" {
		return false
	}
	if t.CA == SystemRoots {
		return t.CAPEM == ""
	}
	return t.CAPEM != "" && pemFingerprint([]byte(t.CAPEM)) == t.CA
}

// pemFingerprint is the fingerprint of a PEM bundle's first certificate
// ("" when it has none).
func pemFingerprint(b []byte) string {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return ""
	}
	return Fingerprint(blk.Bytes)
}

// TokenID names a token without its secret (a hash of it).
func TokenID(t Token) string { return hashSecret(t.Secret)[:32] }

// tokensFile keeps the hashes of unused secrets (never the secrets).
const tokensFile = "tokens.json"

// Tokens are serve's outstanding one-time secrets.
type Tokens struct {
	mu   sync.Mutex
	path string
	m    map[string]tokenEntry // sha256(secret) → expiry and grant
}

type tokenEntry struct {
	Expires time.Time `json:"expires"`
	Grant   Grant     `json:"grant"`
}

// OpenTokens reads dir's outstanding tokens. A token an earlier kusaw
// made (an expiry alone) allows pool default only.
func OpenTokens(dir string) *Tokens {
	t := &Tokens{path: filepath.Join(dir, tokensFile), m: map[string]tokenEntry{}}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return t
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(b, &raw)
	for k, v := range raw {
		var e tokenEntry
		if json.Unmarshal(v, &e) != nil || e.Expires.IsZero() {
			if json.Unmarshal(v, &e.Expires) != nil {
				continue
			}
		}
		if e.Grant, err = e.Grant.Normal(); err == nil {
			t.m[k] = e
		}
	}
	return t
}

func hashSecret(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// New makes a token for serve at addr with CA fingerprint ca, allowing g.
func (t *Tokens) New(addr, ca string, g Grant) (Token, error) {
	tok, _, err := t.newSecret(g)
	tok.Addr, tok.CA = addr, ca
	return tok, err
}

// newSecret records a fresh secret allowing g and says when it expires.
func (t *Tokens) newSecret(g Grant) (Token, time.Time, error) {
	g, err := g.Normal()
	if err != nil {
		return Token{}, time.Time{}, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Token{}, time.Time{}, err
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	expires := time.Now().Add(TokenTTL)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[hashSecret(secret)] = tokenEntry{Expires: expires, Grant: g}
	return Token{Secret: secret, Pools: g.Pools, AnyPool: g.AnyPool}, expires, t.saveLocked()
}

// Valid reports whether secret is an unused, unexpired token's.
func (t *Tokens) Valid(secret string) bool {
	_, ok := t.Grant(secret)
	return ok
}

// Grant is what an unused, unexpired token's secret allows (serve's own
// record, not the token's copy).
func (t *Tokens) Grant(secret string) (Grant, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.findLocked(secret)
	if k == "" {
		return Grant{}, false
	}
	return t.m[k].Grant, true
}

// Use spends a secret: true once, false ever after.
func (t *Tokens) Use(secret string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.findLocked(secret)
	if k == "" {
		return false
	}
	delete(t.m, k)
	_ = t.saveLocked()
	return true
}

func (t *Tokens) findLocked(secret string) string {
	if secret == "" {
		return ""
	}
	h := hashSecret(secret)
	for k, e := range t.m {
		if subtle.ConstantTimeCompare([]byte(k), []byte(h)) == 1 && time.Now().Before(e.Expires) {
			return k
		}
	}
	return ""
}

func (t *Tokens) saveLocked() error {
	for k, e := range t.m {
		if time.Now().After(e.Expires) {
			delete(t.m, k)
		}
	}
	b, _ := json.Marshal(t.m)
	return writeFile(t.path, b, 0o600)
}
