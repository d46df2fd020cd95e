//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoginSessionCarriedWithinTheRun: continue_session keeps the session
// folder (projects/) of an attempt's login copy and gives it to the run's
// next attempt only. The attacks, from inside: the first attempt leaves a
// link to a host file, a FIFO and a todo beside its session, for the next
// attempt to be handed; another run's attempt looks for the session in its
// login folder and in the attempt folder that keeps it; the user's own
// login folder must not gain it; an attempt swaps its session folder for a
// link to a host folder. The twin: the next attempt of the run
// reads the first one's session and continues it, as root and as a
// normal user.
func TestLoginSessionCarriedWithinTheRun(t *testing.T) {
	needSandbox(t, "runs the real sandbox")
	uids := []int{os.Geteuid()}
	if os.Geteuid() == 0 {
		uids = append(uids, 65534)
	}
	for _, uid := range uids {
		t.Run(fmt.Sprintf("uid%d", uid), func(t *testing.T) { loginSessionCase(t, uid) })
	}
}

func loginSessionCase(t *testing.T, uid int) {
	f := newFixture(t)
	if uid != 0 {
		f.path = "/usr/local/bin:/usr/bin:/bin"
	}
	login := filepath.Join(f.home, ".claude")
	write(t, filepath.Join(login, "projects", "other", "theirs.jsonl"), "the user's other session\n")
	key := sessionKey(login)
	keep1 := filepath.Join(f.attempt, "session", "login")
	keep2 := filepath.Join(f.attempt, "session2", "login")
	run := func(ls *LoginSession, script string) string {
		t.Helper()
		in := f.input()
		in.LoginSession = ls
		p, err := BuildPlan(in)
		if err != nil {
			t.Fatalf("BuildPlan: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", "S=$HOME/.claude/projects/-wt\n" + script})
		if err != nil {
			t.Fatalf("Command: %v", err)
		}
		if uid != os.Geteuid() {
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
			chownTree(t, f.root, uid)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err = cmd.Run()
		if cerr := p.Cleanup(); cerr != nil {
			t.Errorf("cleanup: %v", cerr)
		}
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("running bwrap: %v", err)
		}
		if err != nil {
			t.Fatalf("the step failed: %v\n%s", err, out.String())
		}
		return out.String()
	}

	// Attempt 1 of the run: its session, and what an attacker leaves
	// beside it for the next attempt.
	run(&LoginSession{Dirs: []string{"projects"}, Keep: keep1}, `set -e
test ! -e $HOME/.claude/projects/other
mkdir -p $S && echo turn1 > $S/s1.jsonl
ln -s /etc/passwd $S/link
mkfifo $S/fifo
mkdir -p $HOME/.claude/todos && echo planted > $HOME/.claude/todos/t.json`)
	kept := filepath.Join(keep1, key, "projects", "-wt", "s1.jsonl")
	if b, err := os.ReadFile(kept); err != nil || string(b) != "turn1\n" {
		t.Fatalf("the session was not kept for the next attempt: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(login, "projects")); len(ents) != 1 || exists(filepath.Join(login, "todos")) {
		t.Fatalf("the session reached the user's login folder: %v", ents)
	}
	if exists(filepath.Join(keep1, key, "todos")) {
		t.Errorf("a session-state folder continue_session does not name was kept")
	}

	// Attempt 2 of the run: the session only, and it continues it.
	out := run(&LoginSession{Dirs: []string{"projects"}, Keep: keep2, From: keep1}, `set -e
grep -qx turn1 $S/s1.jsonl
if test -e $S/link || test -L $S/link || test -e $S/fifo; then echo "CARRIED a link or FIFO"; exit 1; fi
if test -e $HOME/.claude/todos/t.json; then echo "CARRIED a todo"; exit 1; fi
echo turn2 >> $S/s1.jsonl
echo continued`)
	if !strings.Contains(out, "continued") {
		t.Fatalf("attempt 2 did not continue the session:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(keep2, key, "projects", "-wt", "s1.jsonl")); string(b) != "turn1\nturn2\n" {
		t.Errorf("attempt 2's continued session was not kept: %q", b)
	}

	// Another run's attempt: no From, so nothing of the session, and the
	// folders that keep it are not in its view.
	out = run(&LoginSession{Dirs: []string{"projects"}, Keep: filepath.Join(f.attempt, "session3", "login")}, `
if test -e $S || grep -rqs turn1 $HOME/.claude; then echo "FOUND the other run's session"; exit 1; fi
for d in `+keep1+` `+keep2+`; do if ls $d >/dev/null 2>&1; then echo "REACHED $d"; exit 1; fi; done
echo fresh`)
	if !strings.Contains(out, "fresh") {
		t.Fatalf("another run's attempt saw the session:\n%s", out)
	}
	// An attempt that swaps its session folder for a link to a host
	// folder keeps nothing: the link is not followed, nor kept.
	keep4 := filepath.Join(f.attempt, "session4", "login")
	run(&LoginSession{Dirs: []string{"projects"}, Keep: keep4}, `rm -rf $HOME/.claude/projects && ln -s /etc $HOME/.claude/projects && test -e $HOME/.claude/projects/passwd`)
	if _, err := os.Lstat(filepath.Join(keep4, key, "projects")); err == nil {
		t.Errorf("a session folder swapped for a link was kept")
	}
	if b, _ := os.ReadFile(filepath.Join(login, "projects", "other", "theirs.jsonl")); string(b) != "the user's other session\n" {
		t.Errorf("the user's own session changed: %q", b)
	}
}

// TestLoginSessionRefusesWhatIsNotSessionState: continue_session names
// session-state folders only (never settings, plugins or a path), keeps
// them in the attempt's own folder, and never reads them from the user's
// login folder.
func TestLoginSessionRefusesWhatIsNotSessionState(t *testing.T) {
	f := newFixture(t)
	keep := filepath.Join(f.attempt, "session", "login")
	for _, ls := range []LoginSession{
		{Dirs: []string{"plugins"}, Keep: keep},
		{Dirs: []string{"hooks"}, Keep: keep},
		{Dirs: []string{"../projects"}, Keep: keep},
		{Dirs: []string{"projects"}, Keep: filepath.Join(f.root, "elsewhere")},
		{Dirs: []string{"projects"}, Keep: filepath.Join(f.attempt, "login", "x")},
		{Dirs: []string{"projects"}, Keep: keep, From: filepath.Join(f.home, ".claude")},
	} {
		in := f.input()
		in.LoginSession = &ls
		if _, err := BuildPlan(in); err == nil {
			t.Errorf("BuildPlan took %+v", ls)
		}
	}
	in := f.input()
	in.LoginSession = &LoginSession{Dirs: []string{"projects"}, Keep: keep, From: filepath.Join(f.root, "state", "runs", "r1", "steps", "build", "0", "session", "login")}
	if _, err := BuildPlan(in); err != nil {
		t.Errorf("the legitimate session folders were refused: %v", err)
	}
}
