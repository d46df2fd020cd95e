//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// usePool points the package's pool at a fresh folder beside the
// fixture (the same file system) for the test.
func usePool(t *testing.T, f *fixture) string {
	t.Helper()
	pool := filepath.Join(f.root, "cache", "kusaw", "stand-ins")
	if err := os.MkdirAll(filepath.Dir(pool), 0o700); err != nil {
		t.Fatal(err)
	}
	old := StandInPool
	StandInPool = pool
	poolUnsafe.Store(false)
	t.Cleanup(func() { StandInPool = old; poolUnsafe.Store(false) })
	return pool
}

func poolNames(t *testing.T, pool string) []string {
	t.Helper()
	es, err := os.ReadDir(pool)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var n []string
	for _, e := range es {
		n = append(n, e.Name())
	}
	return n
}

// runPlan runs script in the real sandbox of p, then Cleanup.
func runPlan(t *testing.T, p *Plan, script string) (string, error) {
	t.Helper()
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if cerr := p.Cleanup(); cerr != nil && err == nil {
		err = cerr
	}
	return string(out), err
}

// TestStandInPool: the stand-in folders a run leaves go to the pool,
// the next run takes them from it before bwrap starts, and what the step
// sees is the same each time: an empty folder nothing can be made in.
// After each run the stand-ins are gone from the worktree.
func TestStandInPool(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	pool := usePool(t, f)
	husky := filepath.Join(f.wt, ".husky")
	script := fmt.Sprintf(`test -d %[1]s || { echo "no stand-in"; exit 1; }
test -z "$(ls -A %[1]s)" || { echo "stand-in not empty"; exit 1; }
if touch %[1]s/x 2>/dev/null; then echo "wrote into a stand-in"; exit 1; fi`, husky)
	p := mustPlan(t, f.input())
	if !slices.Contains(p.standInDirs, husky) {
		t.Fatalf("%s is not a stand-in folder: %v", husky, p.standInDirs)
	}
	if out, err := runPlan(t, p, script); err != nil {
		t.Fatalf("first run (empty pool): %v\n%s", err, out)
	}
	spares := poolNames(t, pool)
	if len(spares) != len(p.standInDirs) {
		t.Fatalf("pool after the first run: %v, want %d spare folders", spares, len(p.standInDirs))
	}
	p = mustPlan(t, f.input())
	p.takeStandIns() // as Command does last
	if left := poolNames(t, pool); len(left) != 0 || !isDir(husky) {
		t.Fatalf("Command did not take the stand-ins from the pool: left %v, %s made: %v", left, husky, isDir(husky))
	}
	if out, err := runPlan(t, p, script); err != nil {
		t.Fatalf("second run (from the pool): %v\n%s", err, out)
	}
	if n := len(poolNames(t, pool)); n != len(spares) {
		t.Errorf("pool after the second run: %d spare folders, want %d", n, len(spares))
	}
	for _, s := range p.StandIns {
		if exists(s) {
			t.Errorf("stand-in %s left in the worktree", s)
		}
	}
	if st := git(t, f.wt, "status", "--porcelain", "--ignored"); st != "" {
		t.Errorf("git sees the stand-ins: %q", st)
	}
}

// TestStandInPoolNeverHandsOutASpareWithFiles: a spare folder with a
// file in it (planted, say a .git with hooks), a link, one others may
// write and one of another owner are never made stand-ins; the legitimate
// twin, an empty spare of this user, is.
func TestStandInPoolNeverHandsOutASpareWithFiles(t *testing.T) {
	f := newFixture(t)
	pool := usePool(t, f)
	os.MkdirAll(pool, 0o700)
	write(t, filepath.Join(pool, "a-planted", "hooks", "pre-commit"), "#!/bin/sh\necho owned\n")
	os.Symlink(f.outside, filepath.Join(pool, "b-link"))
	os.Mkdir(filepath.Join(pool, "c-open"), 0o777)
	os.Chmod(filepath.Join(pool, "c-open"), 0o777)
	if os.Geteuid() == 0 {
		os.Mkdir(filepath.Join(pool, "d-foreign"), 0o755)
		os.Chown(filepath.Join(pool, "d-foreign"), 65534, 65534)
	}
	p := mustPlan(t, f.input())
	p.takeStandIns()
	for _, d := range p.standInDirs {
		if exists(d) {
			t.Errorf("%s was made from a spare that is not an empty folder of this user", d)
		}
	}
	p.Cleanup()
	if !exists(filepath.Join(pool, "a-planted", "hooks", "pre-commit")) {
		t.Errorf("the planted spare was moved")
	}
	// The twin: an empty spare is taken.
	os.Mkdir(filepath.Join(pool, "e-empty"), 0o755)
	p = mustPlan(t, f.input())
	p.takeStandIns()
	if exists(filepath.Join(pool, "e-empty")) || !isDir(p.standInDirs[0]) {
		t.Errorf("an empty spare was not taken for %s", p.standInDirs[0])
	}
	p.Cleanup()
}

// TestStandInPoolHiddenFromAStepThatCouldSeeIt: a step whose writable
// folder holds the pool (a writable cache folder) finds it empty and
// cannot put anything into it; the pool's spares are untouched.
func TestStandInPoolHiddenFromAStepThatCouldSeeIt(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	usePool(t, f)
	shared := filepath.Join(f.root, "usercache")
	pool := filepath.Join(shared, "kusaw", "stand-ins")
	os.MkdirAll(filepath.Join(pool, "spare"), 0o700)
	os.Chmod(filepath.Join(pool, "spare"), 0o755)
	StandInPool = pool
	in := f.input()
	in.AllowWrite = []string{shared}
	p := mustPlan(t, in)
	if !slices.Contains(rulePaths(p.Hidden), pool) {
		t.Fatalf("the pool %s inside a writable folder is not hidden: %v", pool, p.Hidden)
	}
	script := fmt.Sprintf(`touch %[1]s/ok || { echo "cannot write the writable folder"; exit 1; }
if mkdir %[2]s/spare/hooks 2>/dev/null || touch %[2]s/planted 2>/dev/null; then echo "wrote into the pool"; exit 1; fi
test -z "$(ls -A %[2]s)" || { echo "the pool's spares are visible"; exit 1; }`, shared, pool)
	if out, err := runPlan(t, p, script); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if exists(filepath.Join(pool, "planted")) || exists(filepath.Join(pool, "spare", "hooks")) {
		t.Errorf("the step wrote into the pool")
	}
	// The twin: a plan that does not show the pool has no mount for it.
	StandInPool = filepath.Join(f.root, "cache", "kusaw", "stand-ins")
	if p := mustPlan(t, f.input()); slices.Contains(rulePaths(p.Hidden), StandInPool) {
		t.Errorf("a pool the plan does not show is hidden anyway")
	}
}

// TestStandInPoolFilledStandInLeftAndReported: a stand-in that has a file
// in it after the run is neither given to the pool nor removed, and
// Cleanup says so, as without a pool.
func TestStandInPoolFilledStandInLeftAndReported(t *testing.T) {
	f := newFixture(t)
	pool := usePool(t, f)
	p := mustPlan(t, f.input())
	husky := filepath.Join(f.wt, ".husky")
	write(t, filepath.Join(husky, "pre-commit"), "kept")
	if err := p.Cleanup(); err == nil || !strings.Contains(err.Error(), husky) {
		t.Errorf("cleanup of a filled stand-in: %v", err)
	}
	if !exists(filepath.Join(husky, "pre-commit")) {
		t.Errorf("the filled stand-in was removed or moved")
	}
	for _, n := range poolNames(t, pool) {
		if exists(filepath.Join(pool, n, "pre-commit")) {
			t.Errorf("the filled stand-in went to the pool")
		}
	}
}

// TestStandInPoolOneSpareOneTaker: attempts preparing at the same time
// never share a spare: with one spare, exactly one of them takes it.
func TestStandInPoolOneSpareOneTaker(t *testing.T) {
	f := newFixture(t)
	pool := usePool(t, f)
	os.MkdirAll(filepath.Join(pool, "only"), 0o700)
	os.Chmod(filepath.Join(pool, "only"), 0o755)
	base := filepath.Join(f.root, "takers") // the pool's file system
	var plans []*Plan
	for i := range 8 {
		d := filepath.Join(base, fmt.Sprint(i))
		os.MkdirAll(d, 0o755)
		plans = append(plans, &Plan{standInDirs: []string{filepath.Join(d, ".git")}})
	}
	var wg sync.WaitGroup
	for _, p := range plans {
		wg.Add(1)
		go func() { defer wg.Done(); p.takeStandIns() }()
	}
	wg.Wait()
	took := 0
	for _, p := range plans {
		if isDir(p.standInDirs[0]) {
			took++
		}
	}
	if took != 1 || exists(filepath.Join(pool, "only")) {
		t.Errorf("%d attempts took the one spare (want 1); still in the pool: %v", took, exists(filepath.Join(pool, "only")))
	}
}
