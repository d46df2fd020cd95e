package factory

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

func gcRun(id, pipeline string, st status.RunState, ended time.Time) *record.RunRecord {
	return &record.RunRecord{ID: id, Pipeline: pipeline, State: st, Created: ended.Add(-time.Minute), Finished: &ended}
}

func ids(gs []GCRun) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Run)
	}
	return out
}

func sortedIDs(gs []GCRun) []string {
	out := ids(gs)
	slices.Sort(out)
	return out
}

func whyOf(gs []GCRun, id string) string {
	for _, g := range gs {
		if g.Run == id {
			return g.Why
		}
	}
	return ""
}

func TestPlanGC(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	delivered := gcRun("r05", "default", status.RunSucceeded, now.Add(-40*day))
	delivered.Delivery = &record.Delivery{State: record.DeliveryDone, PullURL: "https://forge.test/pr/1"}
	undelivered := gcRun("r06", "default", status.RunSucceeded, now.Add(-41*day))
	undelivered.Delivery = &record.Delivery{State: record.DeliveryFailed}
	followup := gcRun("r02", "default", status.RunSucceeded, now.Add(-2*day))
	followup.Continues, followup.Thread = "r07", "r08"
	middle := gcRun("r07", "default", status.RunSucceeded, now.Add(-45*day))
	middle.Continues, middle.Thread = "r08", "r08"
	// Newest first, as State.Runs lists them.
	runs := []*record.RunRecord{
		gcRun("r00", "default", status.RunRunning, now),
		gcRun("s00", record.DoctorPipeline, status.RunSucceeded, now.Add(-time.Hour)),
		gcRun("r01", "default", status.RunFailed, now.Add(-time.Hour)),
		followup,
		gcRun("s01", record.ExecPipeline, status.RunFailed, now.Add(-2*day)),
		gcRun("r03", "default", status.RunWaiting, now.Add(-50*day)),
		gcRun("r04", "default", status.RunFailed, now.Add(-31*day)),
		delivered,
		undelivered,
		middle,
		gcRun("r08", "default", status.RunSucceeded, now.Add(-46*day)),
		gcRun("r09", "default", status.RunQueued, now.Add(-60*day)),
		gcRun("r10", "default", status.RunCanceled, now.Add(-61*day)),
	}
	pinned := func(id string) bool { return id == "r10" }

	remove, kept := planGC(runs, pinned, Retention{MaxAge: 30 * day}, now)
	if got, want := ids(remove), []string{"s01", "r04", "r06"}; !slices.Equal(got, want) {
		t.Errorf("30d removes %v, want %v", got, want)
	}
	for id, why := range map[string]string{"r03": "waiting", "r05": "delivered", "r07": "continued by r02", "r08": "continued by r0", "r09": "queued", "r10": "pinned"} {
		if w := whyOf(kept, id); !strings.Contains(w, why) {
			t.Errorf("kept %s because %q, want %q", id, w, why)
		}
	}
	if w := whyOf(remove, "s01"); !strings.Contains(w, "sandbox run ended more than 1d ago") {
		t.Errorf("sandbox run goes because %q", w)
	}

	// By count: the newest 2 of the runs that may go stay, per kind;
	// unfinished, pinned and delivered runs do not count.
	remove, _ = planGC(runs, pinned, Retention{MaxRuns: 2}, now)
	if got, want := ids(remove), []string{"s01", "r04", "r06"}; !slices.Equal(got, want) {
		t.Errorf("keep 2 removes %v, want %v (r07, r08 continued by r02; s01 older than a day)", got, want)
	}
	if w := whyOf(remove, "r04"); w != "beyond the newest 2" {
		t.Errorf("r04 goes because %q", w)
	}
	// Sandbox runs: at most SandboxMaxRuns, and a day, whatever the bound.
	var many []*record.RunRecord
	for i := range SandboxMaxRuns + 3 {
		many = append(many, gcRun("s"+string(rune('a'+i)), record.ExecPipeline, status.RunSucceeded, now.Add(-time.Duration(i)*time.Minute)))
	}
	remove, _ = planGC(many, pinned, Retention{MaxRuns: 500}, now)
	if len(remove) != 3 || remove[0].Run != "s"+string(rune('a'+SandboxMaxRuns)) {
		t.Errorf("sandbox runs beyond %d: %v", SandboxMaxRuns, ids(remove))
	}
	// No bound: nothing goes.
	if remove, kept := planGC(runs, pinned, Retention{}, now); len(remove)+len(kept) != 0 {
		t.Errorf("no bound: removes %v keeps %v", ids(remove), ids(kept))
	}
}

// The attacker's side: gc removes only what a run of kusaw's made — its
// folder under runs/, its kusaw/ branches — never a branch a tampered
// record names, a folder a link points to, or a run whose lock is held.
func TestGCRemovesOnlyKusawsOwn(t *testing.T) {
	testkit.NeedGit(t)
	base := t.TempDir()
	repo := filepath.Join(base, "app")
	os.MkdirAll(repo, 0o755)
	testkit.GitRun(t, repo, "init", "-q", "-b", "main")
	testkit.GitRun(t, repo, "config", "user.email", "t@example.invalid")
	testkit.GitRun(t, repo, "config", "user.name", "t")
	os.WriteFile(filepath.Join(repo, "README"), []byte("x"), 0o644)
	testkit.GitRun(t, repo, "add", ".")
	testkit.GitRun(t, repo, "commit", "-qm", "init")
	st, err := OpenState(filepath.Join(base, "state"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	old := now.Add(-40 * 24 * time.Hour)
	const (
		oldRun  = "20261001-000000-0001"
		lying   = "20261001-000000-0002" // its record names main as its branch
		held    = "20261001-000000-0003" // final, but someone holds its lock
		fresh   = "20261201-000000-0004"
		outside = "20261001-000000-0005" // a link to a folder outside
	)
	for _, id := range []string{oldRun, lying, held, fresh} {
		r := gcRun(id, "default", status.RunFailed, old)
		if id == fresh {
			r.Finished = &now
		}
		r.Repos = []record.RunRepo{{Name: "app", Path: repo, Branch: "kusaw/" + id}}
		if id == lying {
			r.Repos[0].Branch = "main"
		}
		writeRun(t, st, *r)
		testkit.GitRun(t, repo, "branch", "kusaw/"+id)
		testkit.GitRun(t, repo, "branch", "kusaw/attempts/"+id+"/build/1")
	}
	os.WriteFile(filepath.Join(st.RunDir(oldRun), record.StdoutFile), []byte("output"), 0o600)
	testkit.GitRun(t, repo, "branch", "feature")
	away := filepath.Join(base, "precious")
	os.MkdirAll(away, 0o755)
	rec := gcRun(outside, "default", status.RunFailed, old)
	writeJSON(filepath.Join(away, record.RunFile), rec)
	if err := os.Symlink(away, st.RunDir(outside)); err != nil {
		t.Fatal(err)
	}
	l, ok, err := TryLock(filepath.Join(st.RunDir(held), record.LockFile))
	if err != nil || !ok {
		t.Fatal("lock", err)
	}
	defer l.Unlock()
	branches := func() []string {
		return strings.Fields(testkit.GitRun(t, repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/"))
	}

	// A dry run lists and changes nothing.
	before := branches()
	res, err := st.GC(Retention{MaxAge: 30 * 24 * time.Hour}, now, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedIDs(res.Removed); !slices.Equal(got, []string{oldRun, lying, held}) {
		t.Errorf("dry run would remove %v", got)
	}
	for _, g := range res.Removed {
		if !slices.Contains(g.Branches, "app:kusaw/"+g.Run) || !slices.Contains(g.Branches, "app:kusaw/attempts/"+g.Run+"/build/1") {
			t.Errorf("dry run names branches %v for %s", g.Branches, g.Run)
		}
	}
	if after := branches(); !slices.Equal(before, after) {
		t.Errorf("dry run changed branches: %v -> %v", before, after)
	}
	if _, err := os.Stat(st.RunDir(oldRun)); err != nil {
		t.Errorf("dry run removed a run: %v", err)
	}

	res, err = st.GC(Retention{MaxAge: 30 * 24 * time.Hour}, now, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := sortedIDs(res.Removed); !slices.Equal(got, []string{oldRun, lying}) {
		t.Errorf("removed %v, want %v", got, []string{oldRun, lying})
	}
	if w := res.Kept; len(w) != 1 || w[0].Run != held || !strings.Contains(w[0].Error, "held by another kusaw") {
		t.Errorf("kept %+v, want the held run", w)
	}
	want := []string{"feature", "kusaw/" + held, "kusaw/" + fresh, "kusaw/attempts/" + held + "/build/1", "kusaw/attempts/" + fresh + "/build/1", "main"}
	if got := branches(); !slices.Equal(got, want) {
		t.Errorf("branches %v, want %v", got, want)
	}
	for _, id := range []string{oldRun, lying} {
		if _, err := os.Lstat(st.RunDir(id)); !os.IsNotExist(err) {
			t.Errorf("run %s still there: %v", id, err)
		}
	}
	for _, p := range []string{st.RunDir(held), st.RunDir(fresh), filepath.Join(away, record.RunFile)} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s is gone: %v", p, err)
		}
	}
	if runs, _ := st.Runs(); len(runs) != 2 {
		t.Errorf("%d runs listed after gc, want 2", len(runs))
	}
	// Pin and unpin: a bad id is refused, a pinned run stays.
	for _, bad := range []string{"../x", "..", "a/b", ""} {
		if _, err := st.Pin(bad, true); err == nil {
			t.Errorf("pin %q: no error", bad)
		}
	}
	l.Unlock()
	if _, err := st.Pin(held, true); err != nil {
		t.Fatal(err)
	}
	res, _ = st.GC(Retention{MaxAge: 30 * 24 * time.Hour}, now, false)
	if len(res.Removed) != 0 || !strings.Contains(whyOf(res.Kept, held), "pinned") {
		t.Errorf("pinned run: removed %v kept %+v", ids(res.Removed), res.Kept)
	}
	st.Pin(held, false)
	res, _ = st.GC(Retention{MaxAge: 30 * 24 * time.Hour}, now, false)
	if got := ids(res.Removed); !slices.Equal(got, []string{held}) {
		t.Errorf("unpinned run: removed %v", got)
	}
}

// A removal a crash cut short leaves a renamed folder, never listed as a
// run; the next pass removes it.
func TestGCSweepsHalfRemoved(t *testing.T) {
	st, err := OpenState(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(st.Dir, record.RunsDir, record.GCPrefix+"20261001-000000-0001")
	os.MkdirAll(filepath.Join(half, "steps"), 0o755)
	writeJSON(filepath.Join(half, record.RunFile), gcRun("20261001-000000-0001", "default", status.RunFailed, time.Now()))
	if runs, _ := st.Runs(); len(runs) != 0 {
		t.Errorf("a half-removed run is listed: %v", runs)
	}
	if _, err := st.GC(Retention{MaxRuns: 1}, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(half); !os.IsNotExist(err) {
		t.Errorf("half-removed folder stays: %v", err)
	}
}
