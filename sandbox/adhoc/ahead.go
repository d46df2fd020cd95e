package adhoc

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/kusaw/kusaw/sandbox"
)

// kusaw sandbox exec without a factory file starts bwrap at kusaw's own
// start, before its plan is ready (sandbox.EarlyStart), so that bwrap's
// start overlaps the flags, the check and the plan (docs/benchmarks.md,
// "Lean start, eighth pass (issue 25)"). What that start must fix before
// the plan (the command bwrap runs and its count of empty files'
// descriptors) is taken from the last start in the same folder,
// remembered in <cache>/kusaw/exec-start. It is only a guess: the plan
// is built afresh every time, view, environment and all, and Exec
// compares its start with the guess before bwrap reads anything; when
// they differ, the early bwrap is killed and the plan's own is started.

// execAheadEntries bounds how many folders the file remembers.
const execAheadEntries = 8

const execAheadHeader = "kusaw exec start 1"

// tmpMark stands for the run's private temp folder in a remembered
// command (a fresh name at each run): NUL is in no argument.
const tmpMark = "\x00"

// execShape is one folder's remembered start, the command without the
// step's own argv.
type execShape struct {
	dir   string
	bwrap string
	data  int
	tail  []string // with tmpMark for the temp folder
}

// execAheadRun is one process's early start.
type execAheadRun struct {
	dir     string
	argv    []string
	tmp     string
	early   *sandbox.EarlyStart // nil when nothing was started
	raw     []byte              // the file as read
	entries []execShape         // raw decoded, once decoded is set (shapes)
	decoded bool
	file    string
	taken   bool
}

// shapes is every folder's shape in the file as read, decoded at the
// first need: after bwrap has started, since only this folder's is
// needed before (shapeFor).
func (r *execAheadRun) shapes() []execShape {
	if !r.decoded {
		r.entries, r.decoded = decodeExecShapes(r.raw), true
	}
	return r.entries
}

var execAhead struct {
	sync.Mutex
	run *execAheadRun
}

// AheadFile is where the early starts' shapes are remembered: "" for
// the user cache folder, "off" for no early start.
var AheadFile string

func execAheadPath() string { return sandbox.CacheFile(AheadFile, "exec-start") }

// StartAhead starts, when args are exactly kusaw's "sandbox exec --
// CMD...", the bwrap that Exec will use, if this folder's last
// start is remembered; DropAhead ends what Exec did not take.
// It returns once bwrap has started (about 0.5 ms): a goroutine would
// wait for the walk of /etc's (WalkSystemAhead) and start it later.
func StartAhead(args []string) {
	if runtime.GOOS != "linux" || len(args) < 4 || args[0] != "sandbox" || args[1] != "exec" || args[2] != "--" {
		return
	}
	file := execAheadPath()
	if file == "" {
		return
	}
	r := &execAheadRun{argv: slices.Clone(args[3:]), file: file}
	execAhead.Lock()
	if execAhead.run != nil {
		execAhead.Unlock()
		return
	}
	execAhead.run = r
	execAhead.Unlock()
	dir, err := os.Getwd()
	if err != nil {
		return
	}
	r.dir = dir
	r.raw, _ = os.ReadFile(file)
	if e, ok := shapeFor(r.raw, dir); ok {
		r.tmp = privateTmp()
		s := sandbox.StartShape{Bwrap: e.bwrap, Data: e.data, Tail: append(withTmp(e.tail, r.tmp), r.argv...)}
		r.early, _ = sandbox.StartEarly(s, os.Stdin, os.Stdout, os.Stderr)
	}
}

// takeAhead is this process's early start for Exec in dir
// with argv; nil when there is none, or it was for another command.
func takeAhead(dir string, argv []string) *execAheadRun {
	execAhead.Lock()
	r := execAhead.run
	if r == nil || r.taken {
		execAhead.Unlock()
		return nil
	}
	r.taken = true
	execAhead.Unlock()
	if r.dir != dir || !slices.Equal(r.argv, argv) {
		r.early.Stop()
		return nil
	}
	return r
}

// DropAhead stops an early start that Exec did not take (kusaw
// exits before the plan: a factory file, a usage error): killed and
// waited for, it leaves no process. That folder is forgotten.
func DropAhead() {
	execAhead.Lock()
	r := execAhead.run
	execAhead.run = nil
	execAhead.Unlock()
	if r == nil || r.taken {
		return
	}
	if r.early != nil {
		r.early.Stop()
		r.save(slices.DeleteFunc(slices.Clone(r.shapes()), func(e execShape) bool { return e.dir == r.dir }))
	}
}

// remember keeps p's start in dir as the folder's shape when it is not
// the one remembered. Called once the step has started.
func (r *execAheadRun) remember(p *sandbox.Plan, argv []string, tmp string) {
	s, ok, err := sandbox.ShapeOf(p, argv)
	if err != nil || !ok || len(s.Tail) < len(argv) {
		return
	}
	cur := execShape{dir: r.dir, bwrap: s.Bwrap, data: s.Data, tail: withMark(s.Tail[:len(s.Tail)-len(argv)], tmp)}
	entries := r.shapes()
	if len(entries) > 0 && sameShape(entries[0], cur) {
		return
	}
	rest := slices.DeleteFunc(slices.Clone(entries), func(e execShape) bool { return e.dir == r.dir })
	r.save(append([]execShape{cur}, rest...))
}

func sameShape(a, b execShape) bool {
	return a.dir == b.dir && a.bwrap == b.bwrap && a.data == b.data && slices.Equal(a.tail, b.tail)
}

func (r *execAheadRun) save(entries []execShape) {
	if len(entries) > execAheadEntries {
		entries = entries[:execAheadEntries]
	}
	if os.MkdirAll(filepath.Dir(r.file), 0o700) != nil {
		return
	}
	tmp := r.file + fmt.Sprintf(".%d", os.Getpid())
	if os.WriteFile(tmp, encodeExecShapes(entries), 0o600) == nil {
		if os.Rename(tmp, r.file) != nil {
			_ = os.Remove(tmp)
		}
	}
}

// withMark replaces the temp folder tmp in args by tmpMark; withTmp puts
// a run's own back.
func withMark(args []string, tmp string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if a == tmp || strings.HasPrefix(a, tmp+"/") {
			out[i] = tmpMark + a[len(tmp):]
		}
	}
	return out
}

func withTmp(args []string, tmp string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if strings.HasPrefix(a, tmpMark) {
			out[i] = tmp + a[len(tmpMark):]
		}
	}
	return out
}

// The file is a header line, then per folder: dir, bwrap, data and one
// tail line per argument, each value quoted as Go quotes a string.
func encodeExecShapes(entries []execShape) []byte {
	var b strings.Builder
	b.WriteString(execAheadHeader + "\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "dir %q\nbwrap %q\ndata %d\n", e.dir, e.bwrap, e.data)
		for _, a := range e.tail {
			fmt.Fprintf(&b, "tail %q\n", a)
		}
	}
	return []byte(b.String())
}

// shapeFor is dir's shape in the file b, with only its own lines
// decoded (strconv.Unquote of every line of eight folders' shapes is 0.07
// ms before bwrap can start: docs/benchmarks.md, "Lean start, twelfth
// pass (issue 25)"); ok is false when b has none for dir, or its lines
// are not ones decodeExecShapes reads. The rest of the file is read after
// the start (shapes).
func shapeFor(b []byte, dir string) (execShape, bool) {
	s := string(b)
	if !strings.HasPrefix(s, execAheadHeader+"\n") || !strings.HasSuffix(s, "\n") {
		return execShape{}, false
	}
	key := "\ndir " + strconv.Quote(dir) + "\n"
	i := strings.Index(s, key)
	if i < 0 {
		return execShape{}, false
	}
	block := s[i+1:] // from dir's line to the next folder's, or the end
	if j := strings.Index(block[len(key)-1:], "\ndir "); j >= 0 {
		block = block[:len(key)-1+j+1]
	}
	got := decodeExecShapes([]byte(execAheadHeader + "\n" + block))
	if len(got) != 1 || got[0].dir != dir {
		return execShape{}, false
	}
	return got[0], true
}

// decodeExecShapes reads the file; anything it does not know makes it
// read as empty (the next start is then an ordinary one).
func decodeExecShapes(b []byte) []execShape {
	lines := strings.Split(string(b), "\n")
	if len(lines) < 2 || lines[0] != execAheadHeader || lines[len(lines)-1] != "" {
		return nil
	}
	var out []execShape
	for _, l := range lines[1 : len(lines)-1] {
		name, v, _ := strings.Cut(l, " ")
		if name == "data" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || len(out) == 0 {
				return nil
			}
			out[len(out)-1].data = n
			continue
		}
		s, err := strconv.Unquote(v)
		if err != nil {
			return nil
		}
		switch {
		case name == "dir":
			out = append(out, execShape{dir: s})
		case len(out) == 0:
			return nil
		case name == "bwrap":
			out[len(out)-1].bwrap = s
		case name == "tail":
			out[len(out)-1].tail = append(out[len(out)-1].tail, s)
		default:
			return nil
		}
	}
	return out
}

// stop ends r's early bwrap unless it was handed over.
func (r *execAheadRun) stop() {
	if r != nil {
		r.early.Stop()
	}
}
