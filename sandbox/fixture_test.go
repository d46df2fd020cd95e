package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// needTool skips (or, on CI, fails) a test when a tool is missing.
func needTool(t testing.TB, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		msg := path + " is not installed: " + why
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// needSandbox skips (or, on CI, fails) a test that runs the real
// bubblewrap sandbox when bwrap is missing or cannot run here.
func needSandbox(t testing.TB, why string) {
	t.Helper()
	needTool(t, "/usr/bin/bwrap", why)
	if r := Check(); !r.Available {
		msg := "the sandbox cannot run here: " + r.Msg
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// needRoot skips (or, on CI, which runs as root, fails) a test that needs root.
func needRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		msg := "needs root: " + why
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// fixture is a temporary factory: a fake home with secrets, a repository
// with a linked worktree made by the git binary, an attempt folder.
type fixture struct {
	root, home, repo, common, wt, gitdir, attempt, artifacts, tmp string
	secretStore, outside, readonly                                string
	// hostTmp is a folder in the host's real /tmp, where agent sockets
	// and session buses live; the sandbox's /tmp is private.
	hostTmp string
	// path is the PATH of the plans ("": the test's own).
	path string
}

const (
	sshSecret   = "SSH-PRIVATE-KEY-c0ffee"
	awsSecret   = "AWS-SECRET-deadbeef"
	storeSecret = "STORE-SECRET-8badf00d"
	envSecret   = "ENV-FILE-SECRET-feedface"
)

func write(t testing.TB, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/git", append([]string{"-c", "safe.directory=*", "-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	needTool(t, "/usr/bin/git", "the tests make real repositories")
	// Not under /tmp: the sandbox's own /tmp is private, so a fixture there
	// would be out of reach whatever the plan says, and an attack on it
	// would prove nothing. /var/tmp is seen as the host has it. The
	// folder is made reachable for the unprivileged run here, never by
	// changing the modes of /var/tmp or anything above it.
	base, err := os.MkdirTemp("/var/tmp", "kusaw-sandbox-test-")
	if err != nil {
		base = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(base) })
		os.Chmod(base, 0o755)
	}
	root, err := filepath.EvalSymlinks(base)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{root: root}
	f.home = filepath.Join(root, "home")
	write(t, filepath.Join(f.home, ".ssh", "id_ed25519"), sshSecret)
	write(t, filepath.Join(f.home, ".aws", "credentials"), awsSecret)
	write(t, filepath.Join(f.home, ".claude", "login.json"), `{"login":"agent"}`)
	write(t, filepath.Join(f.home, ".claude.json"), `{}`)
	write(t, filepath.Join(f.home, ".bashrc"), "# rc\n")
	f.secretStore = filepath.Join(root, "secrets")
	write(t, filepath.Join(f.secretStore, "store.json"), storeSecret)
	hostTmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f.hostTmp = hostTmp
	f.outside = filepath.Join(hostTmp, "outside")
	write(t, filepath.Join(f.outside, "victim.txt"), "original\n")
	f.readonly = filepath.Join(root, "shared")
	write(t, filepath.Join(f.readonly, "victim.txt"), "original\n")

	f.repo = filepath.Join(root, "repo")
	if err := os.MkdirAll(f.repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, f.repo, "init", "-q", "-b", "main")
	write(t, filepath.Join(f.repo, "README.md"), "hello\n")
	write(t, filepath.Join(f.repo, ".claude", "settings.json"), `{"hooks":{}}`)
	write(t, filepath.Join(f.repo, ".claude", "settings.local.json"), `{}`)
	for _, d := range []string{"hooks", "commands", "agents", "skills"} {
		write(t, filepath.Join(f.repo, ".claude", d, "keep.md"), "x\n")
	}
	write(t, filepath.Join(f.repo, ".vscode", "settings.json"), `{}`) // tasks.json missing: the whole folder is read-only
	write(t, filepath.Join(f.repo, ".devcontainer", "devcontainer.json"), `{}`)
	write(t, filepath.Join(f.repo, ".githooks", "pre-commit"), "#!/bin/sh\nexit 0\n")
	write(t, filepath.Join(f.repo, "docs", "a.md"), "a\n")
	git(t, f.repo, "add", "-A")
	git(t, f.repo, "commit", "-q", "-m", "init")
	git(t, f.repo, "config", "core.hooksPath", ".githooks")
	write(t, filepath.Join(f.repo, ".env"), envSecret) // uncommitted, in the user's checkout
	f.common = filepath.Join(f.repo, ".git")

	f.attempt = filepath.Join(root, "state", "runs", "r1", "steps", "build", "1")
	f.artifacts = filepath.Join(f.attempt, "artifacts")
	f.tmp = filepath.Join(f.attempt, "tmp")
	for _, d := range []string{f.artifacts, f.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(f.attempt, "events.jsonl"), "{}\n")
	f.wt = filepath.Join(f.attempt, "worktrees", "app")
	git(t, f.repo, "worktree", "add", "-q", "-b", "kusaw/r1/build/1", f.wt)
	f.gitdir = filepath.Join(f.common, "worktrees", "app")
	if _, err := os.Stat(f.gitdir); err != nil {
		t.Fatalf("git made no worktree folder: %v", err)
	}
	return f
}

// input is the plan input of the fixture's attempt.
// testClaudeRule is Claude Code's refresh as providers describes it.
var testClaudeRule = CredentialRule{Name: ".credentials.json", Hosts: []string{"platform.claude.com", "console.anthropic.com"},
	Tokens: []string{"/claudeAiOauth/accessToken", "/claudeAiOauth/refreshToken"}, Expiry: []string{"/claudeAiOauth/expiresAt"}}

func (f *fixture) input() Input {
	path := os.Getenv("PATH")
	if f.path != "" {
		path = f.path
	}
	return Input{
		Worktrees:       []Worktree{{Repo: "app", Path: f.wt, GitDir: f.gitdir, CommonDir: f.common, Writable: true}},
		AttemptDir:      f.attempt,
		ArtifactsDir:    f.artifacts,
		TmpDir:          f.tmp,
		Home:            f.home,
		LoginPaths:      []string{filepath.Join(f.home, ".claude"), filepath.Join(f.home, ".claude.json")},
		CredentialRules: []CredentialRule{testClaudeRule},
		AllowRead:       []string{f.readonly},
		HiddenPaths:     []string{f.secretStore},
		Env: map[string]string{
			"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@example.invalid",
			"GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@example.invalid",
			"STEP_TOKEN": "declared-by-step", "SSH_AUTH_SOCK": filepath.Join(f.hostTmp, "agent.sock"),
		},
		Network: NetworkNone,
		Host: &Host{Env: []string{"PATH=" + path, "LANG=C.UTF-8",
			"AWS_SECRET_ACCESS_KEY=" + awsSecret, "SSH_AUTH_SOCK=/run/user/0/ssh", "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus"}},
	}
}
