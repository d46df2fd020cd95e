package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/status"
)

func rulePaths(rs []PathRule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Path)
	}
	return out
}

func mustPlan(t *testing.T, in Input) *Plan {
	t.Helper()
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatalf("BuildPlan: %v", err)
	}
	return p
}

func wantRefused(t *testing.T, in Input, substr string) {
	t.Helper()
	_, err := BuildPlan(in)
	if err == nil {
		t.Fatalf("BuildPlan accepted a plan that must be refused (%s)", substr)
	}
	var se *status.Error
	if !errors.As(err, &se) || se.Reason != status.ReasonSandboxPlanRefused {
		t.Fatalf("error %v is not a %s status.Error", err, status.ReasonSandboxPlanRefused)
	}
	if !strings.Contains(err.Error(), substr) || se.Fix == "" {
		t.Fatalf("error %q lacks %q or a fix", err, substr)
	}
}

func TestPlanPaths(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	write(t, filepath.Join(f.secretStore, "key.age"), "k")
	in.HiddenPaths = append(in.HiddenPaths, filepath.Join(f.secretStore, "key.age")) // a hidden file
	p := mustPlan(t, in)
	w, ro, hid := rulePaths(p.Writable), rulePaths(p.ReadOnly), rulePaths(p.Hidden)
	for _, x := range []string{f.wt, filepath.Join(f.common, "objects"), filepath.Join(f.common, "refs", "heads", "kusaw", "r1", "build"),
		filepath.Join(f.common, "logs", "refs", "heads", "kusaw", "r1", "build"), f.gitdir, f.artifacts, f.tmp,
		filepath.Join(f.home, ".claude"), filepath.Join(f.home, ".claude.json"), filepath.Join(f.wt, ".claude")} {
		if !slices.Contains(w, x) {
			t.Errorf("%s is not writable; writable: %v", x, w)
		}
	}
	for _, x := range []string{f.common, filepath.Join(f.gitdir, "commondir"), filepath.Join(f.gitdir, "gitdir"),
		filepath.Join(f.wt, ".git"), filepath.Join(f.wt, ".claude", "settings.json"), filepath.Join(f.wt, ".claude", "settings.local.json"),
		filepath.Join(f.wt, ".claude", "hooks"), filepath.Join(f.wt, ".claude", "skills"), filepath.Join(f.wt, ".vscode"),
		filepath.Join(f.wt, ".devcontainer"), filepath.Join(f.wt, ".githooks"), filepath.Join(f.wt, ".mcp.json"),
		filepath.Join(f.wt, ".cursor"), filepath.Join(f.wt, ".husky"), f.readonly} {
		if !slices.Contains(ro, x) {
			t.Errorf("%s is not read-only; read-only: %v", x, ro)
		}
	}
	for _, x := range []string{f.home, f.repo, f.secretStore, filepath.Join(f.secretStore, "key.age")} {
		if !slices.Contains(hid, x) {
			t.Errorf("%s is not hidden; hidden: %v", x, hid)
		}
	}
	// Every decision has a reason.
	for _, m := range p.Mounts {
		if m.Reason == "" {
			t.Errorf("mount %+v has no reason", m)
		}
	}
	// Never writable: the records, the common dir's control files, main's ref folder.
	for _, x := range []string{f.attempt, filepath.Join(f.common, "refs", "heads"), filepath.Join(f.common, "hooks"), filepath.Join(f.common, "config")} {
		if slices.Contains(w, x) {
			t.Errorf("%s must not be writable", x)
		}
	}
	// Missing protected paths become stand-ins, cleaned up afterwards.
	for _, x := range []string{filepath.Join(f.wt, ".mcp.json"), filepath.Join(f.wt, ".cursor"), filepath.Join(f.wt, ".husky")} {
		if !slices.Contains(p.StandIns, x) {
			t.Errorf("%s is not a stand-in: %v", x, p.StandIns)
		}
	}
	if slices.Contains(p.StandIns, filepath.Join(f.wt, ".claude")) {
		t.Errorf(".claude exists and must not be a stand-in")
	}
	// Hidden tiers come before binds; protections after them.
	idx := func(op, dst string) int {
		for i, m := range p.Mounts {
			if m.Op == op && m.Dst == dst {
				return i
			}
		}
		t.Fatalf("no %s mount of %s", op, dst)
		return -1
	}
	if !(idx("tmpfs", f.home) < idx("bind", filepath.Join(f.home, ".claude")) &&
		idx("bind", f.wt) < idx("ro-bind", filepath.Join(f.wt, ".claude", "settings.json")) &&
		idx("ro-bind", f.common) < idx("bind", filepath.Join(f.common, "objects"))) {
		t.Errorf("mount order is wrong: %v", p.Mounts)
	}
	if p.Workdir != f.wt {
		t.Errorf("workdir %s, want %s", p.Workdir, f.wt)
	}
}

func TestPlanEnv(t *testing.T) {
	f := newFixture(t)
	p := mustPlan(t, f.input())
	env := map[string]string{}
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{"HOME": f.home, "TMPDIR": f.tmp, "XDG_CACHE_HOME": filepath.Join(f.tmp, "cache"),
		"XDG_RUNTIME_DIR": filepath.Join(f.tmp, "run"), "LANG": "C.UTF-8", "STEP_TOKEN": "declared-by-step", "PATH": os.Getenv("PATH")}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s=%q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "DBUS_SESSION_BUS_ADDRESS", "HTTPS_PROXY"} {
		if _, ok := env[k]; ok {
			t.Errorf("env has %s; the host's env must not be inherited", k)
		}
	}
	if !slices.ContainsFunc(p.Dropped, func(e EnvVar) bool { return e.Name == "SSH_AUTH_SOCK" }) {
		t.Errorf("SSH_AUTH_SOCK declared by the step is not reported as dropped: %v", p.Dropped)
	}
	// Printing never shows values.
	for _, out := range []string{p.String(), string(p.JSON())} {
		if strings.Contains(out, "declared-by-step") || strings.Contains(out, awsSecret) {
			t.Errorf("plan output shows an env value:\n%s", out)
		}
		if !strings.Contains(out, "STEP_TOKEN") {
			t.Errorf("plan output does not name STEP_TOKEN:\n%s", out)
		}
	}
	var back map[string]any
	if err := json.Unmarshal(p.JSON(), &back); err != nil {
		t.Fatalf("plan JSON: %v", err)
	}
}

func TestPlanNetwork(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.Network = NetworkOpen
	if a := mustPlan(t, in).Args(); !slices.Contains(a, "--share-net") || !slices.Contains(a, "--unshare-all") {
		t.Errorf("open network: %v", a)
	}
	in.Network = NetworkNone
	if a := mustPlan(t, in).Args(); slices.Contains(a, "--share-net") {
		t.Errorf("network none shares the network: %v", a)
	}
	in.Network = NetworkAllowlist
	wantRefused(t, in, "proxy")
	sock := filepath.Join(f.root, "lease.sock")
	write(t, sock, "")
	in.Proxy = &Proxy{SocketPath: sock, Env: []string{"HTTPS_PROXY=http://127.0.0.1:3128", "NO_PROXY=localhost"},
		WrapArgv: []string{"/opt/kusaw", "__egress-bridge", "--"}, Binaries: []string{"/bin/sh"}}
	p := mustPlan(t, in)
	a := p.Args()
	if slices.Contains(a, "--share-net") || !slices.Contains(rulePaths(p.Writable), sock) || p.WrapArgv[1] != "__egress-bridge" {
		t.Errorf("allowlist plan: args %v writable %v wrap %v", a, p.Writable, p.WrapArgv)
	}
	if !slices.Contains(p.Env, "HTTPS_PROXY=http://127.0.0.1:3128") {
		t.Errorf("proxy env missing: %v", p.Env)
	}
	in.Network = "wifi"
	wantRefused(t, in, "unknown network mode")
	for _, flag := range []string{"--die-with-parent", "--new-session", "--clearenv", "--cap-drop"} {
		if !slices.Contains(a, flag) {
			t.Errorf("args lack %s: %v", flag, a)
		}
	}
}

func TestPlanRefusals(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name  string
		edit  func(*Input)
		want  string
		setup func()
	}{
		{"allow_write root", func(in *Input) { in.AllowWrite = []string{"/"} }, "disk root", nil},
		{"allow_write system", func(in *Input) { in.AllowWrite = []string{"/usr/lib"} }, "system folder", nil},
		{"allow_write home", func(in *Input) { in.AllowWrite = []string{f.home} }, "home or above", nil},
		{"allow_write above home", func(in *Input) { in.AllowWrite = []string{f.root} }, "home or above", nil},
		{"allow_write ssh", func(in *Input) { in.AllowWrite = []string{filepath.Join(f.home, ".ssh")} }, "credential", nil},
		{"allow_write agent config", func(in *Input) { in.AllowWrite = []string{filepath.Join(f.home, ".codex")} }, "configuration folder", nil},
		{"allow_write records", func(in *Input) { in.AllowWrite = []string{filepath.Dir(f.attempt)} }, "records", nil},
		{"allow_write git", func(in *Input) { in.AllowWrite = []string{filepath.Join(f.common, "hooks")} }, "git folder", nil},
		{"allow_write relative", func(in *Input) { in.AllowWrite = []string{"build"} }, "not an absolute path", nil},
		{"allow_read home", func(in *Input) { in.AllowRead = []string{f.home} }, "whole home", nil},
		{"allow_read ssh", func(in *Input) { in.AllowRead = []string{filepath.Join(f.home, ".ssh")} }, "credential", nil},
		{"allow_read secret store", func(in *Input) { in.AllowRead = []string{filepath.Join(f.secretStore, "store.json")} }, "credential", nil},
		{"hidden contains worktree", func(in *Input) { in.HiddenPaths = []string{filepath.Dir(f.attempt)} }, "contains", nil},
		{"login path is home", func(in *Input) { in.LoginPaths = []string{f.home} }, "whole home", nil},
		{"missing tmp", func(in *Input) { in.TmpDir = filepath.Join(f.attempt, "nope") }, "does not exist", nil},
		{"incomplete worktree", func(in *Input) { in.Worktrees[0].GitDir = "" }, "incomplete", nil},
		{"env name with =", func(in *Input) { in.Env["A=B"] = "x" }, "env variable", nil},
		{"env value with NUL", func(in *Input) { in.Env["A"] = "x\x00--setenv" }, "env variable", nil},
		{"main checkout", func(in *Input) {
			in.Worktrees = []Worktree{{Repo: "app", Path: f.repo, GitDir: f.common, CommonDir: f.common, Writable: true}}
		}, "main checkout", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := f.input()
			c.edit(&in)
			wantRefused(t, in, c.want)
		})
	}
}

func TestPlanSymlinkRefused(t *testing.T) {
	for _, c := range []struct{ link, target, want string }{
		{".claude/settings.json", "/etc/hostname", "outside the worktree"},
		{".mcp.json", "README.md", "a protected path cannot be a link"},
		{".cursor", "/tmp", "outside the worktree"},
		{".githooks", "docs", "a protected path cannot be a link"},
	} {
		t.Run(c.link, func(t *testing.T) {
			f := newFixture(t)
			p := filepath.Join(f.wt, c.link)
			os.RemoveAll(p)
			if err := os.Symlink(c.target, p); err != nil {
				t.Fatal(err)
			}
			_, err := BuildPlan(f.input())
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("symlinked %s: err %v, want a refusal naming the link and %q", c.link, err, c.want)
			}
		})
	}
}

func TestPlanHomeDefaultsToHostHome(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.Home = ""
	in.Host.Env = append(in.Host.Env, "HOME="+f.home)
	p := mustPlan(t, in)
	if !slices.Contains(rulePaths(p.Hidden), f.home) {
		t.Errorf("without Input.Home the host's HOME must still be hidden: %v", p.Hidden)
	}
}

func TestPlanPerRepoAndWSL(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	in.Worktrees[0].Writable = false
	in.Host.WSL = true
	in.Env["WSL_INTEROP"] = "/run/WSL/1_interop"
	p := mustPlan(t, in)
	if slices.Contains(rulePaths(p.Writable), f.wt) || !slices.Contains(rulePaths(p.ReadOnly), f.wt) {
		t.Errorf("a non-writable worktree must be read-only: %v", p.Writable)
	}
	// The view is an allowlist: WSL's /mnt and /run/WSL are not in it.
	for _, m := range p.Mounts {
		if within("/mnt", m.Dst) || within("/run", m.Dst) || m.Dst == "/" && m.Op != "remount-ro" {
			t.Errorf("WSL: %s %s is in the view", m.Op, m.Dst)
		}
	}
	for _, kv := range p.Env {
		if strings.HasPrefix(kv, "WSL_INTEROP=") {
			t.Errorf("WSL_INTEROP passed: %s", kv)
		}
	}
}

func TestPlanHooksPathAndWorktreeConfig(t *testing.T) {
	f := newFixture(t)
	git(t, f.repo, "config", "core.hooksPath", "tools/hooks") // missing folder below an existing one? tools missing too
	git(t, f.repo, "config", "extensions.worktreeConfig", "true")
	p := mustPlan(t, f.input())
	if !slices.Contains(p.StandIns, filepath.Join(f.wt, "tools")) {
		t.Errorf("a missing hooksPath folder needs a stand-in at its first missing folder: %v", p.StandIns)
	}
	if !slices.Contains(p.StandIns, filepath.Join(f.gitdir, "config.worktree")) {
		t.Errorf("missing config.worktree with worktreeConfig on needs a stand-in: %v", p.StandIns)
	}
	if err := os.MkdirAll(filepath.Join(f.wt, "tools", "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	p = mustPlan(t, f.input())
	if !slices.Contains(rulePaths(p.ReadOnly), filepath.Join(f.wt, "tools", "hooks")) || !slices.Contains(rulePaths(p.Writable), filepath.Join(f.wt, "tools")) {
		t.Errorf("hooksPath tools/hooks: read-only %v writable %v", p.ReadOnly, p.Writable)
	}
	// The user's global config counts too: kusaw's git outside reads it.
	git(t, f.repo, "config", "--unset", "core.hooksPath")
	write(t, filepath.Join(f.home, ".gitconfig"), "[core]\n\thooksPath = .myhooks # global\n")
	p = mustPlan(t, f.input())
	if !slices.Contains(p.StandIns, filepath.Join(f.wt, ".myhooks")) {
		t.Errorf("hooksPath from ~/.gitconfig is not protected: %v", p.StandIns)
	}
	// Absolute hooksPath outside every writable place: nothing to protect.
	git(t, f.repo, "config", "core.hooksPath", "/usr/share/hooks")
	p = mustPlan(t, f.input())
	if slices.Contains(rulePaths(p.ReadOnly), "/usr/share/hooks") {
		t.Errorf("hooksPath outside writable places needs no mount")
	}
}

func TestCleanupRemovesOnlyEmptyStandIns(t *testing.T) {
	f := newFixture(t)
	p := mustPlan(t, f.input())
	mcp := filepath.Join(f.wt, ".mcp.json")
	cursor := filepath.Join(f.wt, ".cursor")
	husky := filepath.Join(f.wt, ".husky")
	write(t, mcp, "")
	os.MkdirAll(cursor, 0o755)
	write(t, filepath.Join(husky, "pre-commit"), "kept") // not empty: left alone
	if err := p.Cleanup(); err == nil {
		t.Errorf("cleanup of a non-empty stand-in folder should report it")
	}
	if exists(mcp) || exists(cursor) || !exists(filepath.Join(husky, "pre-commit")) {
		t.Errorf("cleanup: mcp %v cursor %v husky %v", exists(mcp), exists(cursor), exists(husky))
	}
}

func TestTrustedBinary(t *testing.T) {
	needRoot(t, "it makes root-owned and foreign-owned files")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "bwrap")
	write(t, bin, "#!/bin/sh\n")
	os.Chmod(bin, 0o755)
	allowed := []string{dir}
	if err := trusted(bin, allowed); err != nil {
		t.Fatalf("a root-owned 0755 file in a root-owned 0755 folder is trusted: %v", err)
	}
	if err := trusted(bin, []string{"/usr/bin"}); err == nil {
		t.Errorf("a file outside the system folders is trusted")
	}
	os.Chmod(bin, 0o757)
	if err := trusted(bin, allowed); err == nil || !strings.Contains(err.Error(), "writable") {
		t.Errorf("world-writable file: %v", err)
	}
	os.Chmod(bin, 0o755)
	os.Chown(bin, 65534, 65534)
	if err := trusted(bin, allowed); err == nil || !strings.Contains(err.Error(), "not root") {
		t.Errorf("file owned by nobody: %v", err)
	}
	os.Chown(bin, 0, 0)
	os.Chmod(dir, 0o777)
	if err := trusted(bin, allowed); err == nil || !strings.Contains(err.Error(), "folder") {
		t.Errorf("world-writable folder: %v", err)
	}
	os.Chmod(dir, 0o755)
	// A folder above that others can write (not sticky) lets them swap it.
	parent := filepath.Dir(dir)
	os.Chmod(parent, 0o777)
	if err := trusted(bin, allowed); err == nil || !strings.Contains(err.Error(), parent) {
		t.Errorf("world-writable parent folder: %v", err)
	}
	os.Chmod(parent, 0o755)
	link := filepath.Join(dir, "bwrap-link")
	os.Symlink(bin, link)
	if err := trusted(link, allowed); err == nil {
		t.Errorf("a symlink is trusted")
	}
}

func TestFindBwrapIgnoresPath(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "bwrap"), "#!/bin/sh\necho fake\n")
	os.Chmod(filepath.Join(dir, "bwrap"), 0o755)
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	p, err := FindBwrap()
	if err != nil {
		needTool(t, "/usr/bin/bwrap", "bubblewrap runs the sandbox")
		t.Fatal(err)
	}
	if strings.HasPrefix(p, dir) {
		t.Fatalf("FindBwrap took %s from PATH", p)
	}
}

// Check's typed reasons, with stand-in binaries in a trusted-for-the-test folder.
func TestCheckReasons(t *testing.T) {
	needRoot(t, "it makes a root-owned stand-in bwrap")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	old := trustedDirs
	defer func() { trustedDirs = old }()
	trustedDirs = []string{dir}

	r := Check()
	if r.Available || r.Reason != status.ReasonSandboxUnavailable || !strings.Contains(r.Fix, "install bubblewrap") || r.Err() == nil {
		t.Errorf("missing bwrap: %+v", r)
	}
	bin := filepath.Join(dir, "bwrap")
	// A fake bwrap whose namespaces fail, as under an AppArmor restriction.
	write(t, bin, "#!/bin/sh\nif [ \"$1\" = --version ]; then echo bubblewrap 0.9.0; exit 0; fi\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
	os.Chmod(bin, 0o755)
	r = Check()
	if r.Available || r.Reason != status.ReasonSandboxNoUserNS || !strings.Contains(r.Msg, "uid map") || r.Version != "0.9.0" || !strings.Contains(r.Fix, "sysctl") {
		t.Errorf("namespaces refused: %+v", r)
	}
	os.Chmod(bin, 0o777)
	r = Check()
	if r.Available || r.Reason != status.ReasonSandboxUntrusted || !strings.Contains(r.Msg, "writable") {
		t.Errorf("world-writable bwrap: %+v", r)
	}
	if _, err := Command(t.Context(), &Plan{}, []string{"true"}); err == nil {
		t.Errorf("Command ran an untrusted bwrap")
	}
}

func TestPlanTwoWorktreesOneRepoAndLinkedLogin(t *testing.T) {
	f := newFixture(t)
	wt2 := filepath.Join(f.attempt, "worktrees", "app2")
	git(t, f.repo, "worktree", "add", "-q", "-b", "kusaw/r1/build/1b", wt2)
	real := filepath.Join(f.root, "claude-state")
	os.MkdirAll(real, 0o755)
	os.RemoveAll(filepath.Join(f.home, ".claude"))
	os.Symlink(real, filepath.Join(f.home, ".claude"))
	in := f.input()
	in.Worktrees = append(in.Worktrees, Worktree{Repo: "app", Path: wt2, GitDir: filepath.Join(f.common, "worktrees", "app2"), CommonDir: f.common, Writable: true})
	p := mustPlan(t, in)
	// The common dir's read-only bind comes once, before every writable git folder.
	n, lastRO, firstObj := 0, -1, -1
	for i, m := range p.Mounts {
		if m.Dst == f.common && m.Op == "ro-bind" {
			n++
			lastRO = i
		}
		if m.Dst == filepath.Join(f.common, "objects") && firstObj < 0 {
			firstObj = i
		}
	}
	if n != 1 || lastRO > firstObj {
		t.Errorf("common dir bound read-only %d times (last at %d, objects at %d)", n, lastRO, firstObj)
	}
	// A linked login folder: its copy appears at the name the agent uses,
	// made from the folder the link points to.
	if runtime.GOOS != "linux" {
		return // macOS: a fresh HOME, no login folder
	}
	if len(p.LoginCopies) == 0 {
		t.Fatalf("no login copy: %+v", p)
	}
	if lc := p.LoginCopies[0]; lc.Src != real || lc.Dst != filepath.Join(f.home, ".claude") || !slices.Contains(rulePaths(p.Writable), lc.Dst) {
		t.Errorf("a linked login folder: %+v", lc)
	}
}

func TestPlanLoginFolderSettings(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("login copies are Linux's: macOS gives a fresh HOME")
	}
	f := newFixture(t)
	write(t, filepath.Join(f.home, ".claude", "settings.local.json"), "{}")
	write(t, filepath.Join(f.home, ".claude", "local", "claude"), "#!/bin/sh\n")
	write(t, filepath.Join(f.home, ".claude", "projects", "other", "s.jsonl"), "the user's other session\n")
	write(t, filepath.Join(f.home, ".claude", ".credentials.json"), userLogin)
	p := mustPlan(t, f.input())
	ro := rulePaths(p.ReadOnly)
	for _, x := range []string{"settings.json", "settings.local.json", "local", "hooks", "commands", "agents", "skills", "plugins", "CLAUDE.md"} {
		if !slices.Contains(ro, filepath.Join(f.home, ".claude", x)) {
			t.Errorf("~/.claude/%s is not read-only: %v", x, ro)
		}
	}
	if len(p.LoginCopies) != 2 {
		t.Fatalf("login copies: %+v", p.LoginCopies)
	}
	lc := p.LoginCopies[0]
	if lc.Dst != filepath.Join(f.home, ".claude") || !within(f.attempt, lc.Copy) || !slices.Equal(lc.Credentials, []string{".credentials.json"}) {
		t.Errorf("login copy: %+v", lc)
	}
	var made []string
	for _, c := range lc.Made {
		made = append(made, c.Path)
	}
	if !slices.Equal(made, []string{"settings.json", "CLAUDE.md", "AGENTS.md", ".mcp.json", "hooks", "commands", "agents", "skills", "plugins", "output-styles"}) {
		t.Errorf("made in the copy: %v", made)
	}
	if err := p.Prepare(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(lc.Copy, "settings.json")); string(b) != "{}\n" || !isDir(filepath.Join(lc.Copy, "hooks")) {
		t.Errorf("prepare did not make the missing settings in the copy: %q", b)
	}
	if exists(filepath.Join(f.home, ".claude", "settings.json")) {
		t.Errorf("prepare wrote into the user's login folder")
	}
	if exists(filepath.Join(lc.Copy, "projects", "other")) || !isDir(filepath.Join(lc.Copy, "projects")) {
		t.Errorf("the user's other sessions are in the copy, or its projects/ is missing")
	}
	// A refreshed credentials file is carried back (the egress log shows
	// the token host); the copy is removed.
	write(t, filepath.Join(lc.Copy, ".credentials.json"), userRefreshed)
	write(t, filepath.Join(lc.Copy, "todos", "x.json"), "[]")
	p.Reached = reachedHosts("platform.claude.com")
	if err := p.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.home, ".claude", ".credentials.json")); string(b) != userRefreshed || len(p.Carried) != 1 || !p.Carried[0].Carried {
		t.Errorf("credentials not carried back: %q %+v", b, p.Carried)
	}
	if exists(lc.Copy) || exists(filepath.Join(f.home, ".claude", "todos")) {
		t.Errorf("the copy is left, or its session state reached the user's folder")
	}
}

// A missing protected file's read-only empty stand-in is made by bwrap
// from no data (--ro-bind-data of an empty descriptor): nothing is created
// in the attempt folder for it, and each one reads its own descriptor.
func TestEmptyFileNeedsNothingOnHost(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bubblewrap plans only; seatbelt denies writes to the missing path instead")
	}
	f := newFixture(t)
	in := f.input()
	proj := filepath.Join(f.root, "proj") // its .mcp.json is missing too: two empty files
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	in.Checkouts, in.AllowWrite = []string{proj}, []string{proj}
	p := mustPlan(t, in)
	if n := p.dataFiles(); n < 2 {
		t.Fatalf("the plan has %d empty-file stand-ins; the test needs two", n)
	}
	if p.EmptyFile != "" {
		t.Errorf("a bubblewrap plan names an empty file on the host: %s", p.EmptyFile)
	}
	if err := p.Prepare(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(f.attempt, ".sandbox-empty")); !os.IsNotExist(err) {
		t.Errorf("prepare made an empty file on the host (err %v)", err)
	}
	a := p.Args()
	var fds []string
	for i, x := range a {
		if x == "--ro-bind-data" {
			fds = append(fds, a[i+1])
			if a[i-2] != "--perms" || a[i-1] != "0444" {
				t.Errorf("empty file %s is not made read-only for all: %v", a[i+2], a[i-2:i+3])
			}
		}
	}
	if want := []string{strconv.Itoa(DataFD), strconv.Itoa(DataFD + 1)}; !slices.Equal(fds[:2], want) {
		t.Errorf("empty files read descriptors %v, want %v first", fds, want)
	}
	n := 0
	for _, x := range a {
		if x == "--perms" {
			n++
		}
	}
	if old := withoutPerms(a); n == 0 || slices.Contains(old, "--perms") || len(old) != len(a)-2*n {
		t.Errorf("withoutPerms (bwrap before 0.5) left --perms or dropped other arguments (%d --perms)", n)
	}
}

// A private temp folder (sandbox exec without a factory) is made inside
// the sandbox: the plan names no host folder for it, Prepare creates
// none, and it must lie under the sandbox's own /tmp.
func TestPrivateTmpPlan(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bubblewrap plans only")
	}
	f := newFixture(t)
	in := f.input()
	in.PrivateTmp = true
	in.TmpDir, in.ArtifactsDir = "/tmp/kusaw-plan-test/tmp", ""
	wantRefused(t, in, "login folders need the attempt folder on disk")
	in.LoginPaths = nil
	p := mustPlan(t, in)
	var ops []string
	for _, m := range p.Mounts {
		if within("/tmp/kusaw-plan-test", m.Dst) {
			ops = append(ops, m.Op+" "+m.Dst)
		}
	}
	want := []string{"tmpfs-rw /tmp/kusaw-plan-test/tmp", "dir /tmp/kusaw-plan-test/tmp/cache", "dir /tmp/kusaw-plan-test/tmp/run"}
	if !slices.Equal(ops, want) {
		t.Errorf("private temp mounts %v, want %v", ops, want)
	}
	if !slices.Contains(rulePaths(p.Writable), "/tmp/kusaw-plan-test/tmp") {
		t.Errorf("the private temp folder is not listed writable: %v", p.Writable)
	}
	if err := p.Prepare(); err != nil {
		t.Fatal(err)
	}
	if exists("/tmp/kusaw-plan-test") {
		t.Errorf("prepare made the private temp folder on the host")
	}
	in.TmpDir = filepath.Join(f.root, "ptmp")
	if _, err := BuildPlan(in); err == nil || !strings.Contains(err.Error(), "not under /tmp") {
		t.Errorf("a private temp folder outside /tmp: %v", err)
	}
}

// With a ref store, the repository's refs/ and logs/ are the store's inside
// and no folder of the repository's own refs is writable.
func TestPlanRefStore(t *testing.T) {
	f := newFixture(t)
	in := f.input()
	store := filepath.Join(f.attempt, "refstore", "app")
	for _, d := range []string{"refs", "logs"} {
		os.MkdirAll(filepath.Join(store, d), 0o755)
		os.MkdirAll(filepath.Join(f.common, d), 0o755)
	}
	in.Worktrees[0].RefStore = store
	p, err := BuildPlan(in)
	if err != nil {
		t.Fatal(err)
	}
	binds := map[string]string{}
	for _, m := range p.Mounts {
		if m.Op == "bind" {
			binds[m.Dst] = m.Src
		}
	}
	for _, d := range []string{"refs", "logs"} {
		if binds[filepath.Join(f.common, d)] != filepath.Join(store, d) {
			t.Errorf("%s/ is not the store's: %v", d, binds)
		}
	}
	for dst, src := range binds {
		if src == dst && strings.HasPrefix(dst, filepath.Join(f.common, "refs")+"/") || strings.HasPrefix(dst, filepath.Join(f.common, "logs")+"/") {
			t.Errorf("a folder of the repository's own refs is writable: %s", dst)
		}
	}
	// Twin: without a store the branch's folder is writable, as before.
	in.Worktrees[0].RefStore = ""
	if p, err = BuildPlan(in); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.String(), "the folder of the attempt's branch") {
		t.Errorf("without a store the branch folder should be writable:\n%s", p)
	}
}

// The empty files' descriptor belongs to each command: a caller closes
// ExtraFiles after the start (internal/proc does), and the next command
// must still read an empty file, not a closed or reused descriptor.
func TestEmptyFileDescriptorPerCommand(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("bubblewrap only")
	}
	needSandbox(t, "it runs the real sandbox")
	f := newFixture(t)
	mcp := filepath.Join(f.wt, ".mcp.json")
	for i := 0; i < 3; i++ {
		p := mustPlan(t, f.input())
		if p.dataFiles() == 0 {
			t.Fatal("the fixture's plan has no empty-file stand-in; the test needs one")
		}
		cmd, err := Command(context.Background(), p, []string{"/bin/sh", "-c", `test -f "$0" && test ! -s "$0" && ! (echo x > "$0") 2>/dev/null`, mcp})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for _, x := range cmd.ExtraFiles {
			x.Close()
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("run %d: the empty read-only .mcp.json stand-in: %v %s", i+1, err, out.String())
		}
		if err := p.Cleanup(); err != nil {
			t.Error(err)
		}
		if exists(mcp) {
			t.Errorf("run %d left %s on disk", i+1, mcp)
		}
	}
}

// Cursor's login folders get the same treatment: what starts a program
// (mcp.json, hooks.json, cli-config.json, extensions/, rules/) read-only
// from the original, session state (chats/, projects/) empty, auth.json
// carried back.
func TestPlanCursorLoginFolders(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("login copies are Linux's: macOS gives a fresh HOME")
	}
	f := newFixture(t)
	cursor, cfg := filepath.Join(f.home, ".cursor"), filepath.Join(f.home, ".config", "cursor")
	write(t, filepath.Join(cursor, "mcp.json"), `{"mcpServers":{}}`)
	write(t, filepath.Join(cursor, "extensions", "ext", "main.js"), "x")
	write(t, filepath.Join(cursor, "chats", "c1", "store.db"), "another project's chat")
	write(t, filepath.Join(cfg, "auth.json"), `{"accessToken":"a"}`)
	write(t, filepath.Join(cfg, "cli-config.json"), `{}`)
	in := f.input()
	in.LoginPaths = []string{cursor, cfg}
	p := mustPlan(t, in)
	ro := rulePaths(p.ReadOnly)
	for _, x := range []string{filepath.Join(cursor, "mcp.json"), filepath.Join(cursor, "extensions"), filepath.Join(cursor, "hooks.json"), filepath.Join(cursor, "rules"), filepath.Join(cfg, "cli-config.json")} {
		if !slices.Contains(ro, x) {
			t.Errorf("%s is not read-only: %v", x, ro)
		}
	}
	if len(p.LoginCopies) != 2 || !slices.Contains(p.LoginCopies[0].Empty, "chats") || !slices.Equal(p.LoginCopies[1].Credentials, []string{"auth.json"}) {
		t.Errorf("cursor login copies: %+v", p.LoginCopies)
	}
}
