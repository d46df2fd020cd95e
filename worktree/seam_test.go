package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadRefFileForms(t *testing.T) {
	dir := t.TempDir()
	oid := strings.Repeat("a", 40)
	host := filepath.Join(dir, "host-file")
	write(t, host, oid+"\n")
	cases := []struct {
		name, kind string
		make       func(p string) error
		ok         bool
	}{
		{"object id", "", func(p string) error { return os.WriteFile(p, []byte(oid+"\n"), 0o644) }, true},
		{"sha256 id", "", func(p string) error { return os.WriteFile(p, []byte(strings.Repeat("b", 64)), 0o644) }, true},
		{"symbolic ref", "symbolic ref", func(p string) error { return os.WriteFile(p, []byte("ref: refs/heads/main\n"), 0o644) }, false},
		{"garbage", "file that is not one object id", func(p string) error { return os.WriteFile(p, []byte(oid+"\n"+oid+"\n"), 0o644) }, false},
		{"symlink", "symbolic link", func(p string) error { return os.Symlink(host, p) }, false},
		{"dangling symlink", "symbolic link", func(p string) error { return os.Symlink(filepath.Join(dir, "nowhere"), p) }, false},
		{"fifo", "FIFO", func(p string) error { return syscall.Mkfifo(p, 0o644) }, false},
		{"hard link", "hard link", func(p string) error { return os.Link(host, p) }, false},
		{"folder", "folder", func(p string) error { return os.Mkdir(p, 0o755) }, false},
		{"big", "file of", func(p string) error { return os.WriteFile(p, make([]byte, 4096), 0o644) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := tc.make(p); err != nil {
				t.Fatal(err)
			}
			sha, ok, err := readRefFile(p)
			if tc.ok {
				if err != nil || !ok || len(sha) < 40 {
					t.Fatalf("%q %v %v", sha, ok, err)
				}
				return
			}
			if !errors.Is(err, errNotRef) || !strings.HasPrefix(kindOfErr(err), tc.kind) || ok {
				t.Fatalf("got %q %v %v, want a refusal naming %q", sha, ok, err, tc.kind)
			}
		})
	}
	if _, ok, err := readRefFile(filepath.Join(dir, "missing")); ok || err != nil {
		t.Errorf("missing: %v %v", ok, err)
	}
}

// Without a ref store (macOS, or no sandbox) the branch's own folder was
// the step's: a symbolic ref to main and a reflog linked to a host file
// are removed before kusaw's git commits, so main stays and the host file
// is not appended to.
func TestCheckOwnRefRepairsBranchAndReflog(t *testing.T) {
	needGit(t)
	isolateHome(t)
	dir := newRepo(t)
	r := open(t, dir)
	run, _, _ := r.CreateRunBranch("r1", "")
	w, err := r.AddAttempt(run, AttemptBranch("r1", "build", 1), filepath.Join(t.TempDir(), "wt"))
	if err != nil {
		t.Fatal(err)
	}
	mainBefore := tgit(t, dir, "rev-parse", "main")
	host := filepath.Join(t.TempDir(), "victim")
	write(t, host, "host\n")
	ref := filepath.Join(w.CommonDir, "refs", "heads", filepath.FromSlash(w.Branch))
	log := filepath.Join(w.CommonDir, "logs", "refs", "heads", filepath.FromSlash(w.Branch))
	os.WriteFile(ref, []byte("ref: refs/heads/main\n"), 0o644)
	os.Remove(log)
	if err := os.Symlink(host, log); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(w.Path, "new.txt"), "x\n")
	found, err := w.CheckOwnRef()
	if err != nil || len(found) != 2 || found[0].Kind != "symbolic ref" || found[1].Kind != "symbolic link" {
		t.Fatalf("findings %v (%v)", found, err)
	}
	if _, _, err := w.CommitAll("m"); err != nil {
		t.Fatal(err)
	}
	if got := tgit(t, dir, "rev-parse", "main"); got != mainBefore {
		t.Errorf("main moved to %s", got)
	}
	if b, _ := os.ReadFile(host); string(b) != "host\n" {
		t.Errorf("the host file was written: %q", b)
	}
	if got := tgit(t, dir, "show", w.Branch+":new.txt"); got != "x" {
		t.Errorf("the files were not committed on the attempt branch: %q", got)
	}
	// Twin: a branch the step moved by committing is left alone.
	found, err = w.CheckOwnRef()
	if err != nil || len(found) != 0 {
		t.Errorf("a clean branch gave findings %v (%v)", found, err)
	}
}

// With a ref store the step's refs never touch the repository: kusaw takes
// the attempt branch from the store, checked, with its objects.
func TestAdoptFromStore(t *testing.T) {
	needGit(t)
	_, w, objDir, c := stepAttempt(t)
	// stepAttempt committed in the repository's ref folder; make that the
	// store's and put the real branch back at its base.
	store := t.TempDir()
	if _, err := w.NewRefStore(store); err != nil {
		t.Fatal(err)
	}
	tgit(t, w.Path, "update-ref", "refs/heads/"+w.Branch, w.BaseSHA)
	found, err := w.AdoptFromStore(store, objDir)
	if err != nil || len(found) != 0 {
		t.Fatalf("adopt: %v %v", found, err)
	}
	if got := tgit(t, w.Path, "rev-parse", "refs/heads/"+w.Branch); got != c {
		t.Fatalf("branch at %s, want the step's %s", got, c)
	}
	// Attack: the store's branch is a symbolic ref to main.
	tgit(t, w.Path, "update-ref", "refs/heads/"+w.Branch, w.BaseSHA, c)
	os.WriteFile(refPath(store, "refs/heads/"+w.Branch), []byte("ref: refs/heads/main\n"), 0o644)
	found, err = w.AdoptFromStore(store, objDir)
	if err == nil || len(found) != 1 || found[0].Kind != "symbolic ref" {
		t.Fatalf("a symbolic ref was adopted: %v %v", found, err)
	}
	if got := tgit(t, w.Path, "rev-parse", "refs/heads/"+w.Branch); got != w.BaseSHA {
		t.Fatalf("branch moved to %s", got)
	}
}

func TestScrubRemovesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "index"), "i")
	os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
	syscall.Mkfifo(filepath.Join(dir, "locked"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "logs", "HEAD"))
	found, err := Scrub(dir)
	if err != nil || len(found) != 2 {
		t.Fatalf("%v %v", found, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "index")); err != nil {
		t.Error("a regular file was removed")
	}
}
