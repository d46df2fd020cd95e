// Package layering holds the test that keeps kusaw's packages pointing one
// way (docs/architecture.md, "Packages"): a package that imports what the
// layout forbids fails here, with the rule it broke.
package layering

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

const mod = "github.com/kusaw/kusaw/"

// never lists, for each package (a prefix: "serve" covers serve/...
// unless a longer entry names the sub-package), the kusaw packages it must
// not depend on, directly or through another package.
var never = map[string][]string{
	"config":             {"factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record", "deliver"},
	"status":             {"config", "factory", "attempt", "serve", "cluster", "record"},
	"chainlog":           {"config", "factory", "attempt", "serve", "cluster", "record"},
	"secretstore":        {"factory", "attempt", "serve", "cluster", "record"},
	"record":             {"factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps"},
	"internal/proc":      {"config", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record"},
	"internal/httpframe": {"config", "status", "chainlog", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record"},
	"internal/peercred":  {"config", "status", "chainlog", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record"},
	// removing what a step made hard to remove: the standard library and x/sys only
	"internal/rmtree": {"config", "status", "chainlog", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record", "secretstore", "internal"},
	// kusaw's hand-over to kusaw-daemon: a spec and a pipe, nothing else
	"internal/daemon": {"config", "status", "chainlog", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record", "secretstore"},
	// building kusaw-bridge for tests: nothing of kusaw's
	"internal/bridgebuild": {"config", "status", "chainlog", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record", "secretstore", "internal"},
	"sandbox":              {"egress", "worktree", "providers", "factory", "attempt", "serve", "cluster", "steps"},
	// the first stage inside the sandbox, linked into kusaw-bridge: nothing of kusaw's
	// kusaw sandbox exec without a factory file, run before the other
	// commands' packages initialise (cmd/kusaw/early): the sandbox and the
	// leaves it needs, nothing that reads a factory or records a run.
	"sandbox/adhoc":       {"config", "chainlog", "record", "egress", "worktree", "providers", "factory", "attempt", "serve", "cluster", "steps", "deliver"},
	"cmd/kusaw/early":     {"config", "chainlog", "record", "egress", "worktree", "providers", "factory", "attempt", "serve", "cluster", "steps", "deliver"},
	"internal/mountinfo":  {"config", "status", "chainlog", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record", "secretstore", "internal"},
	"internal/allowwrite": {"config", "status", "chainlog", "factory", "attempt", "serve", "cluster", "sandbox", "egress", "worktree", "providers", "steps", "record", "secretstore", "internal"},
	"sandbox/confine":     {"sandbox", "config", "status", "chainlog", "record", "egress", "worktree", "providers", "factory", "attempt", "serve", "cluster", "steps", "internal"},
	"egress":              {"sandbox", "worktree", "providers", "factory", "attempt", "serve", "cluster", "steps"},
	"worktree":            {"sandbox", "egress", "providers", "factory", "attempt", "serve", "cluster", "steps"},
	"providers":           {"sandbox", "egress", "worktree", "factory", "attempt", "serve", "cluster", "steps"},
	"steps":               {"factory", "attempt", "serve", "cluster"},
	"deliver":             {"factory", "attempt", "serve", "cluster", "sandbox", "egress"},
	// The executor: one attempt from its spec and a host. What runs
	// attempts (the engine, a worker) calls it; it calls none of them.
	"attempt":      {"factory", "serve", "cluster"},
	"factory":      {"serve", "cluster"},
	"serve":        {"sandbox", "egress", "worktree", "providers", "attempt", "cluster/worker"},
	"serve/client": {"serve", "factory", "attempt", "cluster", "sandbox", "egress", "worktree", "providers", "steps"},
	"cluster":      {"serve", "factory", "attempt", "sandbox"},
	// what an operator's NATS servers run on: keys and files, no runs
	"cluster/natsconf": {"serve", "factory", "attempt", "sandbox", "cluster/dispatch", "cluster/worker"},
	"cluster/dispatch": {"cluster/worker", "attempt", "sandbox", "egress", "serve"},
	// A worker runs its attempts through the executor, never the engine:
	// it has no runs, pipelines or pretend Run of its own.
	"cluster/worker": {"serve", "factory", "cluster/dispatch"},
}

// allowed are deliberate exceptions, each with its reason.
var allowed = map[[2]string]string{
	// serve runs attempts on its own machine through the engine, which
	// links the sandbox and the proxy; serve's own code calls neither.
	{"serve", "sandbox"}:   "through factory: serve's engine runs local attempts",
	{"serve", "egress"}:    "through factory: serve runs one shared proxy for its engine",
	{"serve", "worktree"}:  "through factory",
	{"serve", "providers"}: "through factory",
	{"serve", "attempt"}:   "through factory: serve's engine runs local attempts with the executor",
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func rule(path string) (string, []string) {
	best := ""
	for p := range never {
		if (path == p || strings.HasPrefix(path, p+"/")) && len(p) > len(best) {
			best = p
		}
	}
	return best, never[best]
}

func under(dep, p string) bool { return dep == p || strings.HasPrefix(dep, p+"/") }

func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", mod+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		path := strings.TrimPrefix(p.ImportPath, mod)
		name, forbidden := rule(path)
		if name == "" {
			continue
		}
		seen++
		// Direct imports are checked against every rule; transitive
		// dependencies too, except where an exception names the path.
		for _, dep := range p.Deps {
			if !strings.HasPrefix(dep, mod) {
				continue
			}
			d := strings.TrimPrefix(dep, mod)
			for _, f := range forbidden {
				if !under(d, f) || under(d, path) {
					continue
				}
				direct := false
				for _, im := range p.Imports {
					if im == dep {
						direct = true
					}
				}
				if _, ok := allowed[[2]string{name, f}]; ok && !direct {
					continue
				}
				t.Errorf("%s depends on %s (%s): the layout says %s never imports %s", path, d, map[bool]string{true: "directly", false: "through another package"}[direct], name, f)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("only %d packages matched a rule: the table is out of date", seen)
	}
}

// daemonOnly are what only kusaw-daemon links (serve, the cluster, NATS,
// prometheus): kusaw hands serve and worker over to it, and every other
// start of kusaw, each sandboxed step's among them, must not pay their
// initialisers. The figures:
// docs/benchmarks.md, "Lean start, fourth pass: the daemon apart".
// A prefix ending in "/" covers the packages beneath; one without, that
// package alone.
var daemonOnly = []string{
	"github.com/nats-io/nats-server/",
	"github.com/nats-io/nats.go",
	"github.com/prometheus/",
	mod + "serve",
	mod + "cluster",
	mod + "cluster/worker",
	mod + "cluster/dispatch",
}

func isDaemonOnly(dep string) bool {
	for _, d := range daemonOnly {
		if strings.HasSuffix(d, "/") && strings.HasPrefix(dep, d) || dep == d || !strings.HasPrefix(d, mod) && strings.HasPrefix(dep, d+"/") {
			return true
		}
	}
	return false
}

// TestKusawLinksNoDaemonCode: kusaw's dependencies hold none of the
// daemon's; a package that brings one in is named with what it imports.
func TestKusawLinksNoDaemonCode(t *testing.T) {
	bad := linksDaemonCode(t, mod+"cmd/kusaw")
	for _, b := range bad {
		t.Error(b)
	}
	// The check itself sees the daemon's code where it is linked.
	if len(linksDaemonCode(t, mod+"cmd/kusaw-daemon")) == 0 {
		t.Fatal("kusaw-daemon links no daemon code by this test's list: the list is out of date")
	}
}

func linksDaemonCode(t *testing.T, main string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json", main).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", main, err)
	}
	var bad []string
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if isDaemonOnly(p.ImportPath) {
			continue
		}
		for _, im := range p.Imports {
			if isDaemonOnly(im) {
				bad = append(bad, fmt.Sprintf("%s links %s (imported by %s): only kusaw-daemon may; move what kusaw needs of it into a package of its own (as cluster/enroll, serve/unit)", main, im, p.ImportPath))
			}
		}
	}
	return bad
}

// kusawTags are the build tags make build gives kusaw itself (the
// Makefile's KUSAW_TAGS).
const kusawTags = "kusaw_nogogit"

// TestKusawLinksNoGoGit: kusaw, built as make build builds it, links no
// go-git (its package initialisers cost every start about 1 ms: worktree
// reads through the git binary there), and make build does give it the tag.
func TestKusawLinksNoGoGit(t *testing.T) {
	for _, c := range []struct {
		tags  string
		wants bool
	}{{kusawTags, false}, {"", true}} {
		out, err := exec.Command("go", "list", "-deps", "-tags", c.tags, mod+"cmd/kusaw").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %q cmd/kusaw: %v", c.tags, err)
		}
		links := strings.Contains(string(out), "github.com/go-git/")
		if links != c.wants {
			t.Errorf("cmd/kusaw built with tags %q links go-git: %v, want %v (worktree/reader_gogit.go and reader_nogogit.go choose by the tag)", c.tags, links, c.wants)
		}
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "KUSAW_TAGS := "+kusawTags+"\n") || !strings.Contains(string(mk), "build -tags $(KUSAW_TAGS) -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kusaw") {
		t.Errorf("the Makefile does not build kusaw with KUSAW_TAGS := %s", kusawTags)
	}
}
