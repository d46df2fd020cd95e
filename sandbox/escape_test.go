//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kusaw/kusaw/sandbox/confine"
	"golang.org/x/sys/unix"
)

// The escape suite runs real bwrap on a real repository with a linked
// worktree. Every attack has a legitimate twin that must keep working.

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "__sandbox_helper" {
		os.Exit(helperMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == confine.Subcommand {
		os.Exit(confineMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == confine.LayerSubcommand {
		os.Exit(layerMain(os.Args[2:]))
	}
	// The stage's program: this binary, copied where an unprivileged user
	// can reach it (go test builds in a folder only its user can enter).
	cleanup := confineTestProgram()
	// The walk of /etc is remembered in a folder of the tests' own, not
	// in the user's cache.
	walkCache, err := os.MkdirTemp("", "kusaw-walk-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	WalkCacheFile = filepath.Join(walkCache, "etc-walk")
	code := m.Run()
	cleanup()
	os.RemoveAll(walkCache)
	os.Exit(code)
}

// helperMain runs inside the sandbox (the test binary, bound read-only):
// small probes that a shell cannot do.
func helperMain(args []string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "helper:", err); return 1 }
	switch args[0] {
	case "cachedwalk": // cachedwalk ROOT FILE: whether the remembered walk is used
		if _, ok := cachedWalk(args[1], args[2]); ok {
			fmt.Println("used")
		} else {
			fmt.Println("refused")
		}
		return 0
	case "rememberwalk": // rememberwalk ROOT FILE: walk ROOT and remember it (as a walk started long after its last change)
		os.Remove(args[2])
		w := startRecordedWalk(args[1])
		if w == nil {
			return fail(fmt.Errorf("cannot open %s", args[1]))
		}
		w.help()
		w.result()
		rememberWalk(w, args[2], time.Now().Add(walkRacyFor+time.Second))
		if _, err := os.Stat(args[2]); err != nil {
			return fail(fmt.Errorf("not remembered: %v", err))
		}
		return 0
	case "mountonlink": // mountonlink SRC LINK: mount SRC on the link LINK itself (not its target)
		fd, err := unix.OpenTree(unix.AT_FDCWD, args[1], unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fail(err)
		}
		if err := unix.MoveMount(fd, "", unix.AT_FDCWD, args[2], unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fail(err)
		}
		return 0
	case "walklists": // walklists ROOT FILE: "used" or "refused", then the remembered list and the fresh one
		l, ok := cachedWalk(args[1], args[2])
		if ok {
			fmt.Println("used")
		} else {
			fmt.Println("refused")
		}
		fmt.Println("remembered:", l)
		fmt.Println("fresh:", unreadableBelow(args[1]))
		return 0
	case "setxattr": // setxattr PATH NAME VALUE
		if err := syscall.Setxattr(args[1], args[2], []byte(args[3]), 0); err != nil {
			return fail(err)
		}
		return 0
	case "connect": // connect PATH|@ABSTRACT
		c, err := net.DialTimeout("unix", args[1], time.Second)
		if err != nil {
			return fail(err)
		}
		c.Close()
		return 0
	case "dial": // dial HOST:PORT
		c, err := net.DialTimeout("tcp", args[1], time.Second)
		if err != nil {
			return fail(err)
		}
		c.Close()
		return 0
	case "selfsock": // listen and connect to our own Unix socket
		l, err := net.Listen("unix", args[1])
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.Dial("unix", args[1])
		if err != nil {
			return fail(err)
		}
		c.Close()
		return 0
	case "selftcp": // listen on our own loopback and connect
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return fail(err)
		}
		c.Close()
		return 0
	case "bridge": // bridge SOCKET -- ARGV...: stands in for the egress bridge
		c, err := net.DialTimeout("unix", args[1], time.Second)
		if err != nil {
			return fail(err)
		}
		c.Close()
		rest := args[3:]
		path, err := exec.LookPath(rest[0])
		if err != nil {
			return fail(err)
		}
		return fail(syscall.Exec(path, rest, append(os.Environ(), "BRIDGED=1")))
	case "mountorder": // mountorder PATH...: no read-only mount is covered by a later writable one; each PATH is read-only
		return mountOrder(args[1:])
	case "ptrace": // ptrace PID
		pid, _ := strconv.Atoi(args[1])
		return ptraceAttach(pid)
	case "ptrace-child": // a debugger's own child: PTRACE_TRACEME (attaching is refused by seccomp)
		if err := ptraceOwnChild(); err != nil {
			return fail(err)
		}
		return 0
	case "syscalls", "syscalls-host":
		return filtersHelper(args)
	}
	return fail(fmt.Errorf("unknown helper %q", args[0]))
}

// mountOrder reads the sandbox's own /proc/self/mountinfo (in mount
// order) and fails when a read-only mount point is covered by a later
// writable mount of the same or an enclosing folder, or when a path given
// is not on a read-only mount.
func mountOrder(paths []string) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	type mnt struct {
		point string
		ro    bool
	}
	var ms []mnt
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		point := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(f[4])
		ms = append(ms, mnt{point, slices.Contains(strings.Split(f[5], ","), "ro")})
	}
	bad := 0
	for i, m := range ms {
		if !m.ro {
			continue
		}
		for _, later := range ms[i+1:] {
			if !later.ro && (later.point == m.point || later.point == "/" || strings.HasPrefix(m.point, later.point+"/")) {
				fmt.Printf("read-only %s is covered by the later writable mount %s\n", m.point, later.point)
				bad++
			}
		}
	}
	for _, p := range paths {
		// The mount p is on: the last mount whose point holds it.
		on := mnt{}
		for _, m := range ms {
			if m.point == p || m.point == "/" || strings.HasPrefix(p, m.point+"/") {
				on = m
			}
		}
		if !on.ro {
			fmt.Printf("%s is on the writable mount %s\n", p, on.point)
			bad++
		}
	}
	if bad > 0 {
		return 1
	}
	return 0
}

func ptraceAttach(pid int) int {
	// ptrace requests must come from one thread.
	done := make(chan int)
	go func() {
		runtime.LockOSThread()
		if err := syscall.PtraceAttach(pid); err != nil {
			fmt.Fprintln(os.Stderr, "helper: ptrace:", err)
			done <- 1
			return
		}
		var ws syscall.WaitStatus
		syscall.Wait4(pid, &ws, 0, nil)
		syscall.PtraceDetach(pid)
		done <- 0
	}()
	return <-done
}

// The login folder's CLI, settings and the scripts they name.
const (
	localClaude     = "#!/bin/sh\necho claude-ok\n"
	loginScript     = "#!/bin/sh\necho status\n"
	credentialsJSON = `{"claudeAiOauth":{"accessToken":"old","refreshToken":"r-old","expiresAt":1700000000000,"scopes":["user:inference"],"subscriptionType":"max"}}`
	// refreshedJSON is a refresh of credentialsJSON; swappedJSON another
	// account's login of the same shape.
	refreshedJSON     = `{"claudeAiOauth":{"accessToken":"refreshed","refreshToken":"r-new","expiresAt":1800000000000,"scopes":["user:inference"],"subscriptionType":"max"}}`
	swappedJSON       = `{"claudeAiOauth":{"accessToken":"attacker","refreshToken":"r-attacker","expiresAt":1800000000000,"scopes":["user:inference"],"subscriptionType":"max"}}`
	loginSettingsJSON = `{"hooks":{"PreToolUse":[{"hooks":[{"type":"command","command":"$HOME/.claude/hooks/pre.sh"}]}]},"statusLine":{"type":"command","command":"sh ~/.claude/statusline.sh"},"apiKeyHelper":"~/.claude/scripts/key.sh"}`
)

// suite is one run of the escape cases, as root or as an unprivileged user.
type suite struct {
	f       *fixture
	uid     int
	helper  string
	hostPID int
	vars    map[string]string
	// cleanupWant is the error the next Cleanup must return, or the
	// reason it kept the user's credentials file ("": none).
	cleanupWant string
	// offline: the next step's egress log shows no connection to the
	// token host (else it shows one, as when the step may reach it).
	offline bool
}

const prelude = `
refused() { if "$@" >/dev/null 2>&1; then echo "ESCAPED: $*"; exit 1; fi; }
`

// run executes script under a fresh plan of the fixture; it returns the exit
// code and the combined output.
func (s *suite) run(t *testing.T, edit func(*Input), script string) (int, string) {
	t.Helper()
	in := s.f.input()
	in.ExtraBinaries = []string{s.helper}
	in.AllowRead = append(in.AllowRead, filepath.Join(s.f.home, ".claude", "local"))
	if s.uid != 0 {
		in.Env["HOME_NOTE"] = "unprivileged"
	}
	if edit != nil {
		edit(&in)
	}
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatalf("BuildPlan: %v", err)
	}
	var sb strings.Builder
	sb.WriteString(prelude)
	keys := make([]string, 0, len(s.vars))
	for k := range s.vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&sb, "export %s='%s'\n", k, s.vars[k])
	}
	sb.WriteString(script)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", sb.String()})
	if err != nil {
		t.Fatalf("Command: %v", err)
	}
	if s.uid != os.Geteuid() {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(s.uid), Gid: uint32(s.uid), Groups: []uint32{}}
		chownTree(t, s.f.root, s.uid)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	// The egress log shows the API host, and the token host unless offline.
	p.Reached = reachedHosts("api.anthropic.com", testClaudeRule.Hosts[0])
	if s.offline {
		p.Reached = reachedHosts("api.anthropic.com")
	}
	cerr := p.Cleanup()
	said := ""
	if cerr != nil {
		said = cerr.Error()
	}
	for _, o := range p.Carried {
		if !o.Carried {
			said += "; kept: " + o.Reason
		}
	}
	switch {
	case said != "" && (s.cleanupWant == "" || !strings.Contains(said, s.cleanupWant)):
		t.Errorf("cleanup: %s", said)
	case said == "" && s.cleanupWant != "":
		t.Errorf("cleanup did not refuse what the step left (want %q)", s.cleanupWant)
	}
	for _, st := range p.StandIns {
		if exists(st) {
			t.Errorf("stand-in %s left on disk after the step", st)
		}
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running bwrap: %v\n%s", err, out.String())
		}
		code = ee.ExitCode()
	}
	return code, out.String()
}

func chownTree(t *testing.T, root string, uid int) {
	t.Helper()
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode()&os.ModeSetuid == 0 {
			os.Lchown(p, uid, uid)
		}
		return nil
	})
}

type escapeCase struct {
	name     string
	attack   string                         // must end by exit 42 with every operation refused
	twin     string                         // the legitimate use: must exit 0
	edit     func(*Input)                   // plan changes for both scripts
	check    func(t *testing.T, f *fixture) // host-side check after the attack
	twinHost func(t *testing.T, f *fixture) // host-side check after the twin
	rootOnly string                         // non-empty: skipped for the unprivileged run, with why
	// cleanupErr: the attack's Cleanup must fail with this (what the step
	// left is refused, and said).
	cleanupErr string
	// offline: the attack's egress log shows no connection to the token
	// host (the twin's always does).
	offline bool
}

func unchanged(path, want string) func(*testing.T, *fixture) {
	return func(t *testing.T, f *fixture) {
		b, err := os.ReadFile(strings.NewReplacer("$ROOT", f.root, "$HOSTTMP", f.hostTmp).Replace(path))
		if err != nil || string(b) != want {
			t.Errorf("%s changed on the host: %q %v", path, b, err)
		}
	}
}

func absent(paths ...string) func(*testing.T, *fixture) {
	return func(t *testing.T, f *fixture) {
		for _, p := range paths {
			p = strings.ReplaceAll(p, "$ROOT", f.root)
			if exists(p) {
				t.Errorf("%s exists on the host", p)
			}
		}
	}
}

func present(paths ...string) func(*testing.T, *fixture) {
	return func(t *testing.T, f *fixture) {
		for _, p := range paths {
			p = strings.ReplaceAll(p, "$ROOT", f.root)
			if !exists(p) {
				t.Errorf("%s was not written on the host", p)
			}
		}
	}
}

func escapeCases() []escapeCase {
	netNone := func(in *Input) { in.Network = NetworkNone }
	cs := []escapeCase{
		{name: "write a read-only shared path",
			attack: `refused sh -c "echo x > $SHARED/victim.txt"; exit 42`,
			twin:   `cat $SHARED/victim.txt && echo ok > $WT/new.txt`,
			check:  unchanged("$ROOT/shared/victim.txt", "original\n"), twinHost: present("$ROOT/state/runs/r1/steps/build/1/worktrees/app/new.txt")},
		{name: "write a system folder",
			attack: `refused sh -c "echo x > /etc/kusaw-escape"; refused sh -c "echo x > /usr/kusaw-escape"; exit 42`,
			twin:   `echo ok > $ART/report.txt`,
			check:  absent("/etc/kusaw-escape", "/usr/kusaw-escape"), twinHost: present("$ROOT/state/runs/r1/steps/build/1/artifacts/report.txt")},
		{name: "write outside into the private /tmp",
			attack: `refused mkdir -p $OUTSIDE; refused sh -c "echo x > $OUTSIDE/victim.txt"; refused sh -c "echo y > /tmp/planted"; refused sh -c "echo y > /run/planted"; exit 42`,
			twin:   `echo ok > $TMP/scratch && test "$TMPDIR" = "$TMP"`,
			check:  unchanged("$HOSTTMP/outside/victim.txt", "original\n"), twinHost: present("$ROOT/state/runs/r1/steps/build/1/tmp/scratch")},
		{name: "a private temp folder (sandbox exec) reaches nothing on the host",
			attack: `echo x > $TMPDIR/scratch || exit 1; refused sh -c "echo y > ${TMPDIR%/tmp}/planted"; refused sh -c "echo y > /tmp/planted"; refused sh -c "echo x >> $ATTEMPT/events.jsonl"; exit 42`,
			twin:   `test "$TMPDIR" = /tmp/kusaw-private-escape/tmp && echo ok > $TMPDIR/scratch && echo c > $XDG_CACHE_HOME/c && echo r > $XDG_RUNTIME_DIR/r && test "$(stat -c %a $XDG_RUNTIME_DIR)" = 700`,
			edit: func(in *Input) {
				in.PrivateTmp, in.TmpDir, in.ArtifactsDir, in.LoginPaths = true, "/tmp/kusaw-private-escape/tmp", "", nil
			},
			check:    absent("/tmp/kusaw-private-escape"),
			twinHost: absent("/tmp/kusaw-private-escape", "$ROOT/state/runs/r1/steps/build/1/artifacts/scratch")},
		{name: "fill the machine's memory through the private temp folder",
			attack: `refused dd if=/dev/zero of=$TMPDIR/fill bs=64k count=64 status=none; test "$(stat -c %s $TMPDIR/fill)" -le 1048576 || exit 1; exit 42`,
			twin:   `dd if=/dev/zero of=$TMPDIR/fits bs=64k count=8 status=none && test "$(stat -c %s $TMPDIR/fits)" = 524288`,
			edit: func(in *Input) {
				in.PrivateTmp, in.TmpDir, in.ArtifactsDir, in.PrivateTmpSize, in.LoginPaths = true, "/tmp/kusaw-private-bound/tmp", "", 1<<20, nil
			},
			check: absent("/tmp/kusaw-private-bound")},
		{name: "write the attempt's records",
			attack: `refused sh -c "echo x >> $ATTEMPT/events.jsonl"; refused sh -c "echo x > $ATTEMPT/attempt.json"; exit 42`,
			twin:   `echo ok > $ART/out.txt`,
			check:  unchanged("$ROOT/state/runs/r1/steps/build/1/events.jsonl", "{}\n")},
		{name: "write the real home",
			attack: `refused sh -c "echo evil >> $HOME_/.bashrc"; refused mkdir -p $HOME_/go/pkg; refused sh -c "echo x > $HOME_/.profile"; exit 42`,
			twin:   `echo ok > $HOME_/.claude/new-session.json`,
			check:  unchanged("$ROOT/home/.bashrc", "# rc\n"), twinHost: absent("$ROOT/home/.claude/new-session.json")},
		{name: "plant hooks in the agent's login folder",
			attack: `refused sh -c "echo '{\"hooks\":1}' > $HOME_/.claude/settings.json"; refused sh -c "echo x > $HOME_/.claude/hooks/evil.sh"; refused sh -c "echo x > $HOME_/.claude/commands/evil.md"; refused mv $HOME_/.claude/settings.json $HOME_/.claude/s; refused rm -rf $HOME_/.claude/skills; exit 42`,
			twin:   `mkdir -p $HOME_/.claude/projects && echo s > $HOME_/.claude/projects/session.jsonl && grep -q agent $HOME_/.claude/login.json`,
			check:  unchanged("$ROOT/home/.claude/settings.json", loginSettingsJSON), twinHost: absent("$ROOT/home/.claude/projects/session.jsonl")},
		{name: "carry back a login that is not a credentials file",
			attack: `c=$HOME_/.claude/.credentials.json; rm -f $c && ln -s /etc/passwd $c && exit 42`,
			twin:   `echo '` + refreshedJSON + `' > $HOME_/.claude/.credentials.json`,
			check:  unchanged("$ROOT/home/.claude/.credentials.json", credentialsJSON), cleanupErr: "not a regular file",
			twinHost: func(t *testing.T, f *fixture) {
				b, _ := os.ReadFile(filepath.Join(f.home, ".claude", ".credentials.json"))
				if !strings.Contains(string(b), "refreshed") {
					t.Errorf("the refreshed login was not carried back: %q", b)
				}
				write(t, filepath.Join(f.home, ".claude", ".credentials.json"), credentialsJSON)
			}},
		{name: "empty the user's login through the credentials file carried back",
			attack: `echo '{}' > $HOME_/.claude/.credentials.json; exit 42`,
			twin:   `echo '` + refreshedJSON + `' > $HOME_/.claude/.credentials.json`,
			check:  unchanged("$ROOT/home/.claude/.credentials.json", credentialsJSON), cleanupErr: "removes /claudeAiOauth",
			twinHost: func(t *testing.T, f *fixture) {
				b, _ := os.ReadFile(filepath.Join(f.home, ".claude", ".credentials.json"))
				if !strings.Contains(string(b), "refreshed") {
					t.Errorf("the refreshed login was not carried back: %q", b)
				}
				write(t, filepath.Join(f.home, ".claude", ".credentials.json"), credentialsJSON)
			}},
		{name: "swap the login for another account's without reaching the token host",
			attack:  `echo '` + swappedJSON + `' > $HOME_/.claude/.credentials.json; exit 42`,
			twin:    `echo '` + refreshedJSON + `' > $HOME_/.claude/.credentials.json`,
			offline: true, check: unchanged("$ROOT/home/.claude/.credentials.json", credentialsJSON), cleanupErr: "made no connection to platform.claude.com",
			twinHost: func(t *testing.T, f *fixture) {
				unchanged("$ROOT/home/.claude/.credentials.json", refreshedJSON+"\n")(t, f)
				write(t, filepath.Join(f.home, ".claude", ".credentials.json"), credentialsJSON)
			}},
		{name: "swap the login for another account's of another subscription, the token host reached",
			attack: `echo '` + strings.Replace(swappedJSON, `"max"`, `"pro"`, 1) + `' > $HOME_/.claude/.credentials.json; exit 42`,
			twin:   `grep -q claudeAiOauth $HOME_/.claude/.credentials.json`,
			check:  unchanged("$ROOT/home/.claude/.credentials.json", credentialsJSON), cleanupErr: "changes /claudeAiOauth/subscriptionType"},
		{name: "carry back a script as the credentials file",
			attack:     `printf '#!/bin/sh\nevil\n' > $HOME_/.claude/.credentials.json; exit 42`,
			twin:       `grep -q claudeAiOauth $HOME_/.claude/.credentials.json`,
			check:      unchanged("$ROOT/home/.claude/.credentials.json", credentialsJSON),
			cleanupErr: "not one JSON object"},
		{name: "rewrite the agent CLI installed in its login folder",
			attack: `refused sh -c "echo 'echo PLANTED' >> $HOME_/.claude/local/claude"; refused rm -f $HOME_/.claude/local/claude; refused mv $HOME_/.claude/local $HOME_/.claude/l2; refused rm -rf $HOME_/.claude/local; refused sh -c "echo x > $HOME_/.claude/local/new"; exit 42`,
			twin:   `$HOME_/.claude/local/claude | grep -q claude-ok && echo s > $HOME_/.claude/session.json`,
			check:  unchanged("$ROOT/home/.claude/local/claude", localClaude)},
		{name: "edit or create what the login folder's settings, plugins and memory run",
			attack: `for f in statusline.sh hooks/pre.sh scripts/key.sh plugins/p/plugin.json; do refused sh -c "echo evil >> $HOME_/.claude/$f"; refused rm -f $HOME_/.claude/$f; done; refused sh -c "echo evil > $HOME_/.claude/CLAUDE.md"; refused sh -c "echo evil > $HOME_/.claude/AGENTS.md"; refused mkdir $HOME_/.claude/plugins/new; refused mv $HOME_/.claude/scripts $HOME_/.claude/s2; refused sh -c "echo evil > $HOME_/.claude/commands/x.md"; exit 42`,
			twin:   `sh $HOME_/.claude/statusline.sh | grep -q status && cat $HOME_/.claude/plugins/p/plugin.json >/dev/null && mkdir -p $HOME_/.claude/todos && echo '[]' > $HOME_/.claude/todos/t.json`,
			check: func(t *testing.T, f *fixture) {
				for _, n := range []string{"statusline.sh", "hooks/pre.sh", "scripts/key.sh", "plugins/p/plugin.json"} {
					unchanged("$ROOT/home/.claude/"+n, loginScript)(t, f)
				}
				absent("$ROOT/home/.claude/CLAUDE.md", "$ROOT/home/.claude/AGENTS.md", "$ROOT/home/.claude/plugins/new", "$ROOT/home/.claude/commands")(t, f)
			},
			twinHost: absent("$ROOT/home/.claude/todos")},
		{name: "a read-only path covered by a later writable mount",
			attack: `$H mountorder $HOME_/.claude/local $HOME_/.claude/settings.json $HOME_/.claude/statusline.sh $COMMON || exit 1; exit 42`,
			twin:   `echo x > $HOME_/.claude/session.json && echo y > $WT/y.txt`},
		{name: "reach another factory's serve socket or a Docker-like socket",
			attack: `for s in $OTHERSOCKS; do refused $H connect $s; done; exit 42`,
			twin:   `$H selfsock $TMP/own.sock && $H selfsock $XDG_RUNTIME_DIR/s.sock`},
		{name: "read another repository or a folder outside the view",
			attack: `for r in $OTHERREPOS; do refused cat $r/secret.txt; refused ls $r; done; for d in /srv /opt /mnt /media /run /sys /var/lib /var/run /home; do refused ls -A $d/.; done; refused cat /root/.bashrc; refused ls /root/.claude /root/.ssh; exit 42`,
			twin:   `git --version >/dev/null && cat /etc/os-release >/dev/null && ls /usr/bin/env >/dev/null && make --version >/dev/null`},
		{name: "a Python venv",
			attack: `refused /usr/bin/python3 -m venv $HOME_/venv; exit 42`,
			twin:   `/usr/bin/python3 -m venv --without-pip $TMP/venv && $TMP/venv/bin/python -c 'import sys; assert sys.prefix != sys.base_prefix' && echo 'print(1)' > $WT/m.py && $TMP/venv/bin/python $WT/m.py`},
		{name: "write the user's own checkout",
			attack: `refused sh -c "echo x > $REPO/README.md"; refused sh -c "echo x > $REPO/planted"; exit 42`,
			twin:   `echo more >> $WT/README.md`,
			check:  unchanged("$ROOT/repo/README.md", "hello\n")},
		{name: "write .git/hooks",
			attack: `refused sh -c "echo evil > $COMMON/hooks/pre-commit"; refused mkdir $COMMON/hooks/x; exit 42`,
			twin:   `echo c > $WT/c.txt && git add c.txt && git commit -q -m twin && git log -1 --format=%s | grep -q twin`,
			check:  absent("$ROOT/repo/.git/hooks/pre-commit"),
			twinHost: func(t *testing.T, f *fixture) {
				if git(t, f.repo, "log", "-1", "--format=%s", "kusaw/r1/build/1") != "twin" {
					t.Errorf("the commit made inside is not on the attempt branch")
				}
			}},
		{name: "write .git/config",
			attack: `refused sh -c "echo '[core] hooksPath=/tmp' >> $COMMON/config"; refused git config core.hooksPath /tmp/evil; refused git config --worktree core.fsmonitor evil; exit 42`,
			twin:   `test "$(git config --get core.hooksPath)" = .githooks`,
			check: func(t *testing.T, f *fixture) {
				if v := git(t, f.repo, "config", "--get", "core.hooksPath"); v != ".githooks" {
					t.Errorf("core.hooksPath changed to %q", v)
				}
			}},
		{name: "unhide the sandbox's stand-ins from git (info/exclude)",
			attack: `refused sh -c "echo > $COMMON/info/exclude"; refused rm -f $COMMON/info/exclude; refused sh -c "git status --porcelain --untracked-files=all | grep mcp.json"; exit 42`,
			twin:   `cd $WT && test -e .mcp.json && echo n > n.txt && st=$(git status --porcelain --untracked-files=all) && echo "$st" | grep -qx "?? n.txt" && ! echo "$st" | grep -q mcp.json && git add -A && git commit -q -m t && c=$(git show --name-only --format= HEAD) && echo "$c" | grep -qx n.txt && ! echo "$c" | grep -q mcp.json && git reset -q HEAD~1`}, // the fixture is shared: the other cases' files go back to untracked
		{name: "write .git/info and packed-refs",
			attack: `refused sh -c "echo '* filter=evil' > $COMMON/info/attributes"; refused sh -c "echo x > $COMMON/packed-refs"; refused sh -c "echo x > $COMMON/commondir"; exit 42`,
			twin:   `git status --porcelain >/dev/null && git branch --list >/dev/null`,
			check:  absent("$ROOT/repo/.git/info/attributes", "$ROOT/repo/.git/commondir")},
		{name: "replace packed history or add alternates",
			attack: `refused sh -c "echo x > $COMMON/objects/pack/evil.pack"; refused sh -c "echo $WT > $COMMON/objects/info/alternates"; exit 42`,
			twin:   `echo y > $WT/y.txt && git add y.txt && git commit -q -m loose && git cat-file -e HEAD:y.txt`,
			check:  absent("$ROOT/repo/.git/objects/info/alternates", "$ROOT/repo/.git/objects/pack/evil.pack")},
		{name: "move the user's branches and tags",
			attack: `refused sh -c "git rev-parse HEAD > $COMMON/refs/heads/main"; refused git branch -f main HEAD; refused git tag evil; refused git update-ref refs/heads/main HEAD; exit 42`,
			twin:   `git commit -q --allow-empty -m twin2 && git log -1 --format=%s | grep -q twin2`,
			check: func(t *testing.T, f *fixture) {
				if git(t, f.repo, "log", "-1", "--format=%s", "main") != "init" {
					t.Errorf("main moved")
				}
			}},
		{name: "switch the worktree to the user's branch",
			attack: `refused sh -c "echo 'ref: refs/heads/main' > $GITDIR/HEAD"; refused git checkout -q -b other; refused git checkout -q --detach; exit 42`,
			twin:   `git commit -q --allow-empty -m amendme && git commit -q --amend --allow-empty -m amended && git reset -q --soft HEAD`,
			check: func(t *testing.T, f *fixture) {
				if h, _ := os.ReadFile(filepath.Join(f.gitdir, "HEAD")); string(h) != "ref: refs/heads/kusaw/r1/build/1\n" {
					t.Errorf("HEAD changed: %q", h)
				}
			}},
		{name: "redirect the worktree's git folder",
			attack: `refused sh -c "echo /tmp > $GITDIR/commondir"; refused sh -c "echo x > $GITDIR/gitdir"; refused mkdir $COMMON/worktrees/evil; exit 42`,
			twin:   `echo i > $WT/i.txt && git add i.txt && git reset -q i.txt`,
			check:  unchanged("$ROOT/repo/.git/worktrees/app/commondir", "../..\n")},
		{name: "replace the worktree's .git file",
			attack: `refused sh -c "echo 'gitdir: /tmp/evil' > $WT/.git"; refused rm -f $WT/.git; refused mv $WT/.git $WT/.git-old; exit 42`,
			twin:   `grep -q gitdir: $WT/.git && git rev-parse --git-dir >/dev/null`,
			check: func(t *testing.T, f *fixture) {
				b, _ := os.ReadFile(filepath.Join(f.wt, ".git"))
				if !strings.Contains(string(b), f.gitdir) {
					t.Errorf(".git file changed: %q", b)
				}
			}},
		{name: "rename .claude away and plant a copy",
			attack: `refused mv $WT/.claude $WT/.claude-old; refused rmdir $WT/.claude; exit 42`,
			twin:   `mkdir $WT/movable && mv $WT/movable $WT/moved && rmdir $WT/moved`,
			check:  present("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.claude/settings.json")},
		{name: "rename the worktree",
			attack: `refused mv $WT $WT-x; exit 42`,
			twin:   `cp -r $WT/docs $WT/docs2 && rm -rf $WT/docs2`},
		{name: "write .claude/settings.json",
			attack:   `refused sh -c "echo '{\"hooks\":1}' > $WT/.claude/settings.json"; refused rm $WT/.claude/settings.json; refused mv $WT/.claude/settings.json $WT/s; exit 42`,
			twin:     `echo note > $WT/.claude/notes.md`,
			check:    unchanged("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.claude/settings.json", `{"hooks":{}}`),
			twinHost: present("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.claude/notes.md")},
		{name: "write .claude/settings.local.json",
			attack: `refused sh -c "echo x > $WT/.claude/settings.local.json"; exit 42`,
			twin:   `cat $WT/.claude/settings.local.json`,
			check:  unchanged("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.claude/settings.local.json", `{}`)},
		{name: ".mcp.json (missing) cannot be created",
			attack: `refused sh -c "echo '{\"mcpServers\":{}}' > $WT/.mcp.json"; refused rm -f $WT/.mcp.json; exit 42`,
			twin:   `echo '{}' > $WT/other.json`,
			check:  absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.mcp.json")},
		{name: ".vscode/tasks.json (missing) cannot be created",
			attack: `refused sh -c "echo x > $WT/.vscode/tasks.json"; refused sh -c "echo x > $WT/.vscode/settings.json"; exit 42`,
			twin:   `cat $WT/.vscode/settings.json`,
			check:  absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.vscode/tasks.json")},
		{name: ".cursor (missing) cannot be created",
			attack: `refused mkdir -p $WT/.cursor/rules; refused sh -c "echo x > $WT/.cursor/hooks.json"; exit 42`,
			twin:   `mkdir -p $WT/newdir/sub`,
			check:  absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.cursor")},
		{name: "write .devcontainer",
			attack: `refused sh -c "echo x > $WT/.devcontainer/devcontainer.json"; refused sh -c "echo x > $WT/.devcontainer/post.sh"; exit 42`,
			twin:   `cat $WT/.devcontainer/devcontainer.json`,
			check:  unchanged("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.devcontainer/devcontainer.json", "{}")},
		{name: ".husky (missing) cannot be created",
			attack: `refused sh -c "mkdir -p $WT/.husky && echo x > $WT/.husky/pre-commit"; exit 42`,
			twin:   `mkdir -p $WT/hooks-of-my-app && echo x > $WT/hooks-of-my-app/run`,
			check:  absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.husky")},
		{name: "write the core.hooksPath folder",
			attack: `refused sh -c "echo evil > $WT/.githooks/pre-commit"; refused sh -c "echo evil > $WT/.githooks/post-commit"; refused mv $WT/.githooks $WT/gh; exit 42`,
			twin:   `cat $WT/.githooks/pre-commit >/dev/null`,
			check:  absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.githooks/post-commit")},
		{name: "remove a protected folder",
			attack: `refused rm -rf $WT/.claude/hooks; refused rm -rf $WT/.devcontainer; exit 42`,
			twin:   `mkdir $WT/gone && touch $WT/gone/f && rm -rf $WT/gone`,
			check:  present("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.claude/hooks/keep.md")},
		{name: "write .claude/hooks, commands, agents, skills",
			attack: `for d in hooks commands agents skills; do refused sh -c "echo x > $WT/.claude/$d/evil.md"; done; exit 42`,
			twin:   `for d in hooks commands agents skills; do cat $WT/.claude/$d/keep.md >/dev/null || exit 1; done`,
			check:  absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/.claude/hooks/evil.md")},
		{name: "hard-link a protected file",
			attack: `refused ln $WT/.claude/settings.json $WT/s.json; refused ln $COMMON/config $WT/cfg; refused ln $GITDIR/commondir $GITDIR/cd2; refused ln $WT/.git $WT/g; exit 42`,
			twin:   `ln $WT/README.md $WT/README.hard && rm $WT/README.hard`},
		{name: "symlink out of the worktree",
			attack: `ln -s $SHARED/victim.txt $WT/evil && refused sh -c "echo x > $WT/evil"; ln -s $HOME_/.ssh/id_ed25519 $WT/k && refused grep -q SSH-PRIVATE $WT/k; rm -f $WT/evil $WT/k; exit 42`,
			twin:   `ln -s README.md $WT/r && echo more >> $WT/r && rm $WT/r`,
			check:  unchanged("$ROOT/shared/victim.txt", "original\n")},
		{name: "read ~/.ssh",
			attack: `refused grep -rq SSH-PRIVATE $HOME_/.ssh; refused ls $HOME_/.ssh/id_ed25519; exit 42`,
			twin:   `grep -q agent $HOME_/.claude/login.json && cat $HOME_/.claude.json >/dev/null`},
		{name: "read ~/.aws",
			attack: `refused grep -rq AWS-SECRET $HOME_/.aws; refused grep -rq AWS-SECRET $HOME_; exit 42`,
			twin:   `ls $HOME_/.claude >/dev/null`},
		{name: "read the secret store",
			attack: `refused grep -rq STORE-SECRET $STORE; refused ls $STORE/store.json; exit 42`,
			twin:   `cat /usr/local/go/VERSION >/dev/null 2>&1 || cat /etc/os-release >/dev/null`},
		{name: "read the user's uncommitted .env",
			attack: `refused grep -q ENV-FILE-SECRET $REPO/.env; refused grep -rq --exclude=helper ENV-FILE-SECRET /tmp; exit 42`,
			twin:   `grep -q hello $WT/README.md`},
		{name: "inherit secrets from kusaw's environment",
			attack: `refused sh -c 'env | grep -q AWS-SECRET'; refused test -n "$AWS_SECRET_ACCESS_KEY"; refused test -n "$SSH_AUTH_SOCK"; refused test -n "$DBUS_SESSION_BUS_ADDRESS"; exit 42`,
			twin:   `test "$STEP_TOKEN" = declared-by-step && test -n "$PATH" && test "$HOME" = "$HOME_"`},
		{name: "reach an SSH agent socket",
			attack: `refused $H connect $AGENTSOCK; exit 42`,
			twin:   `$H selfsock $TMP/own.sock`},
		{name: "reach the D-Bus session bus",
			attack: `refused $H connect $BUSSOCK; refused ls /run/user; exit 42`,
			twin:   `$H selfsock $XDG_RUNTIME_DIR/own.sock`},
		{name: "reach a host abstract socket", edit: netNone,
			attack: `refused $H connect $ABSTRACT; exit 42`,
			twin:   `$H selfsock @kusaw-inside-$$`},
		{name: "reach host loopback TCP", edit: netNone,
			attack: `refused $H dial $HOSTTCP; exit 42`,
			twin:   `$H selftcp`},
		{name: "allowlist: bypass the lease socket", edit: func(in *Input) {
			in.Network = NetworkAllowlist
			h := in.ExtraBinaries[0]
			lease := filepath.Join(filepath.Dir(filepath.Dir(h)), "lease.sock")
			in.Proxy = &Proxy{SocketPath: lease, Env: []string{"HTTPS_PROXY=http://127.0.0.1:3128"},
				WrapArgv: []string{h, "__sandbox_helper", "bridge", lease, "--"}, Binaries: []string{h}}
		},
			attack: `test "$BRIDGED" = 1 || { echo "the bridge did not run first"; exit 1; }; refused $H dial $HOSTTCP; refused $H connect $AGENTSOCK; refused $H connect $ABSTRACT; exit 42`,
			twin:   `$H connect $LEASE && test "$HTTPS_PROXY" = http://127.0.0.1:3128 && $H selftcp`},
		{name: "see or signal host processes",
			attack: `refused kill -0 $HOSTPID; refused test -e /proc/$HOSTPID/cmdline; n=$(ls -d /proc/[0-9]* | wc -l); test $n -lt 10 || { echo "sees $n processes"; exit 1; }; exit 42`,
			twin:   `sleep 5 & kill -0 $! && kill $!`},
		{name: "ptrace a host process",
			attack: `refused $H ptrace $HOSTPID; refused $H ptrace $PPID_HOST; exit 42`,
			twin:   `$H ptrace-child`},
		{name: "a background process outlives the step",
			attack: `(sleep 0.4; echo late > $WT/late.txt) & exit 42`,
			twin:   `(sleep 0.2; echo bg > $WT/bg.txt) & wait; test -f $WT/bg.txt`,
			check: func(t *testing.T, f *fixture) {
				time.Sleep(900 * time.Millisecond)
				absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/late.txt")(t, f)
			}},
		{name: "a detached daemon outlives the step",
			attack: `setsid sh -c "sleep 0.4; echo late > $WT/late2.txt" >/dev/null 2>&1 & nohup sh -c "sleep 0.4; echo late > $WT/late3.txt" >/dev/null 2>&1 & exit 42`,
			twin:   `setsid sh -c "echo d > $WT/daemon.txt" && sleep 0.2 && test -f $WT/daemon.txt`,
			check: func(t *testing.T, f *fixture) {
				time.Sleep(900 * time.Millisecond)
				absent("$ROOT/state/runs/r1/steps/build/1/worktrees/app/late2.txt", "$ROOT/state/runs/r1/steps/build/1/worktrees/app/late3.txt")(t, f)
			}},
		{name: "a setuid binary",
			attack: `refused sh -c 'test "$($SUID -u)" != "$(id -u)"'; grep -q "^NoNewPrivs:[[:space:]]*1" /proc/self/status || exit 1; exit 42`,
			twin:   `$PLAINID -u >/dev/null`},
		{name: "mknod a device",
			attack: `refused mknod $TMP/null c 1 3; refused mknod $TMP/sda b 8 0; refused mknod $WT/mem c 1 1; exit 42`,
			twin:   `mkfifo $TMP/fifo && test -p $TMP/fifo`},
		{name: "capabilities survive",
			attack: `for p in self 1; do if grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/$p/status | grep -qv '0000000000000000'; then grep ^Cap /proc/$p/status; exit 1; fi; done; exit 42`,
			twin:   `echo x > $WT/mine && chmod 600 $WT/mine && rm $WT/mine`},
		{name: "mount or unmount",
			attack: `refused mount -t tmpfs none $WT/docs; refused umount $WT/.claude/settings.json; refused umount -l $HOME_; refused unshare -r true; exit 42`,
			twin:   `ls $WT/docs >/dev/null`},
		{name: "write the Go caches in the home; go build with caches in TMPDIR",
			attack:   `refused mkdir -p $HOME_/go/pkg/mod; refused mkdir -p $HOME_/.cache/go-build; exit 42`,
			twin:     `mkdir -p $WT/hello && cd $WT/hello && printf 'module hello\n\ngo 1.21\n' > go.mod && printf 'package main\n\nfunc main() { println("hi") }\n' > main.go && GOCACHE=$GOCACHE_DIR GOPATH=$TMP/gopath GOTOOLCHAIN=local go build -o $TMP/hello . && $TMP/hello`,
			edit:     func(in *Input) { in.AllowWrite = append(in.AllowWrite, goCacheDir()) },
			rootOnly: "the Go build cache is kept per user between runs; building the runtime again as a second user would double the suite's time"},
		{name: "a controlling terminal or leaked descriptor",
			attack: `refused sh -c 'exec 3</dev/tty'; refused test -e /proc/self/fd/3; refused test -e /proc/self/fd/4; exit 42`,
			twin:   `echo in | cat >/dev/null && test -e /proc/self/fd/0`},
	}
	// Last: their twin leaves the attempt branch on a commit that lives
	// only in the attempt's private object folder.
	return append(cs, objectCases()...)
}

func newSuite(t *testing.T, uid int) *suite {
	needSandbox(t, "the escape suite runs the real sandbox")
	f := newFixture(t)
	s := &suite{f: f, uid: uid, hostPID: os.Getpid()}
	// The helper: this test binary, copied where the sandbox binds it.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	s.helper = filepath.Join(f.root, "bin", "helper")
	copyFile(t, exe, s.helper, 0o755)
	copyFile(t, "/usr/bin/id", filepath.Join(f.artifacts, "suid-id"), 0o755)
	copyFile(t, "/usr/bin/id", filepath.Join(f.artifacts, "plain-id"), 0o755)
	suid := filepath.Join(f.artifacts, "suid-id")
	if uid == 0 {
		os.Chown(suid, 65534, 65534) // root running it would become nobody
	}
	os.Chmod(suid, 0o4755)

	// Sockets outside: an agent socket, a session bus, an abstract socket, loopback TCP.
	agent := listenUnix(t, filepath.Join(f.hostTmp, "agent.sock"))
	lease := listenUnix(t, filepath.Join(f.root, "lease.sock"))
	bus := listenUnix(t, filepath.Join(f.hostTmp, "run-user", "bus"))
	abstract := fmt.Sprintf("@kusaw-test-%d-%d", os.Getpid(), uid)
	listenUnix(t, abstract)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tl.Close() })
	go acceptAll(tl)

	// The agent's login folder as a user has it: the CLI installed in it,
	// settings naming scripts in it, a plugin.
	home := f.home
	write(t, filepath.Join(home, ".claude", "local", "claude"), localClaude)
	os.Chmod(filepath.Join(home, ".claude", "local", "claude"), 0o755)
	write(t, filepath.Join(home, ".claude", "settings.json"), loginSettingsJSON)
	write(t, filepath.Join(home, ".claude", ".credentials.json"), credentialsJSON)
	for _, n := range []string{"statusline.sh", "hooks/pre.sh", "scripts/key.sh", "plugins/p/plugin.json"} {
		write(t, filepath.Join(home, ".claude", n), loginScript)
	}
	// Other factories' serve sockets and Docker-like sockets, and other
	// repositories, where a host has them: a project folder, /var/tmp,
	// /srv, /opt, /var. Listening, and open to everyone, so only the view
	// keeps the step from them.
	var others, repos []string
	bases := []string{filepath.Join(f.root, "other-project")}
	if os.Geteuid() == 0 {
		for _, top := range []string{"/srv", "/opt", "/var"} {
			d, err := os.MkdirTemp(top, "kusaw-view-test-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(d) })
			os.Chmod(d, 0o755)
			bases = append(bases, d)
		}
	}
	for i, base := range bases {
		others = append(others, listenUnix(t, filepath.Join(base, ".kusaw", "serve", "serve.sock")))
		if i > 0 {
			others = append(others, listenUnix(t, filepath.Join(base, "run", "docker.sock")))
		}
		repo := filepath.Join(base, "repo")
		write(t, filepath.Join(repo, "secret.txt"), "OTHER-REPO-SECRET\n")
		repos = append(repos, repo)
	}
	for _, o := range others {
		os.Chmod(o, 0o777)
		for d := filepath.Dir(o); d != "/" && !slices.Contains([]string{"/srv", "/opt", "/var", "/var/tmp"}, d); d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
	}

	if uid != 0 {
		// The plans are made by root here, run by the user: the user's
		// PATH, not root's (root's toolchains under /root are not the
		// user's to read).
		f.path = "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"
		// Let the user reach the fixture: the temp folders above it are 0700.
		for d := f.hostTmp; d != os.TempDir() && d != "/" && d != "/var/tmp"; d = filepath.Dir(d) {
			os.Chmod(d, 0o755)
		}
		chownTree(t, f.root, uid)
		chownTree(t, f.hostTmp, uid)
		os.Chown(filepath.Join(f.artifacts, "plain-id"), uid, uid)
	}
	s.vars = map[string]string{
		"WT": f.wt, "COMMON": f.common, "GITDIR": f.gitdir, "HOME_": f.home, "STORE": f.secretStore,
		"OUTSIDE": f.outside, "SHARED": f.readonly, "ATTEMPT": f.attempt, "ART": f.artifacts, "TMP": f.tmp,
		"REPO": f.repo, "H": s.helper + " __sandbox_helper", "HOSTPID": strconv.Itoa(s.hostPID), "PPID_HOST": strconv.Itoa(os.Getppid()), "AGENTSOCK": agent, "LEASE": lease, "BUSSOCK": bus,
		"OTHERSOCKS": strings.Join(others, " "), "OTHERREPOS": strings.Join(repos, " "),
		"ABSTRACT": abstract, "HOSTTCP": tl.Addr().String(), "SUID": suid, "GOCACHE_DIR": goCacheDir(), "PLAINID": filepath.Join(f.artifacts, "plain-id"),
	}
	// The suite's own sockets must be reachable from the host (the attacks are real).
	for _, p := range []string{agent, bus, abstract} {
		c, err := net.Dial("unix", p)
		if err != nil {
			t.Fatalf("test socket %s: %v", p, err)
		}
		c.Close()
	}
	return s
}

func listenUnix(t *testing.T, p string) string {
	t.Helper()
	if !strings.HasPrefix(p, "@") {
		os.MkdirAll(filepath.Dir(p), 0o755)
	}
	l, err := net.Listen("unix", p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go acceptAll(l)
	return p
}

func acceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	os.MkdirAll(filepath.Dir(dst), 0o755)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	os.Chmod(dst, mode)
}

func runSuite(t *testing.T, uid int) {
	s := newSuite(t, uid)
	cases := escapeCases()
	if len(cases) < 30 {
		t.Fatalf("the escape suite has %d cases; at least 30 are required", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if uid != 0 && c.rootOnly != "" {
				t.Skip(c.rootOnly)
			}
			s.cleanupWant, s.offline = c.cleanupErr, c.offline
			code, out := s.run(t, c.edit, c.attack)
			s.cleanupWant, s.offline = "", false
			if code != 42 {
				t.Errorf("attack was not refused (exit %d, want 42):\n%s", code, out)
			}
			if c.check != nil {
				c.check(t, s.f)
			}
			code, out = s.run(t, c.edit, c.twin)
			if code != 0 {
				t.Errorf("the legitimate twin failed (exit %d):\n%s", code, out)
			}
			if c.twinHost != nil {
				c.twinHost(t, s.f)
			}
		})
	}
	// Nothing is left in the user's repository: its checkout has only the
	// user's own untracked .env, its git folder no stand-in.
	if st := git(t, s.f.repo, "status", "--porcelain", "--ignored"); st != "?? .env" {
		t.Errorf("the user's checkout changed: %q", st)
	}
	for _, p := range []string{"config.worktree", "commondir", "worktrees/app/config.worktree", "hooks/pre-commit", "info/attributes"} {
		if exists(filepath.Join(s.f.common, p)) {
			t.Errorf("%s left in the user's .git", p)
		}
	}
}

func TestEscapeAsRoot(t *testing.T) {
	t.Parallel()
	needRoot(t, "kusaw is often started as root (CI, containers) and the sandbox must hold then; the unprivileged run is TestEscapeUnprivileged")
	runSuite(t, 0)
}

func TestEscapeUnprivileged(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		// Already unprivileged: run the suite as we are.
		runSuite(t, os.Geteuid())
		return
	}
	runSuite(t, 65534)
}

// goCacheDir is a Go build cache kept between test runs (per user), so the
// go build twin does not rebuild the runtime each time.
func goCacheDir() string {
	d := filepath.Join(os.TempDir(), fmt.Sprintf("kusaw-sandbox-test-gocache-%d", os.Geteuid()))
	os.MkdirAll(d, 0o755)
	return d
}

// Cancel: SIGTERM to the group ends bwrap, and --die-with-parent ends the
// whole sandbox; nothing the step started keeps running.
func TestCommandCancelEndsSandbox(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	p, err := BuildPlan(f.input())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	late, up := filepath.Join(f.wt, "late.txt"), filepath.Join(f.wt, "up.txt")
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", "(sleep 0.6; echo late > " + late + ") & echo up > " + up + "; sleep 30"})
	if err != nil {
		t.Fatal(err)
	}
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid {
		t.Fatal("the sandbox must lead its own process group")
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Cancel once the step runs (on a loaded machine its start can take
	// longer than any fixed wait).
	for deadline := time.Now().Add(20 * time.Second); !exists(up); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the step did not start within 20s")
		}
	}
	t0 := time.Now()
	cancel()
	cmd.Wait()
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("cancel took %v", d)
	}
	time.Sleep(900 * time.Millisecond)
	if exists(late) {
		t.Errorf("a process of the canceled step kept running and wrote %s", late)
	}
	p.Cleanup()
}

func TestCheckHere(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "checks the real backend")
	r := Check()
	if !r.Available || r.Path != "/usr/bin/bwrap" || r.Version == "" || r.Err() != nil {
		t.Fatalf("check: %+v", r)
	}
}

// per_repo and multi-worktree plans on the real backend: two worktrees of
// one repo both commit; a read-only worktree (per_repo's other repo) cannot
// be written.
func TestWorktreesWritableAndReadOnly(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	wt2 := filepath.Join(f.attempt, "worktrees", "app2")
	git(t, f.repo, "worktree", "add", "-q", "-b", "kusaw/r1/build/1b", wt2)
	g := newFixture(t) // another repo, read-only here
	in := f.input()
	in.Worktrees = append(in.Worktrees,
		Worktree{Repo: "app", Path: wt2, GitDir: filepath.Join(f.common, "worktrees", "app2"), CommonDir: f.common, Writable: true},
		Worktree{Repo: "docs", Path: g.wt, GitDir: g.gitdir, CommonDir: g.common, Writable: false})
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`set -e
for w in %s %s; do cd $w; echo x > x.txt; git add x.txt; git commit -q -m "in $w"; done
if echo x > %s/README.md 2>/dev/null; then echo "wrote the read-only worktree"; exit 1; fi
cat %s/README.md >/dev/null`, f.wt, wt2, g.wt, g.wt)
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	p.Cleanup()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, b := range []string{"kusaw/r1/build/1", "kusaw/r1/build/1b"} {
		if s := git(t, f.repo, "log", "-1", "--format=%s", b); !strings.HasPrefix(s, "in ") {
			t.Errorf("branch %s: last commit %q", b, s)
		}
	}
}

func TestProbes(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	p, err := BuildPlan(f.input())
	if err != nil {
		t.Fatal(err)
	}
	res := Probes(context.Background(), p)
	if len(res) != 4 {
		t.Fatalf("probes: %+v", res)
	}
	for _, r := range res {
		if !r.OK {
			t.Errorf("%s %s failed: %s", r.ID, r.Name, r.Detail)
		}
	}
	if !strings.Contains(res[3].Detail, "2 credential folders") { // ~/.ssh and ~/.aws in the fixture
		t.Errorf("P4: %s", res[3].Detail)
	}
	// A plan that leaves the home visible must fail P4, and one that makes
	// the attempt writable must fail P3: the probes can fail.
	bad := *p
	bad.Mounts = slices.DeleteFunc(slices.Clone(p.Mounts), func(m Mount) bool { return m.Dst == f.home })
	bad.Mounts = append(bad.Mounts, Mount{Op: "bind", Src: f.attempt, Dst: f.attempt, Reason: "test"},
		Mount{Op: "ro-bind", Src: f.home, Dst: f.home, Reason: "test"})
	// Landlock holds writes to the plan's writable list, whatever the
	// mounts: the broken plan names the attempt there too.
	bad.Writable = append(slices.Clone(p.Writable), PathRule{f.attempt, "test"})
	res = Probes(context.Background(), &bad)
	if res[2].OK || res[3].OK {
		t.Errorf("probes passed a broken plan: %+v", res)
	}
}

// Signal gives the step a SIGTERM it can handle (bwrap forwards none), and
// canceling the context uses it before bwrap is killed.
func TestSignalReachesTheStep(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	p, err := BuildPlan(f.input())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	marker := filepath.Join(f.wt, "got-term")
	ready := filepath.Join(f.wt, "ready")
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", "trap 'echo term > " + marker + "; exit 3' TERM; echo > " + ready + "; while :; do sleep 0.05; done"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && !exists(ready); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	err = cmd.Wait()
	p.Cleanup()
	if !exists(marker) {
		t.Fatalf("the step did not get SIGTERM (wait: %v)", err)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("bwrap should exit with the step's own status 3 after its TERM handler: %v", err)
	}
}

// A step that ignores SIGTERM is killed after GraceDelay, with everything
// it started.
func TestCancelKillsAStepIgnoringTerm(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	old := GraceDelay
	GraceDelay = 300 * time.Millisecond
	defer func() { GraceDelay = old }()
	f := newFixture(t)
	p, err := BuildPlan(f.input())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := filepath.Join(f.wt, "ready")
	late := filepath.Join(f.wt, "late")
	cmd, err := Command(ctx, p, []string{"/bin/sh", "-c", "trap '' TERM; echo > " + ready + "; sleep 1.2; echo > " + late})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200 && !exists(ready); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	t0 := time.Now()
	cancel()
	cmd.Wait()
	p.Cleanup()
	if d := time.Since(t0); d > time.Second {
		t.Errorf("a step ignoring SIGTERM ran %v after cancel (grace %v)", d, GraceDelay)
	}
	time.Sleep(1500 * time.Millisecond)
	if exists(late) {
		t.Errorf("the step outlived its cancel")
	}
}

// The real home of whoever runs the tests is hidden too (no login paths:
// nothing is created in it), and a WSL plan hides /mnt on the real backend.
func TestRealHomeAndWSLPlan(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	home, err := os.UserHomeDir()
	if err != nil || home == "/" || !isDir(home) {
		t.Skip("no real home to hide")
	}
	f := newFixture(t)
	in := f.input()
	in.Home, in.LoginPaths = home, nil
	in.Host.WSL = true
	in.Env["WSL_INTEROP"] = "/run/WSL/1_interop"
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	// Only the toolchains of the PATH that lie in the home appear in it.
	var names []string
	for _, tc := range p.Toolchains {
		if r := rel(home, tc.Path); within(home, tc.Path) {
			names = append(names, strings.SplitN(r, "/", 2)[0])
		}
	}
	slices.Sort(names)
	want := strings.Join(slices.Compact(names), " ")
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c",
		`test "$(ls -A "$HOME" | tr '\n' ' ' | sed 's/ $//')" = "` + want + `" || { ls -A "$HOME"; exit 1; }; test ! -e /mnt || exit 2; test -z "$WSL_INTEROP" || exit 3; test ! -e /run/WSL || exit 4; cat /etc/os-release >/dev/null`})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	p.Cleanup()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

// A step's env values never show in a command line another local user can
// read (ps, /proc/PID/cmdline): they reach bwrap through a memfd.
func TestEnvNotOnCommandLine(t *testing.T) {
	needTool(t, "/usr/bin/bwrap", "runs the real sandbox")
	f := newFixture(t)
	in := f.input()
	const secret = "declared-secret-0xfeedbeef"
	in.Env["API_TOKEN"] = secret
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(f.wt, "ready")
	cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", `test "${#API_TOKEN}" = ` + strconv.Itoa(len(secret)) + ` && echo > ` + ready + ` && sleep 2`})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait(); p.Cleanup() }()
	for i := 0; i < 200 && !exists(ready); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if !exists(ready) {
		t.Fatal("the step did not get its env")
	}
	pids := append([]int{cmd.Process.Pid}, descendants(cmd.Process.Pid)...)
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("pid %d shows the secret in its command line: %q", pid, b)
		}
	}
	if len(pids) < 3 {
		t.Errorf("expected bwrap, its helper and the step; saw %v", pids)
	}
}
