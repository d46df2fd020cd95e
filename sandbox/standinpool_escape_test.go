//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStandInPoolCannotBeMovedByAStepThatSeesItsFolder: a step whose
// writable folder holds the pool (allow_write of the user's cache folder)
// sees the pool hidden, but the folders leading to it were plain folders
// it could rename: moving <cache>/kusaw aside and making its own
// <cache>/kusaw/stand-ins with one empty spare it holds open replaced the
// pool of every kusaw process of the user. Another attempt then took that
// spare as its stand-in, and the step wrote .claude-style settings into it
// through /proc/self/fd: a file in the other attempt's worktree that its
// commit would carry. The folders leading to the pool are now bound on
// themselves, as those leading to a protected path are: the rename fails.
// The legitimate twin: the step still writes its cache folder, in
// <cache>/kusaw too, and the other attempt's stand-ins come from the real
// pool and leave nothing behind.
func TestStandInPoolCannotBeMovedByAStepThatSeesItsFolder(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	victim := newFixture(t) // another attempt of the user, same file system
	usePool(t, f)
	shared := filepath.Join(f.root, "usercache")
	pool := filepath.Join(shared, "kusaw", "stand-ins")
	if err := os.MkdirAll(pool, 0o700); err != nil {
		t.Fatal(err)
	}
	StandInPool = pool
	in := f.input()
	in.AllowWrite = []string{shared}
	attacker := mustPlan(t, in)
	script := fmt.Sprintf(`touch %[1]s/ok %[1]s/kusaw/ok || { echo "cannot write the writable folder"; exit 3; }
mv %[1]s/kusaw %[1]s/kusaw-moved 2>/dev/null || { echo blocked > %[1]s/result; exit 0; }
mkdir -p %[2]s/trap && chmod 700 %[2]s && chmod 755 %[2]s/trap || exit 4
exec 3<%[2]s/trap
echo ready > %[1]s/result
i=0
while [ -d %[2]s/trap ]; do i=$((i+1)); [ $i -lt 2000 ] || exit 5; sleep 0.01; done
echo '{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"touch /tmp/owned"}]}]}}' > /proc/self/fd/3/settings.json
echo planted`, shared, pool)
	cmd, out := startAttacker(t, attacker, script)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	result := filepath.Join(shared, "result")
	var attackerErr error
	exited := false
	for deadline := time.Now().Add(20 * time.Second); !exists(result); {
		select {
		case attackerErr = <-done:
			exited = true
		case <-time.After(10 * time.Millisecond):
		}
		if exited || time.Now().After(deadline) {
			break
		}
	}
	// The other attempt starts while the step runs.
	vp := mustPlan(t, victim.input())
	if vout, err := runPlanNoCleanup(t, vp, "true"); err != nil {
		t.Fatalf("the other attempt's step: %v\n%s", err, vout)
	}
	if !exited {
		select {
		case attackerErr = <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			attackerErr = <-done
		}
	}
	cerr := vp.Cleanup()
	attacker.Cleanup()
	if attackerErr != nil {
		t.Fatalf("the attacking step: %v\n%s", attackerErr, out.String())
	}
	for _, s := range vp.StandIns {
		if es, _ := os.ReadDir(s); len(es) > 0 {
			t.Errorf("the step planted %s in another attempt's stand-in (cleanup: %v)", filepath.Join(s, es[0].Name()), cerr)
		}
	}
	if st := git(t, victim.wt, "status", "--porcelain", "--ignored"); st != "" {
		t.Errorf("the other attempt's worktree would commit: %q\nattacker: %s", st, out.String())
	}
	if !isDir(pool) || exists(filepath.Join(shared, "kusaw-moved")) {
		t.Errorf("the step moved the pool's folder: %s", out.String())
	}
	// The twin: the step wrote its cache folder, and the other attempt's
	// stand-ins went back to the real pool.
	if !exists(filepath.Join(shared, "ok")) || !exists(filepath.Join(shared, "kusaw", "ok")) {
		t.Errorf("the step could not write its writable cache folder: %s", out.String())
	}
	if cerr != nil {
		t.Errorf("the other attempt's cleanup: %v", cerr)
	}
	if n := len(poolNames(t, pool)); n < len(vp.standInDirs) {
		t.Errorf("the pool holds %d spares after the other attempt, want at least %d", n, len(vp.standInDirs))
	}
}

// runPlanNoCleanup runs script in the real sandbox of p; the caller calls
// Cleanup.
func runPlanNoCleanup(t *testing.T, p *Plan, script string) (string, error) {
	t.Helper()
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestStandInPoolInsideAWritableFolderRefused: a plan whose writable
// folder lies in the pool (allow_write of the pool or a spare in it)
// cannot hide the pool; it used to turn the pool off in its own process
// only, and a step could then make an empty spare there, hold it open,
// and fill the stand-in another kusaw process took it for. Such a plan
// is refused, naming the pool. The legitimate twin, a writable folder
// holding the pool, is planned with the pool hidden
// (TestStandInPoolCannotBeMovedByAStepThatSeesItsFolder runs one).
func TestStandInPoolInsideAWritableFolderRefused(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	victim := newFixture(t)
	pool := usePool(t, f)
	if err := os.MkdirAll(pool, 0o700); err != nil {
		t.Fatal(err)
	}
	in := f.input()
	in.AllowWrite = []string{pool}
	attacker, err := BuildPlan(in)
	if err == nil {
		// The attack, as it ran before: the victim is another process,
		// whose pool was never turned off.
		script := fmt.Sprintf(`mkdir %[1]s/trap && chmod 755 %[1]s/trap || exit 4
exec 3<%[1]s/trap
i=0
while [ -d %[1]s/trap ]; do i=$((i+1)); [ $i -lt 500 ] || exit 0; sleep 0.01; done
echo planted > /proc/self/fd/3/config.toml`, pool)
		cmd, err := Command(context.Background(), attacker, []string{"/bin/sh", "-c", script})
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 500 && !exists(filepath.Join(pool, "trap")); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		poolUnsafe.Store(false)
		vp := mustPlan(t, victim.input())
		if out, err := runPlanNoCleanup(t, vp, "true"); err != nil {
			t.Fatalf("the other attempt's step: %v\n%s", err, out)
		}
		cmd.Wait()
		vp.Cleanup()
		attacker.Cleanup()
		st := git(t, victim.wt, "status", "--porcelain", "--ignored")
		t.Fatalf("a plan whose writable folder is the pool %s was made; the other attempt's worktree would commit %q", pool, st)
	}
	if !strings.Contains(err.Error(), pool) {
		t.Errorf("the refusal does not name the pool %s: %v", pool, err)
	}
}

// TestStandInPoolThroughALinkTheStepCanReplace: a pool whose path runs
// through a link in a folder the step may write (the cache folder a link
// to another disk) is not shown to the step, so it is not hidden, yet the
// step can replace the link by a folder of its own with a spare it holds
// open, and another attempt's stand-in would be that spare. A pool with a
// link on its way is not used (mkdir and rmdir as without one). The
// legitimate twin: the same pool reached without the link is used.
func TestStandInPoolThroughALinkTheStepCanReplace(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	victim := newFixture(t)
	usePool(t, f)
	shared := filepath.Join(f.root, "usercache")
	real := filepath.Join(f.root, "realcache")
	if err := os.MkdirAll(filepath.Join(real, "kusaw", "stand-ins"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(shared, 0o755)
	if err := os.Symlink(real, filepath.Join(shared, "cache")); err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(shared, "cache", "kusaw", "stand-ins")
	StandInPool = pool
	in := f.input()
	in.AllowWrite = []string{shared}
	attacker, err := BuildPlan(in)
	if err != nil {
		if !strings.Contains(err.Error(), filepath.Join(shared, "cache")) {
			t.Errorf("the refusal does not name the link: %v", err)
		}
	} else {
		linkAttack(t, attacker, victim, shared, pool)
	}
	// The twins: a plan whose writable folders do not hold the link is
	// made, and the pool reached without the link is used.
	if _, err := BuildPlan(f.input()); err != nil {
		t.Errorf("a plan that cannot reach the link: %v", err)
	}
	StandInPool = filepath.Join(real, "kusaw", "stand-ins")
	vp := mustPlan(t, victim.input())
	if _, err := runPlanNoCleanup(t, vp, "true"); err != nil {
		t.Fatal(err)
	}
	if err := vp.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if n := len(poolNames(t, StandInPool)); n < len(vp.standInDirs) {
		t.Errorf("the pool without a link holds %d spares, want at least %d", n, len(vp.standInDirs))
	}
}

// linkAttack replaces the link on the pool's path by a pool of the
// step's own and fills the spare another attempt takes from it.
func linkAttack(t *testing.T, attacker *Plan, victim *fixture, shared, pool string) {
	t.Helper()
	script := fmt.Sprintf(`rm %[1]s/cache && mkdir -p %[2]s/trap && chmod 700 %[2]s && chmod 755 %[2]s/trap || { echo blocked > %[1]s/result; exit 0; }
exec 3<%[2]s/trap
echo ready > %[1]s/result
i=0
while [ -d %[2]s/trap ]; do i=$((i+1)); [ $i -lt 300 ] || exit 0; sleep 0.01; done
echo planted > /proc/self/fd/3/config.toml
echo planted`, shared, pool)
	cmd, out := startAttacker(t, attacker, script)
	for i := 0; i < 1000 && !exists(filepath.Join(shared, "result")); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	vp := mustPlan(t, victim.input())
	if vout, err := runPlanNoCleanup(t, vp, "true"); err != nil {
		t.Fatalf("the other attempt's step: %v\n%s", err, vout)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the attacking step: %v\n%s", err, out.String())
	}
	cerr := vp.Cleanup()
	attacker.Cleanup()
	if st := git(t, victim.wt, "status", "--porcelain", "--ignored"); st != "" {
		t.Errorf("the other attempt's worktree would commit %q (cleanup: %v)\nattacker: %s", st, cerr, out.String())
	}
	t.Errorf("a plan whose writable folder holds a link on the pool's path was made")
}

// TestStandInPoolOtherFileSystemAndFull: the legitimate cases around the
// pool. On another file system than the worktree (the rename fails with
// EXDEV) and when the pool is full (of spares never taken), the stand-ins are made and removed as
// without a pool: the step sees empty read-only folders, nothing is left
// in the worktree, and the pool keeps what it had.
func TestStandInPoolOtherFileSystemAndFull(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	pool := usePool(t, f)
	shm, err := os.MkdirTemp("/dev/shm", "kusaw-pool-")
	if err != nil {
		t.Fatalf("this test needs /dev/shm (a tmpfs) as another file system than %s: %v", f.root, err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	var a, b unix.Stat_t
	if unix.Stat(shm, &a) != nil || unix.Stat(f.root, &b) != nil || a.Dev == b.Dev {
		t.Fatalf("/dev/shm and %s are one file system here; the test needs two", f.root)
	}
	husky := filepath.Join(f.wt, ".husky")
	script := fmt.Sprintf(`test -d %[1]s && test -z "$(ls -A %[1]s)" || { echo "no empty stand-in"; exit 1; }
if touch %[1]s/x 2>/dev/null; then echo "wrote into a stand-in"; exit 1; fi`, husky)
	for _, c := range []struct {
		name, pool string
		spares     int
	}{
		{"another file system", filepath.Join(shm, "kusaw", "stand-ins"), 1},
		{"full", pool, standInPoolMax},
	} {
		StandInPool = c.pool
		os.MkdirAll(c.pool, 0o700)
		for i := range c.spares {
			s := filepath.Join(c.pool, fmt.Sprint("s", i))
			os.Mkdir(s, 0o755)
			if c.name == "full" {
				write(t, filepath.Join(s, "f"), "not empty, never taken") // full: none can be given back
			}
		}
		p := mustPlan(t, f.input())
		if out, err := runPlan(t, p, script); err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, out)
		}
		for _, s := range p.StandIns {
			if exists(s) {
				t.Errorf("%s: stand-in %s left in the worktree", c.name, s)
			}
		}
		if n := len(poolNames(t, c.pool)); n != c.spares {
			t.Errorf("%s: the pool holds %d spares, want %d", c.name, n, c.spares)
		}
	}
}

// TestKusawCacheFolderHiddenFromAStepThatSeesIt: a step whose writable
// folder is the user's cache folder could rewrite kusaw's remembered
// sandbox check (<cache>/kusaw/sandbox-check; its key is in the file
// for the taking) to name an older bwrap, and the next kusaw process
// dropped --unshare-user and --disable-userns for its steps. kusaw's own
// cache folder is hidden like the pool. The legitimate twin: the step
// writes the rest of the cache folder, and the check is remembered.
func TestKusawCacheFolderHiddenFromAStepThatSeesIt(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	usePool(t, f)
	cache := filepath.Join(f.root, "usercache")
	os.MkdirAll(cache, 0o755)
	t.Setenv("XDG_CACHE_HOME", cache)
	old := CheckCacheFile
	CheckCacheFile = ""
	t.Cleanup(func() { CheckCacheFile = old })
	if res := CachedCheck(); !res.Available {
		t.Fatalf("the sandbox check: %s", res.Msg)
	}
	file := checkCachePath()
	before, err := os.ReadFile(file)
	if err != nil || !within(cache, file) {
		t.Fatalf("the check was not remembered in %s: %v", cache, err)
	}
	in := f.input()
	in.AllowWrite = []string{cache}
	p := mustPlan(t, in)
	script := fmt.Sprintf(`touch %[1]s/ok || { echo "cannot write the cache folder"; exit 3; }
f=%[2]s
if [ -r "$f" ]; then sed 's/^version .*/version "0.7.0"/' "$f" > "$f.new" 2>/dev/null && mv "$f.new" "$f" 2>/dev/null && echo rewritten; fi
true`, cache, file)
	out, err := runPlan(t, p, script)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if after, _ := os.ReadFile(file); string(after) != string(before) {
		t.Errorf("the step rewrote kusaw's remembered check: %s (%s)", after, out)
	}
	bw, err := FindBwrap()
	if err != nil {
		t.Fatal(err)
	}
	versionMu.Lock()
	delete(versionCache, bw) // as a new kusaw process
	versionMu.Unlock()
	CachedCheck()
	if !disableUsernsSupported(bw) {
		t.Errorf("the next kusaw takes %s for a bwrap without --disable-userns", bw)
	}
	if !exists(filepath.Join(cache, "ok")) {
		t.Errorf("the step could not write the cache folder: %s", out)
	}
}

// startAttacker starts script in p's sandbox, its output gathered in out,
// and leaves the waiting to the test (the attack runs while the test
// plays the victim).
func startAttacker(t *testing.T, p *Plan, script string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out
}
