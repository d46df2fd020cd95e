package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The plan shows the step's git a private info/exclude naming each
// stand-in file, mounted read-only over the repository's own, which is
// left as it was (and created empty when the repository had none).
func TestPlanHidesStandInsFromGit(t *testing.T) {
	f := newFixture(t)
	own := filepath.Join(f.common, "info", "exclude")
	if err := os.RemoveAll(filepath.Join(f.common, "info")); err != nil {
		t.Fatal(err)
	}
	p := mustPlan(t, f.input())
	if len(p.GitExcludes) != 1 || p.GitExcludes[0].MountOn != own {
		t.Fatalf("git excludes: %+v", p.GitExcludes)
	}
	g := p.GitExcludes[0]
	if !strings.Contains(g.Content, "\n/.mcp.json\n") {
		t.Fatalf("the exclude does not name the .mcp.json stand-in:\n%s", g.Content)
	}
	var bound bool
	for _, m := range p.Mounts {
		if m.Op == "ro-bind" && m.Src == g.Path && m.Dst == own {
			bound = true
		}
	}
	if !bound {
		t.Fatalf("no read-only bind of %s over %s", g.Path, own)
	}
	if err := p.Prepare(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(own); err != nil || len(b) != 0 {
		t.Fatalf("the repository's info/exclude: %q %v (want an empty file to mount on)", b, err)
	}
	if b, err := os.ReadFile(g.Path); err != nil || string(b) != g.Content {
		t.Fatalf("the private exclude: %q %v", b, err)
	}
	// The repository's own lines come first and stay.
	write(t, own, "*.log")
	p = mustPlan(t, f.input())
	if c := p.GitExcludes[0].Content; !strings.HasPrefix(c, "*.log\n# kusaw:") {
		t.Fatalf("own lines not kept first:\n%s", c)
	}
	// A link is never followed: the stand-ins then stay visible, said in a note.
	os.Remove(own)
	os.Symlink("/etc/passwd", own)
	p = mustPlan(t, f.input())
	if len(p.GitExcludes) != 0 || !strings.Contains(strings.Join(p.Notes, "\n"), "info/exclude") {
		t.Fatalf("a linked info/exclude: %+v %v", p.GitExcludes, p.Notes)
	}
}

func TestExcludeLine(t *testing.T) {
	for in, want := range map[string]string{
		".mcp.json":      "/.mcp.json",
		"a b/c*?[x]\\y":  `/a b/c\*\?\[x]\\y`,
		"trailing ":      `/trailing\ `,
		"!neg/#hash":     "/!neg/#hash",
		".claude/x.json": "/.claude/x.json",
	} {
		if got := excludeLine(in); got != want {
			t.Errorf("excludeLine(%q) = %q, want %q", in, got, want)
		}
	}
}
