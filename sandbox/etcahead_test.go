//go:build linux

package sandbox

import (
	"slices"
	"testing"
	"time"
)

// TestWalkSystemAhead: a plan uses the walk of /etc started ahead only
// once, only for /etc, and never one started longer than walkAheadFor
// before: then it walks again, so a file chmod'ed since is seen.
func TestWalkSystemAhead(t *testing.T) {
	fresh := unreadableBelow(systemSecretsIn)
	WalkSystemAhead()
	if got := unreadableIn(systemSecretsIn); !slices.Equal(got, fresh) {
		t.Errorf("the walk ahead found\n%v\nthe walk\n%v", got, fresh)
	}
	if walkAhead.ch != nil {
		t.Errorf("the walk ahead is kept for a second plan")
	}
	planted := []unreadable{{"/etc/planted-by-test", false}}
	ahead := func(at time.Time) {
		ch := make(chan []unreadable, 1)
		ch <- planted
		walkAhead.Lock()
		walkAhead.ch, walkAhead.at = ch, at
		walkAhead.Unlock()
	}
	ahead(time.Now())
	if got := unreadableIn(systemSecretsIn); !slices.Equal(got, planted) {
		t.Errorf("a recent walk ahead was not used: %v", got)
	}
	ahead(time.Now().Add(-walkAheadFor - time.Millisecond))
	if got := unreadableIn(systemSecretsIn); !slices.Equal(got, fresh) {
		t.Errorf("a walk ahead older than %v was used: %v", walkAheadFor, got)
	}
	ahead(time.Now())
	dir := t.TempDir()
	if got := unreadableIn(dir); got != nil {
		t.Errorf("another folder's plan used the walk of /etc: %v", got)
	}
	if got := unreadableIn(systemSecretsIn); !slices.Equal(got, planted) {
		t.Errorf("the walk ahead was lost to another folder's walk")
	}
}
