package sandbox

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The macOS profile is tested here, on Linux: goldens of the text for
// representative plans, and a small evaluator of the generated profile
// (parse it, bind the parameters, apply Seatbelt's precedence) that asks
// what the step may do. Whether macOS agrees is what
// e2e/escape_darwin_test.go checks on a Mac.

var updateGolden = flag.Bool("update", false, "rewrite the seatbelt golden files")

// --- a tiny SBPL reader and evaluator ---

type sexp struct {
	atom   string // symbol, or string value
	str    bool   // atom was a quoted string
	regex  bool   // atom was #"..."
	list   []*sexp
	isList bool
}

func parseSBPL(t testing.TB, text string) []*sexp {
	t.Helper()
	var stack [][]*sexp
	var top []*sexp
	push := func(e *sexp) {
		if len(stack) == 0 {
			top = append(top, e)
		} else {
			stack[len(stack)-1] = append(stack[len(stack)-1], e)
		}
	}
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == ';':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == ' ' || c == '\n' || c == '\t':
			i++
		case c == '(':
			stack = append(stack, nil)
			i++
		case c == ')':
			if len(stack) == 0 {
				t.Fatalf("unbalanced ) at %d", i)
			}
			l := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			push(&sexp{list: l, isList: true})
			i++
		case c == '"' || (c == '#' && i+1 < len(text) && text[i+1] == '"'):
			regex := c == '#'
			if regex {
				i++
			}
			j := i + 1
			var sb strings.Builder
			for ; j < len(text) && text[j] != '"'; j++ {
				if text[j] == '\\' && j+1 < len(text) {
					j++
					switch text[j] {
					case 'n':
						sb.WriteByte('\n')
					case 't':
						sb.WriteByte('\t')
					default:
						sb.WriteByte(text[j])
					}
					continue
				}
				if text[j] == '\n' {
					t.Fatalf("newline inside a string literal at %d", j)
				}
				sb.WriteByte(text[j])
			}
			if j >= len(text) {
				t.Fatalf("unterminated string at %d", i)
			}
			push(&sexp{atom: sb.String(), str: true, regex: regex})
			i = j + 1
		default:
			j := i
			for j < len(text) && !strings.ContainsRune(" \n\t()\";", rune(text[j])) {
				j++
			}
			push(&sexp{atom: text[i:j]})
			i = j
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unbalanced (: %d open", len(stack))
	}
	return top
}

type sbRule struct {
	allow   bool
	ops     []string
	filters []*sexp
	message string // (with message "...")
}

type sbPolicy struct {
	t      testing.TB
	rules  []sbRule
	params map[string]string
}

// sbOperations are the operation names Seatbelt knows (macOS 14 and
// later): a rule naming any other does not compile, so the evaluator
// refuses it here, where a Mac is not needed to find out. A name ending
// in * is a family: its rules apply to every member that has no rule of
// its own that matches.
var sbOperations = map[string]bool{}

func init() {
	for _, op := range strings.Fields(`default appleevent-send authorization-right-obtain boot-arg-set
		device* device-camera device-microphone darwin-notification-post distributed-notification-post
		dynamic-code-generation file* file-chroot file-clone file-ioctl file-issue-extension file-link
		file-map-executable file-mknod file-mount file-mount-update file-read* file-read-data
		file-read-metadata file-read-xattr file-revoke file-search file-test-existence file-unmount
		file-write* file-write-acl file-write-create file-write-data file-write-finderinfo file-write-flags
		file-write-mode file-write-owner file-write-setugid file-write-times file-write-unlink file-write-xattr
		hid-control iokit* iokit-issue-extension iokit-open iokit-set-properties iokit-get-properties
		ipc* ipc-posix* ipc-posix-sem* ipc-posix-sem-create ipc-posix-sem-open ipc-posix-shm* ipc-posix-shm-read*
		ipc-posix-shm-read-data ipc-posix-shm-write* ipc-posix-shm-write-data ipc-sysv* ipc-sysv-shm job-creation lsopen
		mach* mach-cross-domain-lookup mach-issue-extension mach-lookup mach-per-user-lookup
		mach-priv* mach-priv-host-port mach-priv-task-port mach-register mach-task-name
		network* network-inbound network-bind network-outbound nvram* nvram-delete nvram-get nvram-set
		process* process-exec* process-exec process-exec-interpreter process-fork process-info* process-info-listpids
		process-info-pidinfo process-info-setcontrol pseudo-tty signal sysctl* sysctl-read sysctl-write
		system* system-fsctl system-info system-socket user-preference* user-preference-read user-preference-write`) {
		sbOperations[op] = true
	}
}

// opLevels returns the levels Seatbelt tries for op, the operation itself
// first, then each family it belongs to, then default:
// file-write-data, file-write*, file*, default.
func opLevels(op string) []string {
	levels := []string{op}
	parts := strings.Split(op, "-")
	for i := len(parts) - 1; i >= 1; i-- {
		if fam := strings.Join(parts[:i], "-") + "*"; sbOperations[fam] && fam != op {
			levels = append(levels, fam)
		}
	}
	return append(levels, "default")
}

func loadPolicy(t testing.TB, prof *SeatbeltProfile) *sbPolicy {
	t.Helper()
	pol := &sbPolicy{t: t, params: map[string]string{}}
	for _, p := range prof.Params {
		if _, dup := pol.params[p.Name]; dup {
			t.Fatalf("parameter %s given twice", p.Name)
		}
		pol.params[p.Name] = p.Value
	}
	used := map[string]bool{}
	for _, e := range parseSBPL(t, prof.Text) {
		if !e.isList || len(e.list) == 0 {
			t.Fatalf("top-level form is not a list: %+v", e)
		}
		head := e.list[0].atom
		switch head {
		case "version":
			continue
		case "allow", "deny":
		default:
			t.Fatalf("unexpected top-level form %q", head)
		}
		r := sbRule{allow: head == "allow"}
		for _, x := range e.list[1:] {
			switch {
			case x.isList && len(x.list) == 3 && x.list[0].atom == "with" && x.list[1].atom == "message":
				r.message = x.list[2].atom
			case x.isList:
				r.filters = append(r.filters, x)
				markParams(x, used)
			default:
				if !sbOperations[x.atom] {
					t.Fatalf("unknown operation %q: macOS would refuse the profile", x.atom)
				}
				r.ops = append(r.ops, x.atom)
			}
		}
		if len(r.ops) == 0 {
			t.Fatalf("a rule with no operation: %+v", e)
		}
		pol.rules = append(pol.rules, r)
	}
	for name := range pol.params {
		if !used[name] {
			t.Errorf("parameter %s is never used by the profile", name)
		}
	}
	for name := range used {
		if _, ok := pol.params[name]; !ok {
			t.Errorf("the profile uses parameter %s that is not given", name)
		}
	}
	return pol
}

func markParams(e *sexp, used map[string]bool) {
	if e.isList && len(e.list) == 2 && e.list[0].atom == "param" {
		used[e.list[1].atom] = true
		return
	}
	for _, x := range e.list {
		markParams(x, used)
	}
}

// value returns a filter argument: a string or (param "X").
func (pol *sbPolicy) value(e *sexp) string {
	if e.isList {
		if len(e.list) == 2 && e.list[0].atom == "param" {
			return pol.params[e.list[1].atom]
		}
		pol.t.Fatalf("unsupported value form %+v", e)
	}
	if !e.str {
		pol.t.Fatalf("bare symbol %q where a string was expected", e.atom)
	}
	return e.atom
}

// opMatches: the rule's operation is the query's or a family it belongs to.
func opMatches(ruleOp, op string) bool {
	return slices.Contains(opLevels(op), ruleOp)
}

// query is one operation the step attempts. Ops are leaves (file-read-data,
// not file-read*), as the kernel asks them.
type query struct {
	op        string
	path      string // file operations, unix sockets
	remote    string // network: "ip:localhost:8080" or "unix:/path"
	local     string // network-bind/inbound: "ip:localhost:0" or "unix:/path"
	mach      string // mach-lookup: a global name
	machLocal bool   // ...in the session's namespace (local-name)
	iokit     string // iokit-open: the user client class
	sysctl    string // sysctl-read, sysctl-write
	domain    string // system-socket: "AF_UNIX", "AF_SYSTEM", ...
	protocol  int    // system-socket
	target    string // signal, process-info*, task ports: "same-sandbox" or "" (outside)
	extension string // a sandbox extension the process holds ("com.apple.sandbox.pty")
}

func (pol *sbPolicy) pathFilter(f *sexp, p string) bool {
	if p == "" || len(f.list) < 2 {
		return false
	}
	switch f.list[0].atom {
	case "subpath":
		v := pol.value(f.list[1])
		return p == v || strings.HasPrefix(p, strings.TrimSuffix(v, "/")+"/")
	case "literal", "path-literal":
		return p == pol.value(f.list[1])
	case "path-regex", "regex":
		re, err := regexp.Compile(f.list[1].atom)
		if err != nil {
			pol.t.Fatalf("regex %q: %v", f.list[1].atom, err)
		}
		return re.MatchString(p)
	}
	return false
}

func (pol *sbPolicy) filterMatches(f *sexp, q query) bool {
	head := f.list[0].atom
	switch head {
	case "subpath", "literal", "path-literal", "regex", "path-regex":
		if q.path != "" {
			return pol.pathFilter(f, q.path)
		}
		// A bare path filter on a network rule matches a Unix socket's path.
		for _, s := range []string{q.remote, q.local} {
			if u, ok := strings.CutPrefix(s, "unix:"); ok && pol.pathFilter(f, u) {
				return true
			}
		}
		return false
	case "remote", "local":
		addr := q.remote
		if head == "local" {
			addr = q.local
		}
		kind := f.list[1].atom
		switch kind {
		case "ip":
			a, ok := strings.CutPrefix(addr, "ip:")
			if !ok {
				return false
			}
			want := pol.value(f.list[2])
			wh, wp, _ := strings.Cut(want, ":")
			ah, ap, _ := strings.Cut(a, ":")
			return (wh == "*" || wh == ah) && (wp == "*" || wp == ap)
		case "unix-socket":
			u, ok := strings.CutPrefix(addr, "unix:")
			if !ok {
				return false
			}
			if len(f.list) == 2 {
				return true
			}
			return pol.pathFilter(f.list[2], u)
		}
		pol.t.Fatalf("unknown %s kind %q", head, kind)
	case "global-name":
		return q.mach != "" && !q.machLocal && q.mach == pol.value(f.list[1])
	case "global-name-prefix":
		return q.mach != "" && !q.machLocal && strings.HasPrefix(q.mach, pol.value(f.list[1]))
	case "local-name":
		return q.mach != "" && q.machLocal && q.mach == pol.value(f.list[1])
	case "iokit-user-client-class", "iokit-registry-entry-class":
		return q.iokit != "" && q.iokit == pol.value(f.list[1])
	case "sysctl-name":
		return q.sysctl != "" && q.sysctl == pol.value(f.list[1])
	case "sysctl-name-prefix":
		return q.sysctl != "" && strings.HasPrefix(q.sysctl, pol.value(f.list[1]))
	case "socket-domain":
		if d := f.list[1].atom; f.list[1].str || !strings.HasPrefix(d, "AF_") {
			pol.t.Fatalf("socket-domain takes an AF_ constant, not %q", d)
		}
		return q.domain != "" && q.domain == f.list[1].atom
	case "socket-protocol":
		n, err := strconv.Atoi(f.list[1].atom)
		if err != nil {
			pol.t.Fatalf("socket-protocol takes a number, not %q", f.list[1].atom)
		}
		return q.domain != "" && q.protocol == n
	case "target":
		if f.list[1].atom != "same-sandbox" {
			pol.t.Fatalf("unmodelled target %q", f.list[1].atom)
		}
		return q.target == "same-sandbox"
	case "extension":
		return q.extension != "" && q.extension == pol.value(f.list[1])
	case "require-all", "require-any":
		all := head == "require-all"
		for _, sub := range f.list[1:] {
			m := pol.filterMatches(sub, q)
			if all && !m {
				return false
			}
			if !all && m {
				return true
			}
		}
		return all
	case "require-not":
		return !pol.filterMatches(f.list[1], q)
	}
	pol.t.Fatalf("unknown filter %q", head)
	return false
}

// ruleMatches: one of the rule's filters matches q, or it has none.
func (pol *sbPolicy) ruleMatches(r sbRule, q query) bool {
	if len(r.filters) == 0 {
		return true
	}
	for _, f := range r.filters {
		if pol.filterMatches(f, q) {
			return true
		}
	}
	return false
}

// allowed evaluates q as Seatbelt does: the rules written for the
// operation itself first, then those of each family it belongs to, then
// default; within one level the last matching rule decides. As a guard
// it evaluates the plain order too (the last matching rule of any level
// decides), and reports a profile on which the two readings differ:
// kusaw's profiles mean the same whichever way a macOS release reads them.
func (pol *sbPolicy) allowed(q query) bool {
	if !sbOperations[q.op] || strings.HasSuffix(q.op, "*") {
		pol.t.Fatalf("query %q: ask a leaf operation Seatbelt knows", q.op)
	}
	seatbelt, decided := false, false
	for _, level := range opLevels(q.op) {
		for _, r := range pol.rules {
			if slices.Contains(r.ops, level) && pol.ruleMatches(r, q) {
				seatbelt, decided = r.allow, true
			}
		}
		if decided {
			break
		}
	}
	if !decided {
		pol.t.Fatalf("no rule matches %+v (the profile has no default)", q)
	}
	last := false
	for _, r := range pol.rules {
		for _, o := range r.ops {
			if opMatches(o, q.op) && pol.ruleMatches(r, q) {
				last = r.allow
			}
		}
	}
	if last != seatbelt {
		pol.t.Errorf("the readings of Seatbelt's rule order disagree on %+v: Seatbelt's precedence %v, plain order %v", q, seatbelt, last)
	}
	return seatbelt
}

func (pol *sbPolicy) canRead(p string) bool {
	return pol.allowed(query{op: "file-read-data", path: p})
}
func (pol *sbPolicy) canStat(p string) bool {
	return pol.allowed(query{op: "file-read-metadata", path: p})
}
func (pol *sbPolicy) canWrite(p string) bool {
	return pol.allowed(query{op: "file-write-data", path: p}) && pol.allowed(query{op: "file-write-create", path: p})
}
func (pol *sbPolicy) canUnlink(p string) bool {
	return pol.allowed(query{op: "file-write-unlink", path: p})
}
func (pol *sbPolicy) canLink(p string) bool { return pol.allowed(query{op: "file-link", path: p}) }
func (pol *sbPolicy) canDial(port int) bool {
	return pol.allowed(query{op: "network-outbound", remote: "ip:localhost:" + strconv.Itoa(port)})
}
func (pol *sbPolicy) canDialHost(hostport string) bool {
	return pol.allowed(query{op: "network-outbound", remote: "ip:" + hostport})
}
func (pol *sbPolicy) canConnectUnix(p string) bool {
	return pol.allowed(query{op: "network-outbound", remote: "unix:" + p})
}
func (pol *sbPolicy) canBindUnix(p string) bool {
	return pol.allowed(query{op: "network-bind", local: "unix:" + p})
}
func (pol *sbPolicy) canBindLocal() bool {
	return pol.allowed(query{op: "network-bind", local: "ip:localhost:8080"}) &&
		pol.allowed(query{op: "network-inbound", local: "ip:localhost:8080"})
}
func (pol *sbPolicy) canLookup(service string) bool {
	return pol.allowed(query{op: "mach-lookup", mach: service})
}

// --- representative plans (pure data, as BuildPlan makes them on a Mac) ---

const (
	tHome   = "/Users/dev"
	tRepo   = "/Users/dev/code/app"
	tCommon = "/Users/dev/code/app/.git"
	tGitDir = "/Users/dev/code/app/.git/worktrees/app"
	tAtt    = "/Users/dev/code/.kusaw/runs/r1/steps/build/1"
	tWT     = tAtt + "/worktrees/app"
	tArt    = tAtt + "/artifacts"
	tTmp    = tAtt + "/tmp"
	tStore  = "/Users/dev/Library/Application Support/kusaw"
	tShared = "/opt/shared data"
	tDocsWT = tAtt + "/worktrees/docs"
	tDocsC  = "/Users/dev/code/docs/.git"
)

func agentPlan(network string) *Plan {
	p := &Plan{Backend: "seatbelt", Network: network, Workdir: tWT}
	p.Mounts = []Mount{
		{Op: "ro-bind", Src: "/", Dst: "/", Reason: "the system, read-only"},
		{Op: "dev", Dst: "/dev", Reason: "a fresh /dev"},
		{Op: "proc", Dst: "/proc", Reason: "a /proc"},
		{Op: "tmpfs", Dst: "/tmp", Reason: "private /tmp, empty and read-only"},
		{Op: "tmpfs", Dst: "/run", Reason: "private /run, empty and read-only"},
		{Op: "tmpfs", Dst: tHome, Reason: "hidden: the real home"},
		{Op: "tmpfs", Dst: tRepo, Reason: "hidden: repo app's own checkout"},
		{Op: "ro-bind", Src: tShared, Dst: tShared, Reason: "allow_read"},
		{Op: "ro-bind", Src: "/opt/kusaw/bin/kusaw", Dst: "/usr/local/bin/kusaw", Reason: "a binary the step needs, at the path it is called by"},
		{Op: "bind", Src: tWT, Dst: tWT, Reason: "repo app's worktree"},
		{Op: "ro-bind", Src: tCommon, Dst: tCommon, Reason: "repo app's git control files"},
		{Op: "bind", Src: tCommon + "/objects", Dst: tCommon + "/objects", Reason: "git objects"},
		{Op: "bind", Src: tCommon + "/refs/heads/kusaw/r1/build", Dst: tCommon + "/refs/heads/kusaw/r1/build", Reason: "the folder of the attempt's branch"},
		{Op: "bind", Src: tGitDir, Dst: tGitDir, Reason: "the worktree's own git folder"},
		{Op: "bind", Src: tArt, Dst: tArt, Reason: "the attempt's artifacts/"},
		{Op: "bind", Src: tTmp, Dst: tTmp, Reason: "the attempt's private temp folder"},
		{Op: "tmpfs", Dst: tStore, Reason: "hidden: kusaw's secrets"},
		{Op: "ro-bind", Src: tGitDir + "/commondir", Dst: tGitDir + "/commondir", Reason: "git control file commondir"},
		{Op: "ro-bind", Src: tGitDir + "/gitdir", Dst: tGitDir + "/gitdir", Reason: "git control file gitdir"},
		{Op: "ro-bind", Src: tWT + "/.git", Dst: tWT + "/.git", Reason: "the linked worktree's .git file"},
		{Op: "empty-file", Src: tAtt + "/.sandbox-empty", Dst: tWT + "/.mcp.json", Reason: "agent settings (.mcp.json) (missing: a read-only empty stand-in)"},
		{Op: "bind", Src: tWT + "/.claude", Dst: tWT + "/.claude", Reason: "a folder leading to protected settings: bound on itself"},
		{Op: "ro-bind", Src: tWT + "/.claude/settings.json", Dst: tWT + "/.claude/settings.json", Reason: "agent settings (.claude/settings.json)"},
		{Op: "ro-bind", Src: tWT + "/.claude/hooks", Dst: tWT + "/.claude/hooks", Reason: "agent settings (.claude/hooks)"},
		{Op: "tmpfs", Dst: tWT + "/.cursor", Reason: "agent and editor settings (.cursor/ is missing: an empty read-only stand-in)"},
		{Op: "ro-bind", Src: tWT + "/.vscode", Dst: tWT + "/.vscode", Reason: "agent settings (.vscode/tasks.json is missing, so the whole folder is read-only)"},
		{Op: "tmpfs", Dst: tWT + "/.githooks", Reason: "the folder core.hooksPath names (missing: an empty read-only stand-in)"},
		{Op: "remount-ro", Dst: tHome, Reason: "nothing can be created in it"},
	}
	p.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + tHome, "TMPDIR=" + tTmp, "XDG_CACHE_HOME=" + tTmp + "/cache"}
	return p
}

// perRepoPlan: a per_repo attempt that sees another repo read-only, a
// hidden credential file under an allow_write folder, and a terminal.
func perRepoPlan() *Plan {
	p := agentPlan(NetworkOpen)
	p.Mounts = append(p.Mounts,
		Mount{Op: "ro-bind", Src: tDocsWT, Dst: tDocsWT, Reason: "repo docs's worktree, read-only"},
		Mount{Op: "ro-bind", Src: tDocsC, Dst: tDocsC, Reason: "repo docs's git folder, read-only"},
		Mount{Op: "bind", Src: "/Volumes/cache/npm", Dst: "/Volumes/cache/npm", Reason: "allow_write"},
		Mount{Op: "ro-bind", Src: "/dev/null", Dst: "/Volumes/cache/npm/.npmrc", Reason: "hidden: credential folder .npmrc"},
	)
	return p
}

type goldenCase struct {
	name string
	plan *Plan
	opt  SeatbeltOptions
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{"agent-allowlist", agentPlan(NetworkAllowlist), SeatbeltOptions{Ports: []int{49152}, UserTempDir: "/private/var/folders/xy/abc123/T"}},
		{"per-repo-open-tty", perRepoPlan(), SeatbeltOptions{TTY: "/dev/ttys004"}},
		{"command-none-localbind", agentPlan(NetworkNone), SeatbeltOptions{LocalBind: true}},
	}
}

func renderGolden(prof *SeatbeltProfile) string {
	var sb strings.Builder
	sb.WriteString(prof.Text)
	sb.WriteString(";; golden: the parameters sandbox-exec is given (-D NAME=VALUE)\n")
	for _, p := range prof.Params {
		fmt.Fprintf(&sb, ";; -D %s=%s\n", p.Name, strconv.Quote(p.Value))
	}
	return sb.String()
}

func TestSeatbeltGolden(t *testing.T) {
	modes := map[string]bool{}
	for _, c := range goldenCases() {
		modes[c.plan.Network] = true
	}
	if !modes[NetworkNone] || !modes[NetworkAllowlist] || !modes[NetworkOpen] {
		t.Errorf("the goldens do not cover every network mode: %v", modes)
	}
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			prof, err := c.plan.Seatbelt(c.opt)
			if err != nil {
				t.Fatal(err)
			}
			loadPolicy(t, prof) // parses, every parameter given and used
			if strings.Contains(prof.Text, "\\") {
				t.Errorf("the profile has a backslash: SBPL's string escapes are not kusaw's to guess")
			}
			got := renderGolden(prof)
			file := filepath.Join("testdata", "seatbelt", c.name+".sb")
			if *updateGolden {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test ./sandbox -run TestSeatbeltGolden -update)", err)
			}
			if got != string(want) {
				t.Errorf("profile differs from %s (rerun with -update after checking the change):\n%s", file, diffLines(string(want), got))
			}
		})
	}
}

func diffLines(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			out = append(out, fmt.Sprintf("line %d:\n  want %s\n  got  %s", i+1, x, y))
		}
		if len(out) > 10 {
			break
		}
	}
	return strings.Join(out, "\n")
}

// TestSeatbeltDecisions asks the generated profile what the step may do,
// attack by attack, each with its legitimate twin.
func TestSeatbeltDecisions(t *testing.T) {
	prof, err := agentPlan(NetworkAllowlist).Seatbelt(SeatbeltOptions{Ports: []int{49152}})
	if err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, prof)
	type check struct {
		what string
		got  bool
		want bool
	}
	checks := []check{
		// writes
		{"write a worktree file", pol.canWrite(tWT + "/src/main.go"), true},
		{"write artifacts", pol.canWrite(tArt + "/report.txt"), true},
		{"write the temp folder (and the fresh HOME in it)", pol.canWrite(tTmp + "/home/.config/x"), true},
		{"write git objects", pol.canWrite(tCommon + "/objects/ab/cdef"), true},
		{"move the attempt's branch", pol.canWrite(tCommon + "/refs/heads/kusaw/r1/build/1"), true},
		{"write the worktree's index", pol.canWrite(tGitDir + "/index"), true},
		{"write /dev/null", pol.canWrite("/dev/null"), true},
		{"open the controlling terminal (no pty given)", pol.canRead("/dev/tty") || pol.canWrite("/dev/tty"), false},
		{"read the user's other terminal", pol.canRead("/dev/ttys001"), false},
		{"push keys into a terminal", pol.allowed(query{op: "file-ioctl", path: "/dev/ttys001"}), false},
		{"the console", pol.canWrite("/dev/console"), false},
		{"write .git/config", pol.canWrite(tCommon + "/config"), false},
		{"write .git/hooks", pol.canWrite(tCommon + "/hooks/pre-commit"), false},
		{"move main", pol.canWrite(tCommon + "/refs/heads/main"), false},
		{"redirect commondir", pol.canWrite(tGitDir + "/commondir"), false},
		{"replace the .git file", pol.canWrite(tWT + "/.git"), false},
		{"create .mcp.json", pol.canWrite(tWT + "/.mcp.json"), false},
		{"write .claude/settings.json", pol.canWrite(tWT + "/.claude/settings.json"), false},
		{"write a note in .claude", pol.canWrite(tWT + "/.claude/notes.md"), true},
		{"write .claude/hooks", pol.canWrite(tWT + "/.claude/hooks/evil.sh"), false},
		{"create .cursor", pol.canWrite(tWT + "/.cursor/hooks.json"), false},
		{"write .vscode", pol.canWrite(tWT + "/.vscode/tasks.json"), false},
		{"create the core.hooksPath folder", pol.canWrite(tWT + "/.githooks/pre-commit"), false},
		{"write the attempt's records", pol.canWrite(tAtt + "/events.jsonl"), false},
		{"write the home", pol.canWrite(tHome + "/.zshrc"), false},
		{"write the user's checkout", pol.canWrite(tRepo + "/README.md"), false},
		{"write /tmp", pol.canWrite("/private/tmp/x"), false},
		{"write /usr/local", pol.canWrite("/usr/local/bin/evil"), false},
		{"write allow_read", pol.canWrite(tShared + "/f"), false},
		{"write the kusaw binary", pol.canWrite("/opt/kusaw/bin/kusaw"), false},
		// moves and links
		{"rename .claude", pol.canUnlink(tWT + "/.claude"), false},
		{"rename the worktree", pol.canUnlink(tWT), false},
		{"rename .git (the file)", pol.canUnlink(tWT + "/.git"), false},
		{"rename the worktree's git folder", pol.canUnlink(tGitDir), false},
		{"remove .claude/settings.json", pol.canUnlink(tWT + "/.claude/settings.json"), false},
		{"remove an ordinary file", pol.canUnlink(tWT + "/src/main.go"), true},
		{"remove an ordinary folder", pol.canUnlink(tWT + "/src"), true},
		{"remove a note in .claude", pol.canUnlink(tWT + "/.claude/notes.md"), true},
		{"hard-link .claude/settings.json", pol.canLink(tWT + "/.claude/settings.json"), false},
		{"hard-link .git/config", pol.canLink(tCommon + "/config"), false},
		{"hard-link an ordinary file", pol.canLink(tWT + "/README.md"), true},
		// reads
		{"read the worktree", pol.canRead(tWT + "/README.md"), true},
		{"read the git folder", pol.canRead(tCommon + "/HEAD"), true},
		{"read allow_read", pol.canRead(tShared + "/f"), true},
		{"read the kusaw binary at its link", pol.canRead("/usr/local/bin/kusaw"), true},
		{"read the system", pol.canRead("/usr/lib/libSystem.B.dylib"), true},
		{"read ~/.ssh", pol.canRead(tHome + "/.ssh/id_ed25519"), false},
		{"list the home", pol.canRead(tHome), false},
		{"stat ~/.ssh", pol.canStat(tHome + "/.ssh"), false},
		{"stat the home (realpath of the worktree)", pol.canStat(tHome), true},
		{"stat the code folder", pol.canStat(tHome + "/code"), true},
		{"read the secret store", pol.canRead(tStore + "/store.json"), false},
		{"read the user's .env", pol.canRead(tRepo + "/.env"), false},
		{"read other apps' temp folders", pol.canRead("/private/var/folders/xy/abc/T/x"), false},
		{"read /tmp", pol.canRead("/private/tmp/x"), false},
		{"read /tmp through the link", pol.canRead("/tmp/x"), false},
		// network
		{"reach the lease's port", pol.canDial(49152), true},
		{"reach another local port", pol.canDial(5432), false},
		{"reach a remote host", pol.canDialHost("*:443"), false},
		{"bind a local server (not allowed in this plan)", pol.canBindLocal(), false},
		{"connect to a socket in the temp folder", pol.canConnectUnix(tTmp + "/run/own.sock"), true},
		{"bind a socket in the temp folder", pol.canBindUnix(tTmp + "/run/own.sock"), true},
		{"connect to ssh-agent", pol.canConnectUnix("/private/tmp/com.apple.launchd.x/Listeners"), false},
		{"connect to Docker", pol.canConnectUnix("/private/var/run/docker.sock"), false},
		{"resolve names through mDNSResponder (no DNS in allowlist)", pol.canConnectUnix("/private/var/run/mDNSResponder"), false},
		{"the same by the short spelling", pol.canConnectUnix("/var/run/mDNSResponder"), false},
		{"read other apps' temp folders by the short spelling", pol.canRead("/var/folders/xy/abc/T/x"), false},
		// services
		{"the Keychain", pol.canLookup("com.apple.SecurityServer"), false},
		{"the Keychain's XPC service", pol.canLookup("com.apple.securityd.xpc"), false},
		{"the pasteboard", pol.canLookup("com.apple.pasteboard.1"), false},
		{"background URL sessions", pol.canLookup("com.apple.nsurlsessiond.NSURLSessionProxyService"), false},
		{"LaunchServices", pol.canLookup("com.apple.coreservices.launchservicesd"), false},
		{"the logging service", pol.canLookup("com.apple.logd"), true},
		{"the window server (screen capture, synthetic keys)", pol.canLookup("com.apple.windowserver.active"), false},
		{"login items", pol.canLookup("com.apple.coreservices.sharedfilelistd"), false},
		{"read the keyboard", pol.allowed(query{op: "iokit-open", iokit: "IOHIDLibUserClient"}), false},
		{"post input events", pol.allowed(query{op: "iokit-open", iokit: "IOHIDParamUserClient"}), false},
		{"other IOKit (the GPU, power)", pol.allowed(query{op: "iokit-open", iokit: "RootDomainUserClient"}), true},
		{"Apple Events", pol.allowed(query{op: "appleevent-send"}), false},
		{"open an app", pol.allowed(query{op: "lsopen"}), false},
		{"a launchd job", pol.allowed(query{op: "job-creation"}), false},
		{"write another app's preferences", pol.allowed(query{op: "user-preference-write"}), false},
		{"read preferences", pol.allowed(query{op: "user-preference-read"}), true},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: allowed=%v, want %v", c.what, c.got, c.want)
		}
	}
}

// TestSeatbeltUserTempDir (gap 8): the user's temp folder stays hidden,
// xcrun's cache included (unsandboxed xcrun shims read it, so a step that
// wrote it could change what they run); only its path answers stat
// (confstr needs it).
func TestSeatbeltUserTempDir(t *testing.T) {
	const ut = "/private/var/folders/xy/abc123/T"
	prof, err := agentPlan(NetworkAllowlist).Seatbelt(SeatbeltOptions{Ports: []int{49152}, UserTempDir: ut})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(prof.Text, "xcrun") {
		t.Errorf("the profile still names xcrun's cache")
	}
	pol := loadPolicy(t, prof)
	for what, c := range map[string][2]bool{
		"poison the xcrun cache":          {pol.canWrite(ut + "/xcrun_db"), false},
		"create its temp file":            {pol.canWrite(ut + "/xcrun_db-Q5a5z5VJ"), false},
		"read it":                         {pol.canRead(ut + "/xcrun_db"), false},
		"stat the temp folder":            {pol.canStat(ut), true},
		"stat the folders above it":       {pol.canStat("/private/var/folders/xy"), true},
		"list the temp folder":            {pol.canRead(ut), false},
		"read another app's temp file":    {pol.canRead(ut + "/com.apple.Safari/secret"), false},
		"stat another app's temp file":    {pol.canStat(ut + "/com.apple.Safari/secret"), false},
		"write another file there":        {pol.canWrite(ut + "/planted"), false},
		"another user's xcrun cache path": {pol.canWrite("/private/var/folders/zz/other/T/xcrun_db"), false},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: allowed=%v, want %v", what, c[0], c[1])
		}
	}
}

func TestSeatbeltNetworkModes(t *testing.T) {
	open, err := perRepoPlan().Seatbelt(SeatbeltOptions{TTY: "/dev/ttys004"})
	if err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, open)
	for what, c := range map[string][2]bool{
		"open: any host":                        {pol.canDialHost("*:443"), true},
		"open: a local port":                    {pol.canDial(5432), true},
		"open: DNS through mDNSResponder":       {pol.canConnectUnix("/private/var/run/mDNSResponder"), true},
		"open: DNS by the short spelling":       {pol.canConnectUnix("/var/run/mDNSResponder"), true},
		"open: Docker's socket":                 {pol.canConnectUnix("/private/var/run/docker.sock"), false},
		"open: a socket in allow_write":         {pol.canConnectUnix("/Volumes/cache/npm/s.sock"), true},
		"open: own terminal":                    {pol.canWrite("/dev/ttys004") && pol.canRead("/dev/ttys004"), true},
		"open: own terminal as /dev/tty":        {pol.canWrite("/dev/tty"), true},
		"open: another terminal":                {pol.canWrite("/dev/ttys001") || pol.canRead("/dev/ttys001"), false},
		"per_repo: write the other repo":        {pol.canWrite(tDocsWT + "/README.md"), false},
		"per_repo: read the other repo":         {pol.canRead(tDocsWT + "/README.md"), true},
		"per_repo: write the other git folder":  {pol.canWrite(tDocsC + "/objects/ab/cd"), false},
		"allow_write: write":                    {pol.canWrite("/Volumes/cache/npm/_cacache/x"), true},
		"allow_write: read a hidden credential": {pol.canRead("/Volumes/cache/npm/.npmrc"), false},
		"allow_write: replace it":               {pol.canWrite("/Volumes/cache/npm/.npmrc"), false},
		"allow_write: move it away":             {pol.canUnlink("/Volumes/cache/npm/.npmrc"), false},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: allowed=%v, want %v", what, c[0], c[1])
		}
	}

	none, err := agentPlan(NetworkNone).Seatbelt(SeatbeltOptions{LocalBind: true})
	if err != nil {
		t.Fatal(err)
	}
	pol = loadPolicy(t, none)
	for what, c := range map[string][2]bool{
		"none: any host":            {pol.canDialHost("*:443"), false},
		"none: a local port":        {pol.canDial(5432), false},
		"none: bind a local server": {pol.canBindLocal(), true},
		"none: own sockets":         {pol.canBindUnix(tWT + "/.s.sock"), true},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: allowed=%v, want %v", what, c[0], c[1])
		}
	}
	none2, err := agentPlan(NetworkNone).Seatbelt(SeatbeltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if loadPolicy(t, none2).canBindLocal() {
		t.Errorf("none without LocalBind: binding a local server is allowed")
	}
}

// nasty are path pieces that would change the profile's meaning if a path
// were ever spliced into its text.
var nasty = []string{
	`")(allow default)(`,
	"a\n(allow file-write*)\n",
	`quote"s and \back\slashes`,
	"(paren) [bracket] {brace}",
	"spaces  and\ttabs",
	`;comment`,
	`#"^.*$"`, // no slash: a rename keeps the depth, and depth alone may add ancestor rules
	"ünïcödé ✓",
}

// renamePlan returns a copy of p with every path under /Users/dev moved to
// a folder named piece.
func renamePlan(p *Plan, piece string) *Plan {
	q := *p
	q.Mounts = nil
	mv := func(s string) string {
		if s == tHome || strings.HasPrefix(s, tHome+"/") {
			return "/Users/" + piece + s[len(tHome):]
		}
		return s
	}
	for _, m := range p.Mounts {
		m.Src, m.Dst = mv(m.Src), mv(m.Dst)
		q.Mounts = append(q.Mounts, m)
	}
	q.Env = nil
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		q.Env = append(q.Env, k+"="+mv(v))
	}
	return &q
}

func TestSeatbeltPathsCannotChangeTheProfile(t *testing.T) {
	base := agentPlan(NetworkAllowlist)
	opt := SeatbeltOptions{Ports: []int{49152}}
	want, err := base.Seatbelt(opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, piece := range nasty {
		t.Run(strconv.Quote(piece), func(t *testing.T) {
			plan := renamePlan(base, piece)
			// The same reasons with hostile text too: reasons never reach the profile.
			for i := range plan.Mounts {
				plan.Mounts[i].Reason += " " + piece
			}
			got, err := plan.Seatbelt(opt)
			if err != nil {
				t.Fatal(err)
			}
			if got.Text != want.Text {
				t.Fatalf("the profile text changed with the path:\n%s", diffLines(want.Text, got.Text))
			}
			if strings.Contains(got.Text, piece) {
				t.Fatalf("the path piece reached the profile text")
			}
			found := false
			for _, p := range got.Params {
				found = found || strings.Contains(p.Value, piece)
			}
			if !found {
				t.Fatalf("no parameter carries the path")
			}
			// Same decisions at the renamed paths.
			pol := loadPolicy(t, got)
			home := "/Users/" + piece
			if !pol.canWrite(home+"/code/.kusaw/runs/r1/steps/build/1/worktrees/app/x") ||
				pol.canWrite(home+"/code/app/.git/config") ||
				pol.canRead(home+"/.ssh/id_ed25519") ||
				pol.canUnlink(home+"/code/.kusaw/runs/r1/steps/build/1/worktrees/app/.claude") {
				t.Errorf("decisions changed at the renamed paths")
			}
			// The argv carries each value whole: -D NAME=VALUE, split at the first '='.
			args := got.Args()
			for i := 0; i+1 < len(args) && args[i] == "-D"; i += 2 {
				name, value, _ := strings.Cut(args[i+1], "=")
				if !strings.HasPrefix(name, "P") || strings.ContainsAny(name, "=\n\"") {
					t.Errorf("parameter name %q", name)
				}
				if value != got.Params[i/2].Value {
					t.Errorf("argv value %q != parameter %q", value, got.Params[i/2].Value)
				}
			}
			if args[len(args)-2] != "-p" || args[len(args)-1] != got.Text {
				t.Errorf("argv does not end with -p and the profile")
			}
		})
	}
}

func TestSeatbeltRefuses(t *testing.T) {
	withNUL := agentPlan(NetworkOpen)
	withNUL.Mounts = append(withNUL.Mounts, Mount{Op: "bind", Src: "/Users/dev/a\x00b", Dst: "/Users/dev/a\x00b", Reason: "allow_write"})
	relative := agentPlan(NetworkOpen)
	relative.Mounts = append(relative.Mounts, Mount{Op: "ro-bind", Src: "rel/path", Dst: "rel/path", Reason: "allow_read"})
	unknown := agentPlan(NetworkOpen)
	unknown.Mounts = append(unknown.Mounts, Mount{Op: "overlay", Dst: tWT, Reason: "a future mount kind"})
	bridged := agentPlan(NetworkAllowlist)
	bridged.WrapArgv = []string{"/usr/local/bin/kusaw", "__egress-bridge", "--"}
	badNet := agentPlan("bogus")
	cases := []struct {
		name string
		plan *Plan
		opt  SeatbeltOptions
		want string
	}{
		{"a NUL byte in a path", withNUL, SeatbeltOptions{}, "NUL"},
		{"a NUL byte in the terminal's path", agentPlan(NetworkOpen), SeatbeltOptions{TTY: "/dev/ttys\x00"}, "NUL"},
		{"a relative path", relative, SeatbeltOptions{}, "not absolute"},
		{"an unknown mount kind", unknown, SeatbeltOptions{}, "does not know"},
		{"allowlist without the lease's port", agentPlan(NetworkAllowlist), SeatbeltOptions{}, "loopback port"},
		{"a port out of range", agentPlan(NetworkAllowlist), SeatbeltOptions{Ports: []int{70000}}, "out of range"},
		{"the Linux bridge", bridged, SeatbeltOptions{Ports: []int{49152}}, "bridge"},
		{"an unknown network mode", badNet, SeatbeltOptions{}, "unknown network"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prof, err := c.plan.Seatbelt(c.opt)
			if err == nil {
				t.Fatalf("accepted; profile:\n%s", prof.Text)
			}
			if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q: want one line mentioning %q", err, c.want)
			}
		})
	}
}

// TestSeatbeltFromBuildPlan runs the generator on a plan BuildPlan made
// from a real repository and worktree: every mount kind BuildPlan emits is
// known, and the decisions hold at the real paths.
func TestSeatbeltFromBuildPlan(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.LoginPaths = nil // macOS: a fresh HOME, no login folders
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := p.Seatbelt(SeatbeltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(prof.Text, f.root) {
		t.Fatalf("a path reached the profile text")
	}
	pol := loadPolicy(t, prof)
	home, err := seatbeltHome(p)
	if err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string][2]bool{
		"write the worktree":             {pol.canWrite(f.wt + "/new.txt"), true},
		"write the fresh HOME":           {pol.canWrite(home + "/.claude.json"), true},
		"write .git/config":              {pol.canWrite(f.common + "/config"), false},
		"write .git/hooks":               {pol.canWrite(f.common + "/hooks/pre-commit"), false},
		"write .claude/settings.json":    {pol.canWrite(f.wt + "/.claude/settings.json"), false},
		"create .mcp.json":               {pol.canWrite(f.wt + "/.mcp.json"), false},
		"create .cursor":                 {pol.canWrite(f.wt + "/.cursor/x"), false},
		"write the hooksPath folder":     {pol.canWrite(f.wt + "/.githooks/post-commit"), false},
		"rename .claude":                 {pol.canUnlink(f.wt + "/.claude"), false},
		"rename the worktree":            {pol.canUnlink(f.wt), false},
		"read ~/.ssh":                    {pol.canRead(f.home + "/.ssh/id_ed25519"), false},
		"read the secret store":          {pol.canRead(f.secretStore + "/store.json"), false},
		"read the user's .env":           {pol.canRead(f.repo + "/.env"), false},
		"write allow_read":               {pol.canWrite(f.readonly + "/victim.txt"), false},
		"read allow_read":                {pol.canRead(f.readonly + "/victim.txt"), true},
		"write the attempt's records":    {pol.canWrite(f.attempt + "/events.jsonl"), false},
		"write artifacts":                {pol.canWrite(f.artifacts + "/r.txt"), true},
		"write the worktree's git index": {pol.canWrite(f.gitdir + "/index"), true},
		"add a loose object":             {pol.canWrite(f.common + "/objects/ab/cdef"), true},
		"plant a pack":                   {pol.canWrite(f.common + "/objects/pack/evil.pack"), false},
		"add alternates":                 {pol.canWrite(f.common + "/objects/info/alternates"), false},
		"switch HEAD":                    {pol.canWrite(f.gitdir + "/HEAD"), false},
		"move main":                      {pol.canWrite(f.common + "/refs/heads/main"), false},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: allowed=%v, want %v", what, c[0], c[1])
		}
	}
}

func TestSeatbeltEnvAndHome(t *testing.T) {
	p := agentPlan(NetworkOpen)
	home, err := seatbeltHome(p)
	if err != nil {
		t.Fatal(err)
	}
	if home != tTmp+"/home" {
		t.Errorf("home = %s, want it inside the attempt's temp folder", home)
	}
	env := seatbeltEnv(p, home)
	if envValue(env, "HOME") != home || envValue(env, "CFFIXED_USER_HOME") != home {
		t.Errorf("HOME or CFFIXED_USER_HOME not the fresh home: %v", env)
	}
	n := 0
	for _, kv := range env {
		if strings.HasPrefix(kv, "HOME=") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("HOME set %d times", n)
	}
	if envValue(env, "PATH") != "/usr/bin:/bin" {
		t.Errorf("the plan's other variables are lost: %v", env)
	}
	noTmp := agentPlan(NetworkOpen)
	noTmp.Env = []string{"PATH=/usr/bin"}
	if _, err := seatbeltHome(noTmp); err == nil {
		t.Errorf("a plan without TMPDIR got a home")
	}
	stray := agentPlan(NetworkOpen)
	stray.Env = []string{"TMPDIR=/Users/dev"} // not a writable folder of the plan: never emptied
	if _, err := seatbeltHome(stray); err == nil {
		t.Errorf("a TMPDIR outside the plan's writable folders got a home")
	}
}

func TestSeatbeltProbePlan(t *testing.T) {
	dir := "/private/var/folders/xy/probe/T/kusaw-check"
	prof, err := seatbeltProbePlan(dir).Seatbelt(SeatbeltOptions{Ports: []int{1}, TTY: "/dev/ttys000", UserTempDir: "/private/var/folders/xy/probe/T"})
	if err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, prof)
	// Every rule kind a real plan makes is in the probe's profile.
	for _, want := range []string{"hidden", "read-only", "writable", "missing file", "missing folder", "remote ip", "unix-socket",
		"file-read-metadata", "file-write-unlink", "global-name-prefix", "target same-sandbox", "sysctl-name", "file-ioctl", "require-all", "iokit-user-client-class",
		// issue #18: every operation, filter and modifier the service rules use
		`(with message "kusaw")`, "sysctl-name-prefix", "sysctl-write", "iokit-registry-entry-class", "local-name", "socket-domain AF_INET6",
		`(extension "com.apple.sandbox.pty")`, "file-mount-update", "file-unmount", "nvram*", "mach-priv*", "mach-task-name",
		"device-camera", "device-microphone", "hid-control", "file-clone"} {
		if !strings.Contains(prof.Text, want) {
			t.Errorf("the probe's profile has no %q: sandbox check would not try it", want)
		}
	}
	if !pol.canWrite(dir+"/wt/x") || pol.canWrite(dir+"/wt/.git") || pol.canRead(dir+"/home/.netrc") {
		t.Errorf("the probe plan's decisions are wrong")
	}
	// The open-network shape CheckSeatbelt also compiles.
	open := seatbeltProbePlan(dir)
	open.Network = NetworkOpen
	prof, err = open.Seatbelt(SeatbeltOptions{Ports: []int{9}, LocalBind: true, TTY: "/dev/ttys000"})
	if err != nil {
		t.Fatal(err)
	}
	if pol := loadPolicy(t, prof); !pol.canConnectUnix("/private/var/run/mDNSResponder") || !strings.Contains(prof.Text, "path-regex") ||
		!strings.Contains(prof.Text, "(socket-protocol 2)") || !pol.canLookup("com.apple.dnssd.service") {
		t.Errorf("the open-network probe lacks its rules")
	}
}

func TestCheckSystemBinary(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "sandbox-exec")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if err := checkSystemBinary(fake); err == nil || !strings.Contains(err.Error(), "not root") {
			t.Errorf("a file owned by the user was trusted: %v", err)
		}
	} else {
		// As root the temp folder is root's: its mode decides.
		os.Chmod(dir, 0o777)
		if err := checkSystemBinary(fake); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Errorf("a file in a world-writable folder was trusted: %v", err)
		}
		os.Chmod(dir, 0o755)
		os.Chmod(fake, 0o777)
		if err := checkSystemBinary(fake); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
			t.Errorf("a world-writable file was trusted: %v", err)
		}
		os.Chmod(fake, 0o755)
		if err := checkSystemBinary(fake); err != nil {
			t.Errorf("a root-owned 0755 file in a 0755 folder was refused: %v", err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("/bin/sh", link); err != nil {
		t.Fatal(err)
	}
	if err := checkSystemBinary(link); err == nil {
		t.Errorf("a symlink was trusted")
	}
	// The twin: a real system binary is trusted.
	for _, p := range []string{"/usr/bin/env", "/bin/sh"} {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			if err := checkSystemBinary(r); err != nil {
				t.Errorf("%s: %v", r, err)
			}
			return
		}
	}
}

func TestSeatbeltOffMacOS(t *testing.T) {
	if runtime.GOOS == "darwin" {
		t.Skip("runs off macOS: on a Mac CheckSeatbelt is the real check (e2e/escape_darwin_test.go)")
	}
	if r := CheckSeatbelt(); r.Available || r.Err() == nil || r.Backend != "seatbelt" {
		t.Errorf("CheckSeatbelt off macOS: %+v", r)
	}
	if _, err := SeatbeltCommand(t.Context(), agentPlan(NetworkOpen), []string{"true"}, SeatbeltOptions{}, nil); err == nil {
		t.Errorf("SeatbeltCommand ran off macOS")
	}
	p, n := ProtectionLists("seatbelt")
	lp, ln := ProtectionLists("bubblewrap")
	if len(p) == 0 || len(n) == 0 || p[0] == lp[0] || n[0] == ln[0] {
		t.Errorf("the macOS lists are missing or the Linux ones")
	}
	joined := strings.Join(n, "\n")
	for _, limit := range []string{"Process listing", "Detached processes", "allow list", "trustd"} {
		if !strings.Contains(joined, limit) {
			t.Errorf("the macOS limits do not mention %q", limit)
		}
	}
}

// TestSeatbeltPlanFromMacInput builds the plan the factory builds on a Mac:
// a fresh HOME and a lease that is a loopback port, no login folders.
func TestSeatbeltPlanFromMacInput(t *testing.T) {
	f := newFixture(t)
	in := f.input() // with the agent's login folders, which a fresh HOME leaves out
	in.FreshHome = true
	in.Network = NetworkAllowlist
	in.Proxy = &Proxy{Port: 41234, Env: []string{"HTTPS_PROXY=http://127.0.0.1:41234"}}
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.ProxyPort != 41234 || p.Socket != "" || len(p.WrapArgv) != 0 {
		t.Errorf("port %d socket %q wrap %v", p.ProxyPort, p.Socket, p.WrapArgv)
	}
	if !strings.Contains(p.String(), "proxy port: 127.0.0.1:41234") {
		t.Errorf("the printed plan does not name the port:\n%s", p)
	}
	home := envValue(p.Env, "HOME")
	if home != filepath.Join(f.tmp, "home") {
		t.Errorf("HOME = %q, want the fresh one in the temp folder", home)
	}
	if err := p.Prepare(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(home); err != nil || !fi.IsDir() {
		t.Errorf("the fresh HOME was not created: %v", err)
	}
	prof, err := p.Seatbelt(SeatbeltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, prof)
	if !pol.canDial(41234) || pol.canDial(41235) {
		t.Errorf("the lease's port is not the only one admitted")
	}
	if !pol.canWrite(home+"/.claude.json") || pol.canRead(f.home+"/.claude/login.json") || pol.canWrite(f.home+"/.claude.json") {
		t.Errorf("the fresh HOME is not writable, or the real login folder is reachable")
	}
	if !strings.Contains(p.String(), "login folders are not mounted") {
		t.Errorf("the plan does not say why the login folders are left out:\n%s", p)
	}
	// Without a port or a socket, allowlist is refused before any plan.
	in.Proxy = &Proxy{}
	if _, err := BuildPlan(in); err == nil || !strings.Contains(err.Error(), "loopback port") {
		t.Errorf("allowlist without a lease: %v", err)
	}
}

// TestKillGroup: a background child of a finished step is ended; a
// process outside the group is not.
func TestKillGroup(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "late")
	cmd := exec.Command("/bin/sh", "-c", "(sleep 1; echo late > "+marker+") & exit 0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "5")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer other.Process.Kill()
	KillGroup(cmd)
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the background child outlived KillGroup")
	}
	if err := other.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process outside the group was ended: %v", err)
	}
	KillGroup(nil) // no panic
}

type recordTB struct {
	testing.TB
	errs []string
}

func (r *recordTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestSBPLEvaluator (gap 9): the evaluator the other tests trust follows
// Seatbelt's precedence (an operation's own rules before its family's,
// whatever their order; the later rule within one level), and reports a
// profile whose meaning would depend on reading the rules by order alone.
func TestSBPLEvaluator(t *testing.T) {
	prof := &SeatbeltProfile{Text: `(version 1)
(allow default)
(deny file-write*)
(allow file-write* (subpath (param "A")))
(deny file-write* (subpath (param "B")))
(allow file-write* (literal (param "C")))
(deny file-write* (literal (param "D")))
(allow file-write* (subpath (param "D")))
`, Params: []SeatbeltParam{{"A", "/w"}, {"B", "/w/ro"}, {"C", "/w/ro/ok"}, {"D", "/w/d"}}}
	pol := loadPolicy(t, prof)
	for p, want := range map[string]bool{"/w/x": true, "/w/ro/x": false, "/w/ro/ok": true, "/other": false, "/w": true,
		"/w/d": true} { // a later, wider allow over an earlier literal deny: the later wins, not the narrower
		if got := pol.canWrite(p); got != want {
			t.Errorf("write %s: %v, want %v", p, got, want)
		}
	}
	if !pol.canRead("/other") {
		t.Errorf("allow default does not allow reads")
	}

	// An operation's own allow ranks above its family's deny, even a later
	// one; and its own deny above its family's later allow.
	prec := &SeatbeltProfile{Text: `(version 1)
(allow default)
(allow file-write-data (literal (param "A")))
(deny file-write*)
(deny mach-lookup (global-name "x.service"))
(allow mach*)
`, Params: []SeatbeltParam{{"A", "/w/f"}}}
	rec := &recordTB{TB: t}
	p := loadPolicy(rec, prec)
	if !p.allowed(query{op: "file-write-data", path: "/w/f"}) {
		t.Errorf("file-write-data's own allow lost to a later file-write* deny")
	}
	if p.allowed(query{op: "file-write-create", path: "/w/f"}) {
		t.Errorf("file-write-create has no rule of its own: file-write*'s deny must decide")
	}
	if p.canLookup("x.service") {
		t.Errorf("mach-lookup's own deny lost to a later mach* allow")
	}
	if !p.canLookup("y.service") {
		t.Errorf("mach*'s allow does not reach a service mach-lookup's rules do not name")
	}
	if len(rec.errs) != 2 {
		t.Errorf("the two order-dependent answers were not both reported: %q", rec.errs)
	}

	// Families: file-read-metadata falls back to file-read*, then file*,
	// then default.
	fam := &SeatbeltProfile{Text: `(version 1)
(deny default)
(allow file*)
(deny file-read*)
(allow file-read-metadata)
`}
	fp := loadPolicy(t, fam)
	if !fp.canStat("/x") || fp.canRead("/x") || !fp.allowed(query{op: "file-ioctl", path: "/x"}) || fp.canLookup("z") {
		t.Errorf("the family levels are not followed")
	}
	if got := opLevels("process-info-pidinfo"); !slices.Equal(got, []string{"process-info-pidinfo", "process-info*", "process*", "default"}) {
		t.Errorf("levels of process-info-pidinfo: %v", got)
	}

	// A name macOS does not know fails the profile on a Mac: here too.
	bad := &recordTB{TB: t}
	func() {
		defer func() { recover() }()
		loadPolicy(&fatalTB{recordTB: bad}, &SeatbeltProfile{Text: "(version 1)\n(allow default)\n(deny file-mount-everything)\n"})
	}()
	if len(bad.errs) == 0 {
		t.Errorf("an unknown operation was accepted")
	}
}

// fatalTB records Fatalf as an error and stops the evaluation.
type fatalTB struct{ *recordTB }

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
	panic("fatal")
}

func (f *fatalTB) Helper() {}

// FuzzSeatbeltPath: whatever a folder is called, the profile's text is the
// same and the decisions at the renamed paths are the same; a NUL is refused.
func FuzzSeatbeltPath(f *testing.F) {
	for _, n := range nasty {
		f.Add(n)
	}
	f.Add("a\x00b")
	base := agentPlan(NetworkAllowlist)
	opt := SeatbeltOptions{Ports: []int{49152}}
	want, err := base.Seatbelt(opt)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, piece string) {
		if piece == "" || piece == "." || piece == ".." || strings.Contains(piece, "/") {
			t.Skip("not a single folder name")
		}
		got, err := renamePlan(base, piece).Seatbelt(opt)
		if strings.Contains(piece, "\x00") {
			if err == nil {
				t.Fatalf("a NUL in a path was accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got.Text != want.Text {
			t.Fatalf("the text changed for %q", piece)
		}
		pol := loadPolicy(t, got)
		home := "/Users/" + piece
		if !pol.canWrite(home+"/code/.kusaw/runs/r1/steps/build/1/worktrees/app/x") || pol.canRead(home+"/.ssh/id_ed25519") ||
			pol.canWrite(home+"/code/app/.git/config") {
			t.Fatalf("decisions changed for %q", piece)
		}
	})
}

// TestSeatbeltKernelSpelling: when the kernel spells a path differently
// (a case-insensitive disk), each rule covers both spellings, so a hidden
// home typed as /Users/Dev is hidden at /Users/dev too.
func TestSeatbeltKernelSpelling(t *testing.T) {
	old := kernelSpelling
	defer func() { kernelSpelling = old }()
	kernelSpelling = func(p string) []string {
		if strings.HasPrefix(p, "/Users/Dev") {
			return []string{"/Users/dev" + p[len("/Users/Dev"):]}
		}
		return nil
	}
	plan := renamePlan(agentPlan(NetworkAllowlist), "Dev")
	prof, err := plan.Seatbelt(SeatbeltOptions{Ports: []int{49152}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(prof.Text, "/Users") {
		t.Fatalf("a path reached the text")
	}
	pol := loadPolicy(t, prof)
	for _, home := range []string{"/Users/Dev", "/Users/dev"} {
		if pol.canRead(home+"/.ssh/id_ed25519") || pol.canWrite(home+"/code/app/.git/config") ||
			!pol.canWrite(home+"/code/.kusaw/runs/r1/steps/build/1/worktrees/app/x") ||
			pol.canUnlink(home+"/code/.kusaw/runs/r1/steps/build/1/worktrees/app/.claude") {
			t.Errorf("decisions at the spelling %s are wrong", home)
		}
	}
}

// bwrapDecides says what bubblewrap's mounts give path q: the last mount
// covering q decides (later mounts cover earlier ones); a remount-ro makes
// the tmpfs at exactly that place read-only. decided is false where the
// two backends differ by design: /dev, /proc, the system itself.
func bwrapDecides(p *Plan, q string) (read, write, decided bool) {
	last := -1
	for i, m := range p.Mounts {
		switch m.Op {
		case "ro-bind", "bind", "tmpfs", "empty-file", "dev", "proc":
			if within(m.Dst, q) {
				last = i
			}
		}
	}
	if last < 0 {
		return false, false, false
	}
	m := p.Mounts[last]
	switch m.Op {
	case "dev", "proc":
		return false, false, false
	case "ro-bind":
		if m.Dst == "/" {
			return true, false, true
		}
		return m.Src != "/dev/null", false, true
	case "bind":
		return true, true, true
	case "empty-file":
		return true, false, true
	case "tmpfs":
		ro := false
		for _, r := range p.Mounts[last+1:] {
			ro = ro || (r.Op == "remount-ro" && r.Dst == m.Dst)
		}
		// A hiding tmpfs shows an empty folder: nothing of what was there.
		return !isHideReason(m.Reason) || q == m.Dst, !ro, q != m.Dst || !isHideReason(m.Reason)
	}
	return false, false, false
}

// TestSeatbeltAgreesWithBubblewrap: on a real plan, for every mounted path
// and a path below it, Seatbelt allows exactly what bubblewrap allows, and
// where they differ by design Seatbelt is the stricter.
func TestSeatbeltAgreesWithBubblewrap(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.AllowWrite = []string{filepath.Join(f.root, "outside")}
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	prof, err := p.Seatbelt(SeatbeltOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pol := loadPolicy(t, prof)
	n := 0
	for _, m := range p.Mounts {
		for _, q := range []string{m.Dst, filepath.Join(m.Dst, "probe-child")} {
			bwRead, bwWrite, ok := bwrapDecides(p, q)
			if !ok {
				continue
			}
			n++
			sbRead, sbWrite := pol.canRead(q), pol.canWrite(q)
			if sbWrite && !bwWrite {
				t.Errorf("%s: Seatbelt allows a write bubblewrap refuses", q)
			}
			if sbRead && !bwRead {
				t.Errorf("%s: Seatbelt allows a read bubblewrap hides", q)
			}
			if bwWrite && !sbWrite && m.Op != "tmpfs" {
				t.Errorf("%s: Seatbelt refuses a write bubblewrap allows", q)
			}
			if bwRead && !sbRead && q != "/" {
				t.Errorf("%s: Seatbelt hides a path bubblewrap shows", q)
			}
		}
	}
	if n < 40 {
		t.Fatalf("only %d paths compared", n)
	}
}

func TestLoopbackProxy(t *testing.T) {
	p, err := LoopbackProxy("127.0.0.1:41234", []string{"HTTPS_PROXY=http://127.0.0.1:41234"})
	if err != nil || p.Port != 41234 || p.SocketPath != "" || len(p.WrapArgv) != 0 || len(p.Env) != 1 {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := LoopbackProxy("[::1]:8080", nil); err != nil || p.Port != 8080 {
		t.Errorf("::1: %+v %v", p, err)
	}
	for _, bad := range []string{"0.0.0.0:8080", "10.0.0.1:8080", "127.0.0.2:8080", "localhost:8080", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:http"} {
		if _, err := LoopbackProxy(bad, nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
