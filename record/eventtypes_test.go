package record

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/internal/generated"
)

// The -update flag of make docs; another test file of this package may
// define it too.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the generated reference pages")
	}
}

func updating() bool { return flag.Lookup("update").Value.String() == "true" }

func TestEventTypesPageFresh(t *testing.T) {
	generated.CheckSection(t, "../docs/records.md", "event types", EventTypesMarkdown(), updating())
}

var eventName = regexp.MustCompile(`^[a-z]+\.[a-z_]+$`)

func TestEventTypesTable(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range EventTypes {
		if !eventName.MatchString(e.Name) {
			t.Errorf("%q: an event type is area.verb in lower case", e.Name)
		}
		if seen[e.Name] {
			t.Errorf("%s: two rows", e.Name)
		}
		seen[e.Name] = true
		if e.Writer != WriterServe && e.Writer != WriterWorker && e.Writer != WriterBoth {
			t.Errorf("%s: writer %q is none of serve, worker, both", e.Name, e.Writer)
		}
		if e.Doc == "" || strings.Contains(e.Doc, "\n") {
			t.Errorf("%s: the doc is one line", e.Name)
		}
	}
}

// A worker may send what the attempt's executor writes, nothing else:
// serve's verdicts, the attempt's start and end, commits and branches,
// what belongs to the run, and any type not in the table are refused.
func TestWorkerMaySend(t *testing.T) {
	for _, typ := range []string{EvProcessStarted, EvProcessExited, EvProviderTool, EvProviderText, EvEgressBlocked,
		EvEgressSummary, EvSandboxPlan, EvWorktreeCreated, EvSetupFinished, EvLimitReached} {
		if !WorkerMaySend(typ) {
			t.Errorf("%s: a worker's own event refused", typ)
		}
	}
	for _, typ := range []string{EvClusterClaimed, EvClusterEgressLog, EvClusterEventRefused, EvRunFinished, EvStepFinished,
		EvAttemptStarted, EvAttemptFinished, EvCommitted, EvBranchAdvanced, EvHeadsMoved, EvGateApproved, EvDeliverPushed,
		EvNotifyDelivered, EvFixFinished, EvCandidatesSelected, "zzz.new", "cluster.anything", "", "process.started "} {
		if WorkerMaySend(typ) {
			t.Errorf("%q: a worker may send it", typ)
		}
	}
}

// The states a record claims are sealed at once: the starts and ends of
// runs, steps, attempts and processes, commits and branch moves, claims,
// gates' decisions.
func TestCheckpoints(t *testing.T) {
	for _, typ := range []string{EvRunStarted, EvRunFinished, EvStepStarted, EvStepFinished, EvAttemptStarted, EvAttemptFinished,
		EvProcessStarted, EvProcessExited, EvCommitted, EvBranchAdvanced, EvCancelRequested, EvEgressSummary, EvHeadsMoved,
		EvGroupMerged, EvCandidatesSelected, EvGateWaiting, EvGateApproved, EvGateRejected, EvClusterClaimed, EvClusterReattached} {
		if !Checkpoint(typ) {
			t.Errorf("%s is not a checkpoint", typ)
		}
	}
	for _, typ := range []string{EvProviderText, EvProviderTool, EvEgressBlocked, EvClusterEventRefused, "zzz.new"} {
		if Checkpoint(typ) {
			t.Errorf("%s is a checkpoint", typ)
		}
	}
}

// Every event type kusaw's code emits has a row in the table, and an
// event type's name is defined once, in record.
func TestEventTypesCoverEmitted(t *testing.T) {
	srcs := map[string]string{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("..", p)
			srcs[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	uses, problems := checkEmitted(t, srcs)
	for _, p := range problems {
		t.Error(p)
	}
	// The scan finds what it should: the engine, the executor, the
	// providers and the cluster all emit.
	areas := map[string]bool{}
	for _, u := range uses {
		areas[strings.SplitN(u, "/", 2)[0]] = true
	}
	for _, want := range []string{"factory", "providers", "cluster"} {
		if !areas[want] {
			t.Errorf("no event emitted in %s/ found: the scan is broken (%d uses)", want, len(uses))
		}
	}
	if len(uses) < 80 {
		t.Errorf("only %d emitted event types found: the scan is broken", len(uses))
	}
}

// The scan itself: an unknown literal, an unknown constant and a
// definition outside record are each found; a known one is not.
func TestCheckEmittedFinds(t *testing.T) {
	srcs := map[string]string{
		"a/a.go": `package a
import "github.com/kusaw/kusaw/record"
const EventMine = "provider.text"
const evLocal = "zzz.local"
func f(s sink) {
	s.Emit("zzz.new", nil)
	s.Emit(record.EvRunStarted, nil)
	s.Emit(record.EvNope, nil)
	emit(Event{Type: evLocal})
	s.emit(EventMine, nil)
}`,
		"record/x.go": `package record
const EvNope = "zzz.nope"
const EvUnlisted = "zzz.unlisted"
const EvRunStarted = "run.started"
`,
	}
	uses, problems := checkEmitted(t, srcs)
	want := []string{`"zzz.new" is emitted`, `"zzz.nope" is emitted`, `record.EvNope`, `"zzz.local" is emitted`, `record.EvUnlisted`, `"provider.text" is defined again`}
	all := strings.Join(problems, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("the scan did not find %s:\n%s", w, all)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(problems), len(want), all)
	}
	if len(uses) != 5 {
		t.Errorf("%d uses, want 5: %v", len(uses), uses)
	}
}

const module = "github.com/kusaw/kusaw/"

// checkEmitted parses Go sources (path relative to the module's root ->
// text) and returns each emitted event type it resolved ("dir/file:line
// type") and each problem: a type emitted but not in EventTypes, a
// record.Ev* constant not in it, an event type's name defined as a
// constant outside record. An event is emitted by a call of Emit or emit
// (its first argument) or an Event{Type: ...} literal; a type is followed
// through constants of any package to its string.
func checkEmitted(t *testing.T, srcs map[string]string) (uses, problems []string) {
	t.Helper()
	fset := token.NewFileSet()
	type file struct {
		path, dir string
		f         *ast.File
		imports   map[string]string // name -> dir in the module
	}
	var files []file
	consts := map[string]map[string]ast.Expr{} // dir -> name -> value
	paths := make([]string, 0, len(srcs))
	for p := range srcs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, srcs[p], parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		fl := file{path: p, dir: path.Dir(p), f: f, imports: map[string]string{}}
		for _, im := range f.Imports {
			ip, _ := strconv.Unquote(im.Path.Value)
			if !strings.HasPrefix(ip, module) {
				continue
			}
			name := path.Base(ip)
			if im.Name != nil {
				name = im.Name.Name
			}
			fl.imports[name] = strings.TrimPrefix(ip, module)
		}
		files = append(files, fl)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if consts[fl.dir] == nil {
							consts[fl.dir] = map[string]ast.Expr{}
						}
						consts[fl.dir][n.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var resolve func(fl file, dir string, e ast.Expr, depth int) (string, bool)
	resolve = func(fl file, dir string, e ast.Expr, depth int) (string, bool) {
		if depth > 8 {
			return "", false
		}
		switch x := e.(type) {
		case *ast.BasicLit:
			if x.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(x.Value)
			return s, err == nil
		case *ast.Ident:
			if v, ok := consts[dir][x.Name]; ok {
				return resolve(fl, dir, v, depth+1)
			}
		case *ast.SelectorExpr:
			if pkg, ok := x.X.(*ast.Ident); ok && dir == fl.dir {
				if d, ok := fl.imports[pkg.Name]; ok {
					if v, ok := consts[d][x.Sel.Name]; ok {
						// A constant of another package resolves in it; its
						// own selectors are rare enough to stop there.
						return resolve(file{dir: d, imports: fl.imports}, d, v, depth+1)
					}
				}
			}
		}
		return "", false
	}
	known := func(typ string) bool { _, ok := LookupEventType(typ); return ok }
	for _, fl := range files {
		ast.Inspect(fl.f, func(n ast.Node) bool {
			var arg ast.Expr
			switch x := n.(type) {
			case *ast.CallExpr:
				name := ""
				switch fn := x.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				if (name == "Emit" || name == "emit") && len(x.Args) > 0 {
					arg = x.Args[0]
				}
			case *ast.CompositeLit:
				tn := ""
				switch ty := x.Type.(type) {
				case *ast.Ident:
					tn = ty.Name
				case *ast.SelectorExpr:
					tn = ty.Sel.Name
				}
				if tn == "Event" {
					for _, el := range x.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Type" {
								arg = kv.Value
							}
						}
					}
				}
			case *ast.GenDecl:
				if x.Tok != token.CONST {
					return true
				}
				for _, s := range x.Specs {
					vs := s.(*ast.ValueSpec)
					for i, nm := range vs.Names {
						if i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok {
							continue
						}
						v, _ := strconv.Unquote(lit.Value)
						pos := fset.Position(nm.Pos())
						switch {
						case fl.dir == "record" && strings.HasPrefix(nm.Name, "Ev") && !strings.HasPrefix(nm.Name, "Event") && !known(v):
							problems = append(problems, fmt.Sprintf("%s:%d: record.%s = %q has no row in record.EventTypes", pos.Filename, pos.Line, nm.Name, v))
						case fl.dir != "record" && known(v) && (strings.HasPrefix(nm.Name, "Ev") || strings.HasPrefix(nm.Name, "Event")):
							problems = append(problems, fmt.Sprintf("%s:%d: %s: the event type %q is defined again: use record's constant", pos.Filename, pos.Line, nm.Name, v))
						}
					}
				}
				return true
			}
			if arg == nil {
				return true
			}
			typ, ok := resolve(fl, fl.dir, arg, 0)
			if !ok {
				return true // a variable: its value comes from a constant checked at its own use
			}
			pos := fset.Position(arg.Pos())
			uses = append(uses, fmt.Sprintf("%s:%d %s", pos.Filename, pos.Line, typ))
			if !known(typ) {
				problems = append(problems, fmt.Sprintf("%s:%d: the event type %q is emitted but has no row in record.EventTypes (record/eventtypes.go)", pos.Filename, pos.Line, typ))
			}
			return true
		})
	}
	return uses, problems
}

// An event's data read the same in the process that emitted it and after
// JSON, whichever decoder.
func TestEventAccessors(t *testing.T) {
	for _, v := range []any{3, int64(3), 3.0, json.Number("3")} {
		ev := Event{Data: map[string]any{"of": v, "s": "x", "b": true}}
		if n, ok := ev.Int("of"); !ok || n != 3 {
			t.Errorf("%T: Int %d %v", v, n, ok)
		}
		if ev.Str("s") != "x" || !ev.Bool("b") || ev.Str("of") != "" || ev.Bool("s") {
			t.Errorf("%T: Str/Bool", v)
		}
	}
	if _, ok := (Event{}).Int("of"); ok {
		t.Error("Int of a missing key")
	}
	if _, ok := (Event{Data: map[string]any{"of": "3"}}).Int("of"); ok {
		t.Error("Int of a string")
	}
}
