package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPlanPrivateObjectDir(t *testing.T) {
	f := newFixture(t)
	g := newFixture(t) // a second repo, read-only (per_repo)
	in := f.input()
	in.Worktrees = append(in.Worktrees, Worktree{Repo: "docs", Path: g.wt, GitDir: g.gitdir, CommonDir: g.common, Writable: false})
	withObjectDir(&in)
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	objs := filepath.Join(f.common, "objects")
	for _, m := range p.Mounts {
		if m.Op == "bind" && (within(objs, m.Dst) || within(filepath.Join(g.common, "objects"), m.Dst)) {
			t.Errorf("a repository's objects are writable: %+v", m)
		}
	}
	if !slicesHasRule(p.Writable, in.ObjectDir) {
		t.Errorf("the private object folder is not writable: %v", p.Writable)
	}
	env := strings.Join(p.Env, "\n")
	if !strings.Contains(env, "GIT_OBJECT_DIRECTORY="+in.ObjectDir+"\n") {
		t.Errorf("GIT_OBJECT_DIRECTORY not set to the private folder:\n%s", env)
	}
	if !strings.Contains(env, "GIT_ALTERNATE_OBJECT_DIRECTORIES="+objs+":"+filepath.Join(g.common, "objects")+"\n") {
		t.Errorf("GIT_ALTERNATE_OBJECT_DIRECTORIES does not list both repositories:\n%s", env)
	}
	// The step cannot point git elsewhere: kusaw's values win over the step's.
	in.Env["GIT_OBJECT_DIRECTORY"] = f.common + "/objects"
	p, err = BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Env, "\n"), "GIT_OBJECT_DIRECTORY="+in.ObjectDir) {
		t.Errorf("the step's GIT_OBJECT_DIRECTORY won")
	}

	// Without an object folder: loose objects writable as before.
	in = f.input()
	p, err = BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if !slicesHasRule(p.Writable, objs) || strings.Contains(strings.Join(p.Env, "\n"), "GIT_OBJECT_DIRECTORY") {
		t.Errorf("without ObjectDir the plan changed")
	}

	// Refusals: missing, or outside the attempt folder.
	in.ObjectDir = filepath.Join(f.attempt, "nope")
	if _, err := BuildPlan(in); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a missing object folder: %v", err)
	}
	out := filepath.Join(f.root, "elsewhere")
	os.MkdirAll(out, 0o700)
	in.ObjectDir = out
	if _, err := BuildPlan(in); err == nil || !strings.Contains(err.Error(), "not inside the attempt folder") {
		t.Errorf("an object folder outside the attempt: %v", err)
	}
}

// withObjectDir gives the attempt its private object folder.
func withObjectDir(in *Input) {
	in.ObjectDir = filepath.Join(in.AttemptDir, "objects")
	os.MkdirAll(in.ObjectDir, 0o700)
}

func slicesHasRule(rules []PathRule, p string) bool {
	for _, r := range rules {
		if r.Path == p {
			return true
		}
	}
	return false
}

func TestAltList(t *testing.T) {
	if got := altList([]string{"/a/objects", "/b:c/objects", `/d"e\f`}); got != `/a/objects:"/b:c/objects":"/d\"e\\f"` {
		t.Errorf("altList: %s", got)
	}
}

// The Seatbelt profile made from a plan with a private object folder: the
// repository's objects are read-only, loose ones included, and the private
// folder is writable.
func TestSeatbeltPrivateObjectDir(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.LoginPaths = nil
	withObjectDir(&in)
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := p.Seatbelt(SeatbeltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, prof)
	for what, c := range map[string][2]bool{
		"replace a loose object":        {pol.canWrite(f.common + "/objects/ab/cdef"), false},
		"remove a loose object":         {pol.canUnlink(f.common + "/objects/ab/cdef"), false},
		"plant a pack":                  {pol.canWrite(f.common + "/objects/pack/evil.pack"), false},
		"write the private object":      {pol.canWrite(in.ObjectDir + "/ab/cdef"), true},
		"read the repository's objects": {pol.canRead(f.common + "/objects/ab/cdef"), true},
		"move the attempt's branch":     {pol.canWrite(f.common + "/refs/heads/kusaw/r1/build/1"), true},
		"write the attempt's records":   {pol.canWrite(f.attempt + "/events.jsonl"), false},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: allowed=%v, want %v", what, c[0], c[1])
		}
	}
}
