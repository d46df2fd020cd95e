package dispatch

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kusaw/kusaw/cluster"
)

// maxBundles bounds the bundles serve keeps made: a queue of runs on one
// base needs one.
const maxBundles = 16

// bundleCache keeps the bundles serve made, by repo, commit and what the
// receivers hold, so that attempts dispatched together (a queue of runs
// on the same base, before any worker says it holds it) share one git
// pass instead of five git processes each. Each attempt still gets its
// own object, under its own name, deleted with the attempt: only serve's
// private file is shared, and a bundle's content depends on nothing else
// (objects are never changed, only added).
type bundleCache struct {
	mu      sync.Mutex
	dir     string // made on first use, private to serve
	entries map[string]*cachedBundle
	order   []string // oldest first
	next    int
}

type cachedBundle struct {
	ready chan struct{} // closed once made (or failed)
	path  string
	err   error
	refs  int // users between get and release: not evicted meanwhile
}

func bundleKey(repo, commit string, have []string) string {
	h := slices.Clone(have)
	slices.Sort(h)
	h = slices.Compact(h)
	return repo + "\x00" + commit + "\x00" + strings.Join(h, ",")
}

// get returns the path of a bundle of commit against have, made once
// for every caller asking at once or after; release must be called when
// the caller no longer reads the file. A failed make is not kept.
func (c *bundleCache) get(ctx context.Context, repo, commit string, have []string) (path string, release func(), err error) {
	key := bundleKey(repo, commit, have)
	c.mu.Lock()
	if c.dir == "" {
		d, err := os.MkdirTemp("", "kusaw-bundles-")
		if err != nil {
			c.mu.Unlock()
			return "", nil, err
		}
		c.dir = d
	}
	e := c.entries[key]
	mine := e == nil
	if mine {
		if c.entries == nil {
			c.entries = map[string]*cachedBundle{}
		}
		c.next++
		e = &cachedBundle{ready: make(chan struct{}), path: filepath.Join(c.dir, strconv.Itoa(c.next)+".bundle")}
		c.entries[key] = e
		c.order = append(c.order, key)
		c.evictLocked()
	}
	e.refs++
	c.mu.Unlock()
	release = func() {
		c.mu.Lock()
		e.refs--
		c.mu.Unlock()
	}
	if mine {
		_, e.err = cluster.MakeBundle(context.WithoutCancel(ctx), repo, e.path, commit, have)
		if e.err != nil {
			c.mu.Lock()
			if c.entries[key] == e {
				delete(c.entries, key)
				c.order = slices.DeleteFunc(c.order, func(k string) bool { return k == key })
			}
			c.mu.Unlock()
			_ = os.Remove(e.path)
		}
		close(e.ready)
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		release()
		return "", nil, ctx.Err()
	}
	if e.err != nil {
		release()
		return "", nil, e.err
	}
	return e.path, release, nil
}

// evictLocked removes the oldest bundles nobody reads beyond maxBundles.
func (c *bundleCache) evictLocked() {
	for i := 0; len(c.order) > maxBundles && i < len(c.order); {
		k := c.order[i]
		e := c.entries[k]
		if e.refs > 0 {
			i++
			continue
		}
		delete(c.entries, k)
		c.order = slices.Delete(c.order, i, i+1)
		_ = os.Remove(e.path)
	}
}

// close removes every bundle kept.
func (c *bundleCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
	}
	c.dir, c.entries, c.order = "", nil, nil
}
