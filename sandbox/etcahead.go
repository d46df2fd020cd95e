package sandbox

import (
	"sync"
	"time"
)

// The walk of /etc for root-only files (etcSecrets) is the largest part
// of a plan, and kusaw sandbox exec has a millisecond of other work
// before its plan (flags, settings, the backend check) on a machine with
// more than one core: WalkSystemAhead starts the walk then, and the plan,
// when it comes to the walk, takes the folders of /etc not yet begun
// rather than waiting for them (sharedWalk), then waits for the rest:
// the hidden list is whole before any argv (docs/benchmarks.md, "Lean
// start, sixth pass" and "seventh pass (issue 25)").
//
// The walk is used once, by the next plan of this process, and only if
// it started at most walkAheadFor before: what the plan hides is what
// /etc held a moment before. A walk remembered from an earlier run is
// used only when every entry it looked at is as it was then
// (etcwalk_cache_linux.go).
const walkAheadFor = time.Second

// WalkCacheFile is where the walk of /etc is remembered between runs (on
// Linux): "" for <home>/.cache/kusaw/etc-walk, the home the user
// database gives the euid whatever HOME and XDG_CACHE_HOME say (the same
// file for every kusaw of the user; hideStandInPool hides its folder from
// every plan that would show it), "off" for walking every time.
var WalkCacheFile string

var walkAhead struct {
	sync.Mutex
	ch   chan []unreadable
	help func() ([]unreadable, bool) // takes part in the walk (walkOnGoroutine); nil for none
	at   time.Time
}

// WalkSystemAhead starts the walk of /etc that the next plan built in
// this process uses. A second call before that plan does nothing.
func WalkSystemAhead() {
	walkAhead.Lock()
	defer walkAhead.Unlock()
	if walkAhead.ch != nil {
		return
	}
	ch := make(chan []unreadable, 1)
	walkAhead.ch, walkAhead.at = ch, time.Now()
	walkAhead.help = walkOnGoroutine(systemSecretsIn, ch)
}

// unreadableIn is unreadableBelow(root), from the walk started ahead when
// there is one for root that is recent enough. It always waits for a
// walk started ahead: the plan needs the whole list before any argv.
func unreadableIn(root string) []unreadable {
	if root != systemSecretsIn {
		return unreadableBelow(root)
	}
	walkAhead.Lock()
	ch, help, at := walkAhead.ch, walkAhead.help, walkAhead.at
	walkAhead.ch, walkAhead.help = nil, nil
	walkAhead.Unlock()
	if ch != nil {
		if help != nil && time.Since(at) <= walkAheadFor {
			if r, ok := help(); ok {
				return r
			}
		}
		if r := <-ch; time.Since(at) <= walkAheadFor {
			return r
		}
	}
	return systemUnreadable(root)
}
