package enroll

import (
	"crypto/ed25519"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/kusaw/kusaw/config"
)

// Grant is what a join token allows its worker: the pools it may take
// (default: pool default only), or every pool (kusaw cluster token
// --any-pool).
type Grant struct {
	Pools   []string `json:"pools,omitempty"`
	AnyPool bool     `json:"any_pool,omitempty"`
}

// Normal checks a grant and gives it its default: no pool and not any
// pool is pool default alone.
func (g Grant) Normal() (Grant, error) {
	if g.AnyPool {
		if len(g.Pools) > 0 {
			return Grant{}, fmt.Errorf("--any-pool and --pool exclude each other: name the pools, or allow every pool")
		}
		return g, nil
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range g.Pools {
		if !ValidName(p) {
			return Grant{}, fmt.Errorf("pool %q: use letters, digits, - and _ (at most 64)", p)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		out = []string{config.DefaultPool}
	}
	sort.Strings(out)
	return Grant{Pools: out}, nil
}

// Allows reports whether the grant lets its worker take pool.
func (g Grant) Allows(pool string) bool {
	return g.AnyPool || slices.Contains(g.Pools, pool)
}

// String is the grant for people: "a,b" or "any".
func (g Grant) String() string {
	if g.AnyPool {
		return "any"
	}
	return strings.Join(g.Pools, ",")
}

// ValidName reports whether a worker or pool name can be a subject token.
func ValidName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// PublicSigningKey is the ed25519 public key of a user nkey (U...).
func PublicSigningKey(nkey string) (ed25519.PublicKey, error) {
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(nkey))
	if err != nil {
		return nil, err
	}
	return ed25519.PublicKey(raw), nil
}
