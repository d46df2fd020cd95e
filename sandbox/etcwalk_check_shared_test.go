//go:build linux

package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// The remembered walk's check shared by three goroutines (walkCheck: help,
// result) gives the fresh walk's list to each, in order, and a change in
// the last chunk is seen by all of them. Run with -race.
func TestRememberedWalkCheckSharedByGoroutines(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 600; i++ {
		mode := os.FileMode(0o644)
		if i%7 == 0 {
			mode = 0o600
		}
		p := filepath.Join(root, fmt.Sprintf("d%02d/f%03d", i%20, i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, nil, mode)
		os.Chmod(p, mode)
	}
	file := filepath.Join(t.TempDir(), "etc-walk")
	w := startRecordedWalk(root)
	w.help()
	fresh := w.result()
	rememberWalk(w, file, time.Now().Add(walkRacyFor+time.Second))
	for n := 0; n < 50; n++ {
		c := newWalkCheck(root, file)
		if c == nil {
			t.Fatal("nothing remembered")
		}
		var wg sync.WaitGroup
		res := make([][]unreadable, 3)
		oks := make([]bool, 3)
		for g := 0; g < 3; g++ {
			wg.Add(1)
			go func() { defer wg.Done(); c.help(); res[g], oks[g] = c.result() }()
		}
		wg.Wait()
		for g := range res {
			if !oks[g] || !slices.Equal(res[g], fresh) {
				t.Fatalf("run %d goroutine %d: ok %v, %d entries, fresh %d", n, g, oks[g], len(res[g]), len(fresh))
			}
		}
	}
	time.Sleep(20 * time.Millisecond)
	os.Chmod(filepath.Join(root, "d19/f599"), 0o600)
	c := newWalkCheck(root, file)
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.help()
			if _, ok := c.result(); ok {
				t.Error("a changed record was not seen")
			}
		}()
	}
	wg.Wait()
}
