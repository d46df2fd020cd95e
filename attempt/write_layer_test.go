//go:build linux

package attempt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// layerFixture is the command fixture with repos.app.write_layer: overlay
// and a step that leaves the tree alone, opened with its worktree made;
// events collects what it emits. The machine's layer check passes unless
// the test says otherwise.
func layerFixture(t *testing.T) (a *Attempt, repo string, events func(typ string) []record.Event) {
	t.Helper()
	h, spec, job, repo := fixture(t, "command")
	spec.Repos[0].WriteLayer = "overlay"
	spec.StepConfig.Run = []string{"true"}
	var mu sync.Mutex
	var evs []record.Event
	h.OnEvent = func(e record.Event) { mu.Lock(); evs = append(evs, e); mu.Unlock() }
	old := checkLayer
	checkLayer = func(string) error { return nil }
	t.Cleanup(func() { checkLayer = old })
	a = Open(h, spec, job)
	if a.ended {
		t.Fatalf("the attempt ended at its open: %s", a.rec.Message)
	}
	if err := a.createWorktrees(); err != nil {
		t.Fatal(err)
	}
	return a, repo, func(typ string) []record.Event {
		mu.Lock()
		defer mu.Unlock()
		var out []record.Event
		for _, e := range evs {
			if e.Type == typ {
				out = append(out, e)
			}
		}
		return out
	}
}

// Every reason an attempt does not use the repo's write layer is said in
// worktree.write_layer (used: false, why), and the step then writes the
// tree itself: no layer is made. The twin: where nothing stands in the
// way, the layer is made and the event says used: true.
func TestWriteLayerNotUsedSaysWhy(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(a *Attempt)
		why     string // "" the layer is used
	}{
		{"used", func(*Attempt) {}, ""},
		{"no state folder", func(a *Attempt) { a.h.StateDir = "" }, "no state folder: kusaw keeps no index of the checkout"},
		{"two processes write the tree", func(a *Attempt) {
			a.spec.Processes = append(a.spec.Processes, a.spec.Processes[0])
		}, "2 processes of the attempt write the worktree; a layer serves one"},
		{"setup ran on the host", func(a *Attempt) { a.f.Setup = [][]string{{"true"}} }, "setup ran on the host in the worktree"},
		{"the machine cannot mount one", func(*Attempt) {
			checkLayer = func(string) error {
				return errors.New("sandbox: the write layer cannot be used here: the kernel refused it")
			}
		}, "sandbox: the write layer cannot be used here: the kernel refused it"},
		{"the tree is not its checkout", func(a *Attempt) {
			a.wts["app"].MergeParents = []string{a.rec.Worktrees[0].BaseSHA}
		}, "a merge was started in the tree"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, _, events := layerFixture(t)
			c.prepare(a)
			dir := a.writeLayer("app")
			evs := events(record.EvWriteLayer)
			if len(evs) != 1 {
				t.Fatalf("%d %s events, want 1: %v", len(evs), record.EvWriteLayer, evs)
			}
			used := evs[0].Bool("used")
			why := evs[0].Str("why")
			if c.why == "" {
				if !used || why != "" || dir == "" || a.wts["app"].Layer() != dir {
					t.Fatalf("used %v why %q, layer %q (the tree's %q)", used, why, dir, a.wts["app"].Layer())
				}
				a.wts["app"].DropLayer()
				return
			}
			if used || dir != "" || a.wts["app"].Layer() != "" || !strings.Contains(why, c.why) {
				t.Fatalf("used %v, layer %q, why %q: want not used, why %q", used, dir, why, c.why)
			}
		})
	}
	t.Run("write_layer none", func(t *testing.T) {
		a, _, events := layerFixture(t)
		a.f.Repos["app"].WriteLayer = ""
		if dir := a.writeLayer("app"); dir != "" || len(events(record.EvWriteLayer)) != 0 {
			t.Fatalf("a repo without write_layer got layer %q, events %v", dir, events(record.EvWriteLayer))
		}
	})
}

// A write layer that cannot be applied (here a forged upper: a file
// hard-linked to one of the host) fails the attempt loudly: its step
// passed, but the attempt fails with commit_failed naming the layer and
// why, worktree.layer_applied carries the error, nothing of the layer is
// committed and the run branch stays. The twin: the same attempt with a
// plain new file in its layer passes and commits exactly that file.
func TestWriteLayerApplyFailureFailsTheAttempt(t *testing.T) {
	for _, forged := range []bool{true, false} {
		name := map[bool]string{true: "foreign hard link", false: "twin: a new file"}[forged]
		t.Run(name, func(t *testing.T) {
			a, repo, events := layerFixture(t)
			base := a.rec.Worktrees[0].BaseSHA
			dir := a.writeLayer("app")
			if dir == "" {
				t.Fatalf("no layer: %v", events(record.EvWriteLayer))
			}
			upper := filepath.Join(dir, "upper")
			os.WriteFile(filepath.Join(upper, "new.txt"), []byte("new\n"), 0o644)
			if forged {
				host := filepath.Join(filepath.Dir(dir), "host-secret")
				os.WriteFile(host, []byte("secret\n"), 0o600)
				if err := os.Link(host, filepath.Join(upper, "stolen.txt")); err != nil {
					t.Fatal(err)
				}
			}
			procs := [][]string{a.spec.Processes[0].Repos}
			a.runProcesses(context.Background(), procs)
			a.applyLayers()
			a.decide()
			a.commit()
			rec := a.Finish()
			applied := events(record.EvLayerApplied)
			if len(applied) != 1 {
				t.Fatalf("%d %s events: %v", len(applied), record.EvLayerApplied, applied)
			}
			branch := testkit.GitRun(t, repo, "rev-parse", "kusaw/r1")
			if !forged {
				if rec.Outcome != status.OutcomePassed || applied[0].Str("error") != "" {
					t.Fatalf("attempt %s %s: %s; applied %v", rec.Outcome, rec.Reason, rec.Message, applied[0].Data)
				}
				head := rec.Worktrees[0].HeadSHA
				if files := testkit.GitRun(t, repo, "diff", "--name-only", base, head); files != "new.txt" || branch != head {
					t.Errorf("committed %q (run branch at %s, head %s), want new.txt alone", files, branch, head)
				}
				return
			}
			if rec.Outcome != status.OutcomeFailed || rec.Reason != status.ReasonCommitFailed {
				t.Fatalf("attempt %s %s: %s, want failed %s", rec.Outcome, rec.Reason, rec.Message, status.ReasonCommitFailed)
			}
			for _, want := range []string{"repo app: the step's write layer could not be applied, so its tree is not committed", "stolen.txt: a hard link to a file outside the write layer"} {
				if !strings.Contains(rec.Message, want) {
					t.Errorf("the attempt's message lacks %q:\n%s", want, rec.Message)
				}
			}
			if e := applied[0].Str("error"); !strings.Contains(e, "hard link") {
				t.Errorf("%s without the error: %v", record.EvLayerApplied, applied[0].Data)
			}
			if c := events(record.EvCommitted); len(c) != 1 || c[0].Str("error") == "" || c[0].Str("sha") != "" {
				t.Errorf("%s: %v, want one with the error and no commit", record.EvCommitted, c)
			}
			if branch != base || rec.Worktrees[0].Changed {
				t.Errorf("the run branch moved to %s (base %s), changed %v", branch, base, rec.Worktrees[0].Changed)
			}
		})
	}
}
