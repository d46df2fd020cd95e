package proc

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Moving a process into a cgroup takes the kernel's cgroup write lock,
// and the first move after a pause waits for an RCU grace period before
// it gets it: 5 to 20 ms on a 2-core VM, where the moves that follow
// within that grace period take some 60 µs. An attempt places its process
// only after git has made its worktrees, and the process may not run its
// program before it is placed, so that wait would fall on the step's
// start. Prewarm takes it early instead, while git works: kusaw moves
// itself into the group it already runs in (which changes nothing but
// takes the same lock), and keeps doing so every few milliseconds until
// the process is placed, so the lock stays in its fast state. The kernel
// holds its cgroup mutex through that wait, so making a group meanwhile
// would wait too: Prewarm makes the process's group first, a spare that
// the next placement takes.

const (
	prewarmEvery = 2 * time.Millisecond
	prewarmMax   = 5 * time.Second // a caller that never stops it
)

// prewarmWrites counts kusaw's moves of itself, for the tests.
var prewarmWrites atomic.Int64

// placements counts processes placed into a group: a Prewarm ends at the
// first placement after it started (that one found the lock warm).
var placements atomic.Int64

// Prewarm readies the kernel for placing a process under limits l into
// its cgroup soon. It ends by itself once a process is placed, or when
// stop is called (stop may be called more than once). Without a cgroup
// to place into, it does nothing.
func Prewarm(l Limits) (stop func()) {
	ctls := wanted(l)
	if len(ctls) == 0 {
		return func() {}
	}
	self := []byte(strconv.Itoa(os.Getpid()))
	gen := placements.Load()
	done := make(chan struct{})
	// All of it beside the caller: finding the groups reads /proc too.
	go func() {
		procs := ownProcsFile(ctls)
		if procs == "" {
			return
		}
		// The group first: made once the move below holds the cgroup
		// lock, it would wait for the grace period too.
		spare := makeSpare(ctls, l)
		defer dropSpare(spare)
		tick := time.NewTicker(prewarmEvery)
		defer tick.Stop()
		limit := time.After(prewarmMax)
		for {
			// O_WRONLY without O_CREATE or O_TRUNC: a cgroup file only.
			f, err := os.OpenFile(procs, os.O_WRONLY, 0)
			if err != nil {
				return // not ours to write: nothing to gain
			}
			_, err = f.Write(self)
			f.Close()
			if errors.Is(err, fs.ErrPermission) {
				return
			}
			prewarmWrites.Add(1)
			if placements.Load() != gen {
				return
			}
			select {
			case <-done:
				return
			case <-limit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// ownProcsFile is the cgroup.procs file of the group kusaw runs in, in
// the hierarchy newGroup would make a group for controllers ctls ("" for
// none).
func ownProcsFile(ctls []string) string {
	if len(ctls) == 0 {
		return ""
	}
	v1, v2, v2ctl := cgroupRoots()
	all2 := v2 != ""
	for _, c := range ctls {
		all2 = all2 && v2ctl[c]
	}
	if all2 {
		return filepath.Join(v2, "cgroup.procs")
	}
	for _, c := range ctls {
		if d := v1[c]; d != "" {
			return filepath.Join(d, "cgroup.procs")
		}
	}
	return ""
}

// placed tells running Prewarms that a process was placed.
func placed() { placements.Add(1) }

// spares are groups a Prewarm made before its first move: newGroup takes
// one (limits written then) instead of making its own.
var spares struct {
	sync.Mutex
	list []spareGroup
}

type spareGroup struct {
	key     string // the controllers, joined
	g       *group
	missing []string
	// written: the group's limits are those of lim already (writing
	// them waits for the grace period too).
	written bool
	lim     Limits
}

func makeSpare(ctls []string, l Limits) *group {
	g, missing := makeGroup(fmt.Sprintf("kusaw-%d-%d", os.Getpid(), groupSeq.Add(1)), ctls)
	if len(g.dirs) == 0 {
		return nil
	}
	written := true
	for c, dir := range g.dirs {
		written = written && g.write(c, dir, l) == nil
	}
	spares.Lock()
	spares.list = append(spares.list, spareGroup{key: strings.Join(ctls, ","), g: g, missing: missing, written: written, lim: l})
	spares.Unlock()
	return g
}

// takeSpare hands out a spare group for controllers ctls, if there is
// one; written reports that its limits are l's already.
func takeSpare(ctls []string, l Limits) (g *group, missing []string, written bool) {
	key := strings.Join(ctls, ",")
	spares.Lock()
	defer spares.Unlock()
	for i, s := range spares.list {
		if s.key == key {
			spares.list = append(spares.list[:i], spares.list[i+1:]...)
			same := s.lim.Pids == l.Pids && s.lim.Memory == l.Memory && s.lim.CPU == l.CPU
			return s.g, s.missing, s.written && same
		}
	}
	return nil, nil, false
}

// dropSpare removes g's folders unless a process took it.
func dropSpare(g *group) {
	if g == nil {
		return
	}
	spares.Lock()
	found := false
	for i, s := range spares.list {
		if s.g == g {
			spares.list = append(spares.list[:i], spares.list[i+1:]...)
			found = true
			break
		}
	}
	spares.Unlock()
	if found {
		for _, d := range g.dirs {
			g.removeDir(d)
		}
	}
}
