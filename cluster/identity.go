package cluster

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"

	"github.com/kusaw/kusaw/cluster/enroll"
)

// IdentityFile holds a machine's cluster identity in its own state folder
// (mode 0600): serve's in state_dir/cluster/, a worker's in its --state-dir.
const IdentityFile = "identity.json"

// Identity is one machine's keys: an nkey (ed25519) it signs the server's
// connection nonce with and seals its egress logs with, and a curve key
// secrets are sealed to. Workers also keep what they enrolled with.
type Identity struct {
	Name      string `json:"name"`
	UserSeed  string `json:"user_seed"`
	CurveSeed string `json:"curve_seed"`
	// A worker's enrollment: serve's address, its CA's pin, and serve's
	// curve public key (secrets are sealed by it). On an existing NATS
	// cluster Server is the cluster's URLs, CAPin the fingerprint of CAPEM
	// (its CA bundle) or SystemRoots, and JWT the credential serve issued
	// for this identity's nkey.
	Server    string `json:"server,omitempty"`
	CAPin     string `json:"ca_pin,omitempty"`
	ServeXKey string `json:"serve_xkey,omitempty"`
	CAPEM     string `json:"ca_pem,omitempty"`
	JWT       string `json:"jwt,omitempty"`
	// Grant is what serve recorded this worker may take (its join
	// token's); nil for a worker an earlier kusaw enrolled.
	Grant *Grant `json:"grant,omitempty"`
	// Joined identifies the token it last joined with (TokenID): the same
	// token again is no new enrollment.
	Joined string `json:"joined,omitempty"`

	user, curve nkeys.KeyPair
}

// NewIdentity makes fresh keys.
func NewIdentity(name string) (*Identity, error) {
	u, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	c, err := nkeys.CreateCurveKeys()
	if err != nil {
		return nil, err
	}
	us, _ := u.Seed()
	cs, _ := c.Seed()
	return &Identity{Name: name, UserSeed: string(us), CurveSeed: string(cs), user: u, curve: c}, nil
}

// LoadIdentity reads dir's identity; os.ErrNotExist when there is none.
func LoadIdentity(dir string) (*Identity, error) {
	b, err := os.ReadFile(filepath.Join(dir, IdentityFile))
	if err != nil {
		return nil, err
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return nil, fmt.Errorf("%s: %v", filepath.Join(dir, IdentityFile), err)
	}
	if id.user, err = nkeys.FromSeed([]byte(id.UserSeed)); err != nil {
		return nil, fmt.Errorf("%s: bad user seed: %v", filepath.Join(dir, IdentityFile), err)
	}
	if id.curve, err = nkeys.FromCurveSeed([]byte(id.CurveSeed)); err != nil {
		return nil, fmt.Errorf("%s: bad curve seed: %v", filepath.Join(dir, IdentityFile), err)
	}
	return &id, nil
}

// LoadOrCreateIdentity reads dir's identity or makes and saves one.
func LoadOrCreateIdentity(dir, name string) (*Identity, error) {
	id, err := LoadIdentity(dir)
	if errors.Is(err, os.ErrNotExist) {
		if id, err = NewIdentity(name); err == nil {
			err = id.Save(dir)
		}
	}
	return id, err
}

// Save writes the identity (mode 0600).
func (id *Identity) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(id, "", "  ")
	return writeFile(filepath.Join(dir, IdentityFile), b, 0o600)
}

// NKey is the public user nkey (U...).
func (id *Identity) NKey() string { p, _ := id.user.PublicKey(); return p }

// XKey is the public curve key (X...).
func (id *Identity) XKey() string { p, _ := id.curve.PublicKey(); return p }

// Sign signs a server nonce.
func (id *Identity) Sign(nonce []byte) ([]byte, error) { return id.user.Sign(nonce) }

// Seal seals b to the curve key recipient.
func (id *Identity) Seal(b []byte, recipient string) ([]byte, error) {
	return id.curve.Seal(b, recipient)
}

// Open opens what sender sealed to this identity.
func (id *Identity) Open(b []byte, sender string) ([]byte, error) { return id.curve.Open(b, sender) }

// SigningKey is the nkey as an ed25519 key, for chainlog seals: a worker's
// egress.log is sealed with the key it enrolled.
func (id *Identity) SigningKey() ed25519.PrivateKey {
	_, raw, err := nkeys.DecodeSeed([]byte(id.UserSeed))
	if err != nil || len(raw) != ed25519.SeedSize {
		return nil
	}
	return ed25519.NewKeyFromSeed(raw)
}

// PublicSigningKey is the ed25519 public key of a user nkey (U...).
func PublicSigningKey(nkey string) (ed25519.PublicKey, error) { return enroll.PublicSigningKey(nkey) }
