// Package enroll is serve's record of the workers it enrolled
// (state_dir/cluster/workers.json) and what a join token grants them: what
// kusaw's own commands read (log verify, validate, cluster token) without
// linking the cluster's NATS code, which only the daemon (kusaw-daemon)
// does.
package enroll

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kusaw/kusaw/config"
)

// WorkersFile is the registry's file in the cluster folder.
const WorkersFile = "workers.json"

// Enrolled is one worker serve accepted: its name and public keys.
type Enrolled struct {
	Name     string    `json:"name"`
	NKey     string    `json:"nkey"`
	XKey     string    `json:"xkey"`
	Enrolled time.Time `json:"enrolled"`
	// Allowed are the pools its join token lets it take; AnyPool: every
	// pool (a token made with --any-pool). Serve enforces them (the
	// worker's NATS permissions, secrets, bundles and results).
	Allowed []string `json:"allowed_pools,omitempty"`
	AnyPool bool     `json:"any_pool,omitempty"`
	// Pools are every allowed pool the worker has offered (validate warns
	// about a step whose pool nobody ever offered).
	Pools []string `json:"pools,omitempty"`
	// Retired is when kusaw workers retire removed it: it may no longer
	// connect or take anything, and its name is not given again; its
	// keys stay so log verify still checks what it sealed.
	Retired *time.Time `json:"retired,omitempty"`
}

// Grant is what the worker may take.
func (e *Enrolled) Grant() Grant { return Grant{Pools: e.Allowed, AnyPool: e.AnyPool} }

// upgrade gives a worker an earlier kusaw enrolled, before tokens named
// pools, the pools it has offered so far (pool default when it offered
// none): what it took then, and no more.
func (e *Enrolled) upgrade() {
	if e.AnyPool || len(e.Allowed) > 0 {
		return
	}
	e.Allowed = append([]string(nil), e.Pools...)
	if len(e.Allowed) == 0 {
		e.Allowed = []string{config.DefaultPool}
	}
}

// Registry is serve's list of enrolled workers (state_dir/cluster/workers.json).
type Registry struct {
	mu   sync.Mutex
	path string
	m    map[string]*Enrolled // by name
}

// OpenRegistry reads dir's registry.
func OpenRegistry(dir string) *Registry {
	r := &Registry{path: filepath.Join(dir, WorkersFile), m: map[string]*Enrolled{}}
	if b, err := os.ReadFile(r.path); err == nil {
		var list []*Enrolled
		if json.Unmarshal(b, &list) == nil {
			for _, e := range list {
				e.upgrade()
				r.m[e.Name] = e
			}
		}
	}
	return r
}

// ByNKey finds an enrolled worker by its nkey (never a retired one).
func (r *Registry) ByNKey(nkey string) *Enrolled {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.m {
		if e.NKey == nkey && e.Retired == nil {
			c := *e
			return &c
		}
	}
	return nil
}

// Get finds an enrolled worker by name (never a retired one).
func (r *Registry) Get(name string) *Enrolled {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.m[name]; e != nil && e.Retired == nil {
		c := *e
		return &c
	}
	return nil
}

// Known finds a worker serve ever enrolled by name, retired or not: the
// key that sealed its attempts' egress logs.
func (r *Registry) Known(name string) *Enrolled {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.m[name]; e != nil {
		c := *e
		return &c
	}
	return nil
}

// Add enrolls a worker; a name already taken by another key is refused.
func (r *Registry) Add(e Enrolled) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.m[e.Name]; old != nil && (old.NKey != e.NKey || old.Retired != nil) {
		return false
	}
	e.upgrade()
	if old := r.m[e.Name]; old != nil {
		// Joined again: the pools it offered that it may still take stay.
		for _, p := range old.Pools {
			if e.Grant().Allows(p) && !slices.Contains(e.Pools, p) {
				e.Pools = append(e.Pools, p)
			}
		}
		sort.Strings(e.Pools)
	}
	r.m[e.Name] = &e
	return r.saveLocked() == nil
}

// Offered notes the pools a worker offers; one it may not take is not
// noted (its NATS permissions refuse it that pool's queue).
func (r *Registry) Offered(name string, pools []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[name]
	if e == nil {
		return
	}
	changed := false
	for _, p := range pools {
		if !e.Grant().Allows(p) {
			continue
		}
		found := false
		for _, q := range e.Pools {
			found = found || q == p
		}
		if !found {
			e.Pools = append(e.Pools, p)
			changed = true
		}
	}
	if changed {
		sort.Strings(e.Pools)
		_ = r.saveLocked()
	}
}

// Retire shuts a worker out for good (kusaw workers retire): from now on
// it cannot connect, and nothing it sends is taken. False: no such
// worker, or retired already.
func (r *Registry) Retire(name string) (*Enrolled, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.m[name]
	if e == nil || e.Retired != nil {
		return nil, false
	}
	now := time.Now().UTC()
	e.Retired = &now
	if r.saveLocked() != nil {
		e.Retired = nil
		return nil, false
	}
	c := *e
	return &c, true
}

// List is every enrolled worker by name (no retired one).
func (r *Registry) List() []Enrolled {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Enrolled
	for _, e := range r.m {
		if e.Retired == nil {
			out = append(out, *e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// EverOffered reads the pools any worker enrolled in dir has offered and
// may take.
func EverOffered(dir string) map[string]bool {
	out := map[string]bool{}
	for _, e := range OpenRegistry(dir).List() {
		for _, p := range e.Pools {
			if e.Grant().Allows(p) {
				out[p] = true
			}
		}
	}
	return out
}

// AllowedPools reads the pools some worker enrolled in dir may take;
// AnyPool ("*") when one may take every pool.
func AllowedPools(dir string) map[string]bool {
	out := map[string]bool{}
	for _, e := range OpenRegistry(dir).List() {
		if e.AnyPool {
			out[AnyPool] = true
		}
		for _, p := range e.Allowed {
			out[p] = true
		}
	}
	return out
}

// AnyPool marks, in AllowedPools, a worker that may take every pool.
const AnyPool = "*"

func (r *Registry) saveLocked() error {
	var list []*Enrolled
	for _, e := range r.m {
		list = append(list, e)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	b, _ := json.MarshalIndent(list, "", "  ")
	return writeFile(r.path, b, 0o600)
}

// writeFile replaces path with b at once (a write beside it, then a rename).
func writeFile(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, perm); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// RetiredKeys are the user keys (nkeys) of every retired worker with when
// it was retired: what an existing NATS cluster's account must revoke.
func (r *Registry) RetiredKeys() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]time.Time{}
	for _, e := range r.m {
		if e.Retired != nil {
			out[e.NKey] = *e.Retired
		}
	}
	return out
}
