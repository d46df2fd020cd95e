//go:build darwin

package e2e

// The macOS escape suite: the cases of the Linux suite (sandbox/escape_test.go)
// run against the Seatbelt backend on a real Mac, plus the macOS-only
// ones (Keychain, pasteboard, LaunchServices, Apple Events, launchd jobs,
// command lines of other processes, case-insensitive paths) and the
// first-run checklist of docs/sandbox-macos.md (DNS, the data volume,
// disk images, daemons that fetch, lsregister, lldb, everyday tools). Every attack
// has a legitimate twin that must keep working. A documented macOS limit
// (a setsid process survives the step) is tested for what still holds:
// the survivor stays under the profile.
//
// It was written without a Mac to run it on: the first run says what holds.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kusaw/kusaw/sandbox"
)

const (
	macSSHSecret   = "SSH-PRIVATE-KEY-c0ffee"
	macAWSSecret   = "AWS-SECRET-deadbeef"
	macStoreSecret = "STORE-SECRET-8badf00d"
	macEnvSecret   = "ENV-FILE-SECRET-feedface"
)

// The helper runs inside the sandbox for what a shell cannot do. It is
// built from this source once per run.
const macHelperSource = `package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

func main() {
	fail := func(err error) { fmt.Fprintln(os.Stderr, "helper:", err); os.Exit(1) }
	switch os.Args[1] {
	case "connect": // a Unix socket
		c, err := net.DialTimeout("unix", os.Args[2], time.Second)
		if err != nil {
			fail(err)
		}
		c.Close()
	case "dial": // host:port
		c, err := net.DialTimeout("tcp", os.Args[2], time.Second)
		if err != nil {
			fail(err)
		}
		c.Close()
	case "selfsock": // listen on a Unix socket and connect to it
		// By a relative name: a socket's path is limited to 104 bytes.
		if err := os.Chdir(filepath.Dir(os.Args[2])); err != nil {
			fail(err)
		}
		name := filepath.Base(os.Args[2])
		l, err := net.Listen("unix", name)
		if err != nil {
			fail(err)
		}
		defer l.Close()
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
			}
		}()
		c, err := net.Dial("unix", name)
		if err != nil {
			fail(err)
		}
		c.Close()
	case "resolve": // a DNS lookup through the system's resolver (mDNSResponder)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, os.Args[2])
		if err != nil {
			fail(err)
		}
		fmt.Println(addrs)
	case "listen": // bind and listen on loopback
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fail(err)
		}
		l.Close()
	default:
		fail(fmt.Errorf("unknown helper %q", os.Args[1]))
	}
}
`

type macFixture struct {
	root, home, repo, common, wt, gitdir, attempt, artifacts, tmp string
	store, outside, shared, helper                                string
}

func macGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func newMacFixture(t *testing.T) *macFixture {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir()) // /private/var/folders/...
	if err != nil {
		t.Fatal(err)
	}
	f := &macFixture{root: root}
	f.home = filepath.Join(root, "home")
	writeFile(t, filepath.Join(f.home, ".ssh", "id_ed25519"), macSSHSecret)
	writeFile(t, filepath.Join(f.home, ".aws", "credentials"), macAWSSecret)
	writeFile(t, filepath.Join(f.home, ".zshrc"), "# rc\n")
	writeFile(t, filepath.Join(f.home, ".claude", "settings.json"), "{}\n")
	writeFile(t, filepath.Join(f.home, ".claude", "login.json"), `{"login":"agent"}`)
	f.store = filepath.Join(root, "secrets")
	writeFile(t, filepath.Join(f.store, "store.json"), macStoreSecret)
	f.outside = filepath.Join(root, "outside")
	writeFile(t, filepath.Join(f.outside, "victim.txt"), "original\n")
	f.shared = filepath.Join(root, "shared")
	writeFile(t, filepath.Join(f.shared, "victim.txt"), "original\n")

	f.repo = filepath.Join(root, "repo")
	macGit(t, root, "init", "-q", "-b", "main", f.repo)
	writeFile(t, filepath.Join(f.repo, "README.md"), "hello\n")
	writeFile(t, filepath.Join(f.repo, ".claude", "settings.json"), `{"hooks":{}}`)
	writeFile(t, filepath.Join(f.repo, ".claude", "settings.local.json"), `{}`)
	for _, d := range []string{"hooks", "commands", "agents", "skills"} {
		writeFile(t, filepath.Join(f.repo, ".claude", d, "keep.md"), "x\n")
	}
	writeFile(t, filepath.Join(f.repo, ".vscode", "settings.json"), `{}`)
	writeFile(t, filepath.Join(f.repo, ".devcontainer", "devcontainer.json"), `{}`)
	writeFile(t, filepath.Join(f.repo, ".githooks", "pre-commit"), "#!/bin/sh\nexit 0\n")
	writeFile(t, filepath.Join(f.repo, "docs", "a.md"), "a\n")
	macGit(t, f.repo, "add", "-A")
	macGit(t, f.repo, "commit", "-q", "-m", "init")
	macGit(t, f.repo, "config", "core.hooksPath", ".githooks")
	writeFile(t, filepath.Join(f.repo, ".env"), macEnvSecret)
	f.common = filepath.Join(f.repo, ".git")

	f.attempt = filepath.Join(root, "state", "runs", "r1", "steps", "build", "1")
	f.artifacts = filepath.Join(f.attempt, "artifacts")
	f.tmp = filepath.Join(f.attempt, "tmp")
	for _, d := range []string{f.artifacts, f.tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(f.attempt, "events.jsonl"), "{}\n")
	f.wt = filepath.Join(f.attempt, "worktrees", "app")
	macGit(t, f.repo, "worktree", "add", "-q", "-b", "kusaw/r1/build/1", f.wt)
	f.gitdir = filepath.Join(f.common, "worktrees", "app")

	f.helper = filepath.Join(root, "bin", "helper")
	src := filepath.Join(root, "helper-src")
	writeFile(t, filepath.Join(src, "main.go"), macHelperSource)
	writeFile(t, filepath.Join(src, "go.mod"), "module helper\n\ngo 1.21\n")
	build := exec.Command("go", "build", "-o", f.helper, ".")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the helper: %v\n%s", err, out)
	}
	return f
}

func (f *macFixture) input() sandbox.Input {
	return sandbox.Input{
		Worktrees:    []sandbox.Worktree{{Repo: "app", Path: f.wt, GitDir: f.gitdir, CommonDir: f.common, Writable: true}},
		AttemptDir:   f.attempt,
		ArtifactsDir: f.artifacts,
		TmpDir:       f.tmp,
		Home:         f.home,
		FreshHome:    true,
		AllowRead:    []string{f.shared},
		HiddenPaths:  []string{f.store},
		// Passed as Linux would; on macOS the plan leaves them out.
		LoginPaths: []string{filepath.Join(f.home, ".claude")},
		Env: map[string]string{
			"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@example.invalid",
			"GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@example.invalid",
			"STEP_TOKEN": "declared-by-step", "SSH_AUTH_SOCK": filepath.Join(f.root, "agent.sock"),
		},
		Network:       sandbox.NetworkNone,
		ExtraBinaries: []string{f.helper},
		Host: &sandbox.Host{Env: []string{"PATH=" + os.Getenv("PATH"), "LANG=en_US.UTF-8",
			"AWS_SECRET_ACCESS_KEY=" + macAWSSecret, "SSH_AUTH_SOCK=/private/tmp/com.apple.launchd.x/Listeners"}},
	}
}

type macSuite struct {
	f         *macFixture
	vars      map[string]string
	leasePort int
	aia       *aiaServer
}

const macLSRegister = "/System/Library/Frameworks/CoreServices.framework/Frameworks/LaunchServices.framework/Support/lsregister"

func firstLines(s string, n int) string {
	l := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	return strings.Join(l[:min(n, len(l))], " | ")
}

// aiaServer is a loopback HTTP server that counts the requests for each
// certificate's AIA, OCSP and CRL addresses. The step cannot reach it (in
// allowlist mode only the lease's port is open); a daemon outside could.
type aiaServer struct {
	url  string
	mu   sync.Mutex
	seen map[string]int
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newAIAServer(t *testing.T) *aiaServer {
	a := &aiaServer{seen: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen[strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0]]++
		a.mu.Unlock()
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	a.url = srv.URL
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kusaw probe issuer (not given to the verifier)"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	a.ca, _ = x509.ParseCertificate(der)
	a.key = key
	return a
}

// cert writes a leaf whose issuer is only reachable through its AIA
// address, so a verifier that fetches asks the server for it.
func (a *aiaServer) cert(t *testing.T, dir, tag string) string {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "kusaw-probe.example"},
		DNSNames: []string{"kusaw-probe.example"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IssuingCertificateURL: []string{a.url + "/" + tag + "/issuer.cer"},
		OCSPServer:            []string{a.url + "/" + tag + "/ocsp"},
		CRLDistributionPoints: []string{a.url + "/" + tag + "/crl"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.ca, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, tag+".pem")
	writeFile(t, p, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	return p
}

func (a *aiaServer) hits(tag string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[tag]
}

const macPrelude = `
refused() { if "$@" >/dev/null 2>&1; then echo "ESCAPED: $*"; exit 1; fi; }
`

func (s *macSuite) run(t *testing.T, edit func(*sandbox.Input), opt sandbox.SeatbeltOptions, script string) (int, string) {
	t.Helper()
	in := s.f.input()
	if edit != nil {
		edit(&in)
	}
	p, err := sandbox.BuildPlan(in)
	if err != nil {
		t.Fatalf("BuildPlan: %v", err)
	}
	if p.Backend != "seatbelt" {
		t.Fatalf("the plan's backend on macOS is %q", p.Backend)
	}
	var sb strings.Builder
	sb.WriteString(macPrelude)
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
	c, err := sandbox.SeatbeltCommand(ctx, p, []string{"/bin/sh", "-c", sb.String()}, opt, nil)
	if err != nil {
		t.Fatalf("SeatbeltCommand: %v", err)
	}
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err = c.Run()
	if cerr := p.Cleanup(); cerr != nil {
		t.Errorf("cleanup: %v", cerr)
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running sandbox-exec: %v\n%s", err, out.String())
		}
		code = ee.ExitCode()
	}
	return code, out.String()
}

type macCase struct {
	name     string
	attack   string // must end by exit 42 with every operation refused
	twin     string // the legitimate use: must exit 0
	edit     func(*sandbox.Input)
	opt      sandbox.SeatbeltOptions
	check    func(t *testing.T, f *macFixture)
	twinHost func(t *testing.T, f *macFixture)
	before   func(t *testing.T, f *macFixture) string // non-empty: skip with this reason
}

func macUnchanged(path, want string) func(*testing.T, *macFixture) {
	return func(t *testing.T, f *macFixture) {
		b, err := os.ReadFile(strings.ReplaceAll(path, "$ROOT", f.root))
		if err != nil || string(b) != want {
			t.Errorf("%s changed on the host: %q %v", path, b, err)
		}
	}
}

func macAbsent(paths ...string) func(*testing.T, *macFixture) {
	return func(t *testing.T, f *macFixture) {
		for _, p := range paths {
			p = strings.ReplaceAll(p, "$ROOT", f.root)
			if _, err := os.Lstat(p); err == nil {
				t.Errorf("%s exists on the host", p)
			}
		}
	}
}

func macPresent(paths ...string) func(*testing.T, *macFixture) {
	return func(t *testing.T, f *macFixture) {
		for _, p := range paths {
			p = strings.ReplaceAll(p, "$ROOT", f.root)
			if _, err := os.Lstat(p); err != nil {
				t.Errorf("%s was not written on the host", p)
			}
		}
	}
}

// hostWorks skips a case whose service does not work outside the sandbox
// either (a CI Mac without a login session, say): then the refusal inside
// would prove nothing.
func hostWorks(argv ...string) func(*testing.T, *macFixture) string {
	return func(t *testing.T, f *macFixture) string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Sprintf("%s does not work outside the sandbox either (%v: %s)", strings.Join(argv, " "), err, bytes.TrimSpace(out))
		}
		return ""
	}
}

const wtRel = "$ROOT/state/runs/r1/steps/build/1/worktrees/app"

// macGoCache is a Go build cache kept between runs (per user), so the go
// build twin does not rebuild the standard library each time.
func macGoCache(t *testing.T) string {
	d := filepath.Join(os.TempDir(), fmt.Sprintf("kusaw-seatbelt-test-gocache-%d", os.Geteuid()))
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := filepath.EvalSymlinks(d)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func macCases(t0 *testing.T, s *macSuite) []macCase {
	netNone := func(in *sandbox.Input) { in.Network = sandbox.NetworkNone }
	allowlist := func(in *sandbox.Input) {
		in.Network = sandbox.NetworkAllowlist
		in.Proxy = &sandbox.Proxy{Port: s.leasePort, Env: []string{"HTTPS_PROXY=http://127.0.0.1:" + strconv.Itoa(s.leasePort)}}
	}
	return []macCase{
		// The Linux suite's cases.
		{name: "write a read-only shared path",
			attack: `refused sh -c "echo x > $SHARED/victim.txt"; exit 42`,
			twin:   `cat $SHARED/victim.txt && echo ok > $WT/new.txt`,
			check:  macUnchanged("$ROOT/shared/victim.txt", "original\n"), twinHost: macPresent(wtRel + "/new.txt")},
		{name: "write a system folder",
			attack: `refused sh -c "echo x > /usr/local/kusaw-escape"; refused sh -c "echo x > /Library/kusaw-escape"; refused sh -c "echo x > /Applications/kusaw-escape"; exit 42`,
			twin:   `echo ok > $ART/report.txt`,
			check: func(t *testing.T, f *macFixture) {
				macAbsent("/usr/local/kusaw-escape", "/Library/kusaw-escape", "/Applications/kusaw-escape")(t, f)
			}},
		{name: "write outside and into /tmp",
			attack: `refused mkdir -p $OUTSIDE/sub; refused sh -c "echo x > $OUTSIDE/victim.txt"; refused sh -c "echo y > /tmp/kusaw-planted-$$"; refused sh -c "echo y > /private/tmp/kusaw-planted-$$"; exit 42`,
			twin:   `echo ok > $TMP/scratch && test "$TMPDIR" = "$TMP"`,
			check:  macUnchanged("$ROOT/outside/victim.txt", "original\n"), twinHost: macPresent("$ROOT/state/runs/r1/steps/build/1/tmp/scratch")},
		{name: "write the attempt's records",
			attack: `refused sh -c "echo x >> $ATTEMPT/events.jsonl"; refused sh -c "echo x > $ATTEMPT/attempt.json"; exit 42`,
			twin:   `echo ok > $ART/out.txt`,
			check:  macUnchanged("$ROOT/state/runs/r1/steps/build/1/events.jsonl", "{}\n")},
		{name: "write the real home; the fresh HOME works",
			attack: `refused sh -c "echo evil >> $HOME_/.zshrc"; refused mkdir -p $HOME_/Library/LaunchAgents; refused sh -c "echo x > $HOME_/.profile"; exit 42`,
			twin:   `test "$HOME" = "$TMP/home" && test "$CFFIXED_USER_HOME" = "$HOME" && echo '{}' > $HOME/.claude.json`,
			check:  macUnchanged("$ROOT/home/.zshrc", "# rc\n"), twinHost: macPresent("$ROOT/state/runs/r1/steps/build/1/tmp/home/.claude.json")},
		{name: "plant hooks in the agent's login folder (not mounted on macOS)",
			attack: `refused sh -c "echo '{\"hooks\":1}' > $HOME_/.claude/settings.json"; refused sh -c "echo x > $HOME_/.claude/hooks/evil.sh"; refused grep -q agent $HOME_/.claude/login.json; exit 42`,
			twin:   `mkdir -p $HOME/.claude/projects && echo s > $HOME/.claude/projects/session.jsonl`,
			check:  macUnchanged("$ROOT/home/.claude/settings.json", "{}\n")},
		{name: "write the user's own checkout",
			attack: `refused sh -c "echo x > $REPO/README.md"; refused sh -c "echo x > $REPO/planted"; exit 42`,
			twin:   `echo more >> $WT/README.md`,
			check:  macUnchanged("$ROOT/repo/README.md", "hello\n")},
		{name: "write .git/hooks",
			attack: `refused sh -c "echo evil > $COMMON/hooks/pre-commit"; refused mkdir $COMMON/hooks/x; exit 42`,
			twin:   `echo c > $WT/c.txt && git add c.txt && git commit -q -m twin && git log -1 --format=%s | grep -q twin`,
			check:  macAbsent("$ROOT/repo/.git/hooks/pre-commit"),
			twinHost: func(t *testing.T, f *macFixture) {
				if macGit(t, f.repo, "log", "-1", "--format=%s", "kusaw/r1/build/1") != "twin" {
					t.Errorf("the commit made inside is not on the attempt branch")
				}
			}},
		{name: "write .git/config",
			attack: `refused sh -c "echo '[core] hooksPath=/tmp' >> $COMMON/config"; refused git config core.hooksPath /tmp/evil; exit 42`,
			twin:   `test "$(git config --get core.hooksPath)" = .githooks`,
			check: func(t *testing.T, f *macFixture) {
				if v := macGit(t, f.repo, "config", "--get", "core.hooksPath"); v != ".githooks" {
					t.Errorf("core.hooksPath changed to %q", v)
				}
			}},
		{name: "write .git/info and packed-refs",
			attack: `refused sh -c "echo '* filter=evil' > $COMMON/info/attributes"; refused sh -c "echo x > $COMMON/packed-refs"; refused sh -c "echo x > $COMMON/commondir"; exit 42`,
			twin:   `git status --porcelain >/dev/null && git branch --list >/dev/null`,
			check:  macAbsent("$ROOT/repo/.git/info/attributes", "$ROOT/repo/.git/commondir")},
		{name: "replace packed history or add alternates",
			attack: `refused sh -c "echo x > $COMMON/objects/pack/evil.pack"; refused sh -c "echo $WT > $COMMON/objects/info/alternates"; exit 42`,
			twin:   `echo y > $WT/y.txt && git add y.txt && git commit -q -m loose && git cat-file -e HEAD:y.txt`,
			check:  macAbsent("$ROOT/repo/.git/objects/info/alternates", "$ROOT/repo/.git/objects/pack/evil.pack")},
		{name: "switch the worktree to the user's branch",
			attack: `refused sh -c "echo 'ref: refs/heads/main' > $GITDIR/HEAD"; refused git checkout -q -b other; refused git checkout -q --detach; exit 42`,
			twin:   `git commit -q --allow-empty -m amendme && git commit -q --amend --allow-empty -m amended && git reset -q --soft HEAD`,
			check: func(t *testing.T, f *macFixture) {
				if h, _ := os.ReadFile(filepath.Join(f.gitdir, "HEAD")); string(h) != "ref: refs/heads/kusaw/r1/build/1\n" {
					t.Errorf("HEAD changed: %q", h)
				}
			}},
		{name: "move the user's branches and tags",
			attack: `refused sh -c "git rev-parse HEAD > $COMMON/refs/heads/main"; refused git branch -f main HEAD; refused git tag evil; refused git update-ref refs/heads/main HEAD; exit 42`,
			twin:   `git commit -q --allow-empty -m twin2 && git log -1 --format=%s | grep -q twin2`,
			check: func(t *testing.T, f *macFixture) {
				if macGit(t, f.repo, "log", "-1", "--format=%s", "main") != "init" {
					t.Errorf("main moved")
				}
			}},
		{name: "redirect the worktree's git folder",
			attack: `refused sh -c "echo /tmp > $GITDIR/commondir"; refused sh -c "echo x > $GITDIR/gitdir"; refused mkdir $COMMON/worktrees/evil; exit 42`,
			twin:   `echo i > $WT/i.txt && git add i.txt && git reset -q i.txt`,
			check:  macUnchanged("$ROOT/repo/.git/worktrees/app/commondir", "../..\n")},
		{name: "replace the worktree's .git file",
			attack: `refused sh -c "echo 'gitdir: /tmp/evil' > $WT/.git"; refused rm -f $WT/.git; refused mv $WT/.git $WT/.git-old; exit 42`,
			twin:   `grep -q gitdir: $WT/.git && git rev-parse --git-dir >/dev/null`},
		{name: "rename .claude away and plant a copy",
			attack: `refused mv $WT/.claude $WT/.claude-old; refused rmdir $WT/.claude; exit 42`,
			twin:   `mkdir $WT/movable && mv $WT/movable $WT/moved && rmdir $WT/moved`,
			check:  macPresent(wtRel + "/.claude/settings.json")},
		{name: "rename the worktree",
			attack: `refused mv $WT $WT-x; exit 42`,
			twin:   `cp -R $WT/docs $WT/docs2 && rm -rf $WT/docs2`},
		{name: "write .claude/settings.json",
			attack:   `refused sh -c "echo '{\"hooks\":1}' > $WT/.claude/settings.json"; refused rm $WT/.claude/settings.json; refused mv $WT/.claude/settings.json $WT/s; exit 42`,
			twin:     `echo note > $WT/.claude/notes.md`,
			check:    macUnchanged(wtRel+"/.claude/settings.json", `{"hooks":{}}`),
			twinHost: macPresent(wtRel + "/.claude/notes.md")},
		{name: "write .claude/settings.local.json",
			attack: `refused sh -c "echo x > $WT/.claude/settings.local.json"; exit 42`,
			twin:   `cat $WT/.claude/settings.local.json`,
			check:  macUnchanged(wtRel+"/.claude/settings.local.json", `{}`)},
		{name: ".mcp.json (missing) cannot be created",
			attack: `refused sh -c "echo '{\"mcpServers\":{}}' > $WT/.mcp.json"; exit 42`,
			twin:   `echo '{}' > $WT/other.json`,
			check:  macAbsent(wtRel + "/.mcp.json")},
		{name: ".vscode/tasks.json (missing) cannot be created",
			attack: `refused sh -c "echo x > $WT/.vscode/tasks.json"; refused sh -c "echo x > $WT/.vscode/settings.json"; exit 42`,
			twin:   `cat $WT/.vscode/settings.json`,
			check:  macAbsent(wtRel + "/.vscode/tasks.json")},
		{name: ".cursor (missing) cannot be created",
			attack: `refused mkdir -p $WT/.cursor/rules; refused sh -c "echo x > $WT/.cursor/hooks.json"; refused ln -s /tmp $WT/.cursor; exit 42`,
			twin:   `mkdir -p $WT/newdir/sub`,
			check:  macAbsent(wtRel + "/.cursor")},
		{name: "write .devcontainer",
			attack: `refused sh -c "echo x > $WT/.devcontainer/devcontainer.json"; refused sh -c "echo x > $WT/.devcontainer/post.sh"; exit 42`,
			twin:   `cat $WT/.devcontainer/devcontainer.json`,
			check:  macUnchanged(wtRel+"/.devcontainer/devcontainer.json", "{}")},
		{name: ".husky (missing) cannot be created",
			attack: `refused sh -c "mkdir -p $WT/.husky && echo x > $WT/.husky/pre-commit"; exit 42`,
			twin:   `mkdir -p $WT/hooks-of-my-app && echo x > $WT/hooks-of-my-app/run`,
			check:  macAbsent(wtRel + "/.husky")},
		{name: "write the core.hooksPath folder",
			attack: `refused sh -c "echo evil > $WT/.githooks/pre-commit"; refused sh -c "echo evil > $WT/.githooks/post-commit"; refused mv $WT/.githooks $WT/gh; exit 42`,
			twin:   `cat $WT/.githooks/pre-commit >/dev/null`,
			check:  macAbsent(wtRel + "/.githooks/post-commit")},
		{name: "remove a protected folder",
			attack: `refused rm -rf $WT/.claude/hooks; refused rm -rf $WT/.devcontainer; exit 42`,
			twin:   `mkdir $WT/gone && touch $WT/gone/f && rm -rf $WT/gone`,
			check:  macPresent(wtRel + "/.claude/hooks/keep.md")},
		{name: "write .claude/hooks, commands, agents, skills",
			attack: `for d in hooks commands agents skills; do refused sh -c "echo x > $WT/.claude/$d/evil.md"; done; exit 42`,
			twin:   `for d in hooks commands agents skills; do cat $WT/.claude/$d/keep.md >/dev/null || exit 1; done`,
			check:  macAbsent(wtRel + "/.claude/hooks/evil.md")},
		{name: "hard-link a protected file and write through the link",
			attack: `refused ln $WT/.claude/settings.json $WT/s.json; refused ln $COMMON/config $WT/cfg; refused ln $GITDIR/commondir $TMP/cd2; ` +
				`for l in $WT/s.json $WT/cfg $TMP/cd2; do if [ -e $l ]; then refused sh -c "echo evil >> $l"; fi; done; exit 42`,
			twin:  `ln $WT/README.md $WT/README.hard && rm $WT/README.hard`,
			check: macUnchanged(wtRel+"/.claude/settings.json", `{"hooks":{}}`)},
		{name: "symlink out of the worktree",
			attack: `ln -s $SHARED/victim.txt $WT/evil && refused sh -c "echo x > $WT/evil"; ln -s $HOME_/.ssh/id_ed25519 $WT/k && refused grep -q SSH-PRIVATE $WT/k; rm -f $WT/evil $WT/k; exit 42`,
			twin:   `ln -s README.md $WT/r && echo more >> $WT/r && rm $WT/r`,
			check:  macUnchanged("$ROOT/shared/victim.txt", "original\n")},
		{name: "read ~/.ssh",
			attack: `refused grep -rq SSH-PRIVATE $HOME_/.ssh; refused ls $HOME_/.ssh; refused cat $HOME_/.ssh/id_ed25519; exit 42`,
			twin:   `ls $WT >/dev/null && cat $WT/README.md >/dev/null`},
		{name: "read ~/.aws and list the home",
			attack: `refused grep -rq AWS-SECRET $HOME_/.aws; refused ls $HOME_; exit 42`,
			twin:   `ls $HOME >/dev/null`},
		{name: "read the secret store",
			attack: `refused grep -rq STORE-SECRET $STORE; refused ls $STORE; exit 42`,
			twin:   `cat /usr/share/dict/words >/dev/null 2>&1 || cat /etc/hosts >/dev/null`},
		{name: "read the user's uncommitted .env",
			attack: `refused grep -q ENV-FILE-SECRET $REPO/.env; refused ls $REPO; exit 42`,
			twin:   `grep -q hello $WT/README.md`},
		{name: "read other apps' temp folders",
			attack: `refused ls "$(dirname "$ROOT")"; refused ls /private/var/folders; exit 42`,
			twin:   `ls $TMP >/dev/null`},
		{name: "the user's temp folder is hidden, xcrun's cache included",
			attack: `refused ls "$USERTEMP"; refused sh -c "echo x > $USERTEMP/kusaw-planted-$MARKER"; refused cat "$USERTEMP/xcrun_db"; refused sh -c "echo x >> $USERTEMP/xcrun_db"; exit 42`,
			twin:   `out=$(git status 2>&1) && ! echo "$out" | grep -q -e xcrun_db -e confstr -e 'not permitted'`,
			check: func(t *testing.T, f *macFixture) {
				macAbsent(filepath.Join(s.vars["USERTEMP"], "kusaw-planted-"+s.vars["MARKER"]))(t, f)
			}},
		{name: "inherit secrets from kusaw's environment",
			attack: `refused sh -c 'env | grep -q AWS-SECRET'; refused test -n "$AWS_SECRET_ACCESS_KEY"; refused test -n "$SSH_AUTH_SOCK"; exit 42`,
			twin:   `test "$STEP_TOKEN" = declared-by-step && test -n "$PATH"`},
		{name: "reach an SSH agent socket", edit: netNone,
			attack: `refused $H connect $AGENTSOCK; exit 42`,
			twin:   `$H selfsock $TMP/own.sock`},
		{name: "reach host loopback TCP", edit: netNone,
			attack: `refused $H dial $HOSTTCP; refused $H dial $LEASE; exit 42`,
			twin:   `$H listen`, opt: sandbox.SeatbeltOptions{LocalBind: true}},
		{name: "allowlist: only the lease's port", edit: allowlist,
			attack: `refused $H dial $HOSTTCP; refused $H connect /var/run/mDNSResponder; refused $H listen; exit 42`,
			twin:   `$H dial $LEASE`},
		{name: "see or signal host processes",
			attack: `refused kill -0 $HOSTPID; refused sh -c 'ps -axww -o command= | grep -q kusaw-marker-$MARKER'; refused sh -c 'ps -ww -p $MARKERPID -o command= | grep -q kusaw-marker'; exit 42`,
			twin:   `sleep 5 & kill -0 $! && ps -p $! -o comm= | grep -q sleep && kill $!`},
		{name: "a background process outlives the step",
			attack: `(sleep 1; echo late > $WT/late.txt) & exit 42`,
			twin:   `(sleep 0.2; echo bg > $WT/bg.txt) & wait; test -f $WT/bg.txt`,
			check: func(t *testing.T, f *macFixture) {
				time.Sleep(1500 * time.Millisecond)
				macAbsent(wtRel+"/late.txt")(t, f)
			}},
		{name: "a detached process stays under the profile (it may outlive the step: a documented limit)",
			attack: `/usr/bin/perl -MPOSIX -e 'fork and exit; POSIX::setsid(); sleep 1; open(F, ">", "$ENV{OUTSIDE}/late.txt") and print F "x"' >/dev/null 2>&1 & exit 42`,
			twin:   `/usr/bin/perl -MPOSIX -e 'POSIX::setsid(); open(F, ">", "$ENV{WT}/daemon.txt") or exit 1'`,
			check: func(t *testing.T, f *macFixture) {
				time.Sleep(1500 * time.Millisecond)
				macAbsent("$ROOT/outside/late.txt")(t, f)
			},
			twinHost: macPresent(wtRel + "/daemon.txt")},
		{name: "a controlling terminal or leaked descriptor",
			attack: `refused sh -c 'exec 3</dev/tty'; refused sh -c 'true <&3'; refused sh -c 'true <&4'; refused sh -c 'exec 3</dev/ttys000'; exit 42`,
			twin:   `echo in | cat >/dev/null`},
		{name: "write the Go caches in the home; go build with caches in TMPDIR",
			attack: `refused mkdir -p $HOME_/go/pkg/mod; refused mkdir -p $HOME_/Library/Caches/go-build; exit 42`,
			twin: `mkdir -p $WT/hello && cd $WT/hello && printf 'module hello\n\ngo 1.21\n' > go.mod && printf 'package main\n\nfunc main() { println("hi") }\n' > main.go && ` +
				`GOCACHE=$GOCACHE_DIR GOPATH=$TMP/gopath GOTOOLCHAIN=local GOFLAGS=-mod=mod go build -o $TMP/hello . && $TMP/hello`,
			edit: func(in *sandbox.Input) { in.AllowWrite = append(in.AllowWrite, macGoCache(t0)) },
			before: func(t *testing.T, f *macFixture) string {
				if _, err := exec.LookPath("go"); err != nil {
					return "go is not on PATH"
				}
				return ""
			}},

		// macOS only.
		{name: "case-insensitive spellings of protected paths",
			attack: `refused sh -c "echo evil > $WT/.CLAUDE/SETTINGS.JSON"; refused sh -c "echo evil > $WT/.Claude/Settings.json"; refused sh -c "echo x > $COMMON/CONFIG"; refused sh -c "echo x > $WT/.MCP.JSON"; refused cat $HOME_/.SSH/ID_ED25519; exit 42`,
			twin:   `echo more >> $WT/readme.MD && cat $WT/README.md | grep -q more`,
			check: func(t *testing.T, f *macFixture) {
				macUnchanged(wtRel+"/.claude/settings.json", `{"hooks":{}}`)(t, f)
				macAbsent(wtRel+"/.mcp.json", wtRel+"/.MCP.JSON")(t, f)
			}},
		{name: "the Keychain",
			before: hostWorks("/usr/bin/security", "show-keychain-info"),
			attack: `refused /usr/bin/security show-keychain-info; refused /usr/bin/security find-generic-password -s kusaw-escape-probe; refused /usr/bin/security dump-keychain; exit 42`,
			twin:   `/usr/bin/security help >/dev/null 2>&1; true`},
		{name: "LaunchServices opens an app",
			before: hostWorks("/usr/bin/open", "-g", "-j", "-b", "com.apple.finder"),
			attack: `refused /usr/bin/open -g -j -b com.apple.finder; refused /usr/bin/open -g -j /Applications; exit 42`,
			twin:   `test -x /usr/bin/open`},
		{name: "Apple Events",
			attack: `refused /usr/bin/perl -e 'alarm 10; exec @ARGV' /usr/bin/osascript -e 'tell application "Finder" to get name'; exit 42`,
			twin:   `/usr/bin/osascript -e 'return 1' | grep -q 1`},
		{name: "a launchd job runs outside",
			attack: `refused /bin/launchctl submit -l kusaw-escape-$MARKER -- /usr/bin/touch $OUTSIDE/launchd.txt; exit 42`,
			twin:   `/bin/launchctl version >/dev/null 2>&1 || true`,
			check: func(t *testing.T, f *macFixture) {
				time.Sleep(2 * time.Second)
				exec.Command("/bin/launchctl", "remove", "kusaw-escape-"+s.vars["MARKER"]).Run()
				macAbsent("$ROOT/outside/launchd.txt")(t, f)
			}},
		{name: "the pasteboard",
			before: func(t *testing.T, f *macFixture) string {
				if r := hostWorks("/usr/bin/pbpaste")(t, f); r != "" {
					return r
				}
				old, _ := exec.Command("/usr/bin/pbpaste").Output()
				t.Cleanup(func() {
					c := exec.Command("/usr/bin/pbcopy")
					c.Stdin = bytes.NewReader(old)
					c.Run()
				})
				c := exec.Command("/usr/bin/pbcopy")
				c.Stdin = strings.NewReader("kusaw-pasteboard-" + s.vars["MARKER"])
				if err := c.Run(); err != nil {
					return "pbcopy does not work outside the sandbox: " + err.Error()
				}
				return ""
			},
			attack: `refused sh -c '/usr/bin/pbpaste | grep -q kusaw-pasteboard-$MARKER'; echo planted | /usr/bin/pbcopy >/dev/null 2>&1; exit 42`,
			twin:   `echo local | cat | grep -q local`,
			check: func(t *testing.T, f *macFixture) {
				out, _ := exec.Command("/usr/bin/pbpaste").Output()
				if strings.Contains(string(out), "planted") {
					t.Errorf("the step wrote the host's pasteboard")
				}
			}},
		// The first-run checklist of docs/sandbox-macos.md (issue #18).
		{name: "checklist: DNS lookups fail in allowlist mode", edit: allowlist,
			before: func(t *testing.T, f *macFixture) string { return hostWorks(f.helper, "resolve", "apple.com")(t, f) },
			attack: `refused $H resolve apple.com; refused $H resolve kusaw-probe-$MARKER.example.com; refused sh -c '/usr/bin/dscacheutil -q host -a name apple.com | grep -q address'; exit 42`,
			twin:   `$H dial $LEASE`},
		{name: "checklist: DNS lookups fail with network none", edit: netNone,
			before: func(t *testing.T, f *macFixture) string { return hostWorks(f.helper, "resolve", "apple.com")(t, f) },
			attack: `refused $H resolve apple.com; exit 42`,
			twin:   `$H selfsock $TMP/own.sock`},
		{name: "checklist: DNS works with network open",
			edit:   func(in *sandbox.Input) { in.Network = sandbox.NetworkOpen },
			before: func(t *testing.T, f *macFixture) string { return hostWorks(f.helper, "resolve", "apple.com")(t, f) },
			attack: `refused $H connect $AGENTSOCK; exit 42`,
			twin:   `$H resolve apple.com`},
		{name: "checklist: the data volume's spelling of ~/.ssh is unreadable",
			before: func(t *testing.T, f *macFixture) string {
				if _, err := os.Stat("/System/Volumes/Data" + f.home + "/.ssh/id_ed25519"); err != nil {
					return "the data volume's spelling does not reach the fixture's home here: " + err.Error()
				}
				return ""
			},
			attack: `refused cat /System/Volumes/Data$HOME_/.ssh/id_ed25519; refused ls /System/Volumes/Data$HOME_/.ssh; refused ls /System/Volumes/Data$HOME_; ` +
				`refused sh -c "echo x > /System/Volumes/Data$COMMON/config"; refused sh -c "echo x > /System/Volumes/Data$OUTSIDE/victim.txt"; exit 42`,
			twin:  `cat $WT/README.md >/dev/null && echo ok > $WT/dv.txt`,
			check: macUnchanged("$ROOT/outside/victim.txt", "original\n")},
		{name: "checklist: hdiutil attach -mountpoint outside fails",
			before: func(t *testing.T, f *macFixture) string {
				img := filepath.Join(f.root, "probe.dmg")
				if _, err := os.Stat(img); err != nil {
					out, err := exec.Command("/usr/bin/hdiutil", "create", "-quiet", "-size", "1m", "-fs", "HFS+", "-volname", "kusawprobe", img).CombinedOutput()
					if err != nil {
						return fmt.Sprintf("hdiutil create does not work outside the sandbox either (%v: %s)", err, bytes.TrimSpace(out))
					}
				}
				if err := os.MkdirAll(filepath.Join(f.outside, "mnt"), 0o755); err != nil {
					t.Fatal(err)
				}
				s.vars["IMG"] = img
				return ""
			},
			attack: `refused /usr/bin/hdiutil attach -nobrowse -mountpoint $OUTSIDE/mnt $IMG; refused /usr/bin/hdiutil attach -nobrowse -mountpoint $WT/mnt $IMG; exit 42`,
			twin:   `mkdir -p $WT/mnt && test -r $IMG`,
			check: func(t *testing.T, f *macFixture) {
				out, _ := exec.Command("/sbin/mount").Output()
				for _, mp := range []string{filepath.Join(f.outside, "mnt"), filepath.Join(f.wt, "mnt")} {
					if strings.Contains(string(out), mp) {
						exec.Command("/usr/bin/hdiutil", "detach", "-force", mp).Run()
						t.Errorf("the step mounted a disk image at %s", mp)
					}
				}
			}},
		{name: "checklist: security verify-cert on a certificate with an AIA URL fetches nothing", edit: allowlist,
			before: func(t *testing.T, f *macFixture) string {
				aia := newAIAServer(t)
				outsideCert := aia.cert(t, f.root, "outside")
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				exec.CommandContext(ctx, "/usr/bin/security", "verify-cert", "-c", outsideCert, "-p", "ssl").Run()
				time.Sleep(2 * time.Second) // trustd fetches in the background
				if aia.hits("outside") == 0 {
					return "trustd fetches no AIA, OCSP or CRL address outside the sandbox either: the refusal inside would prove nothing"
				}
				s.vars["CERT"] = aia.cert(t, f.root, "inside")
				s.aia = aia
				return ""
			},
			attack: `/usr/bin/security verify-cert -c $CERT -p ssl >/dev/null 2>&1; /usr/bin/security verify-cert -c $CERT >/dev/null 2>&1; exit 42`,
			twin:   `test -r $CERT && $H dial $LEASE`,
			check: func(t *testing.T, f *macFixture) {
				time.Sleep(2 * time.Second) // trustd fetches in the background
				if n := s.aia.hits("inside"); n != 0 {
					t.Errorf("a daemon fetched %d address(es) of the step's certificate: a network path outside the proxy", n)
				}
			}},
		{name: "checklist: lsregister -f of an app in the worktree fails",
			before: func(t *testing.T, f *macFixture) string {
				if _, err := os.Stat(macLSRegister); err != nil {
					return "lsregister is not at " + macLSRegister
				}
				return ""
			},
			attack: `mkdir -p $WT/Evil.app/Contents/MacOS && ` +
				`printf '<?xml version="1.0" encoding="UTF-8"?><plist version="1.0"><dict><key>CFBundleIdentifier</key><string>com.kusaw.escape-probe-%s</string><key>CFBundleExecutable</key><string>evil</string><key>CFBundleURLTypes</key><array><dict><key>CFBundleURLSchemes</key><array><string>kusaw-escape-%s</string></array></dict></array></dict></plist>' $MARKER $MARKER > $WT/Evil.app/Contents/Info.plist && ` +
				`printf '#!/bin/sh\ntouch $OUTSIDE/lsregister.txt\n' > $WT/Evil.app/Contents/MacOS/evil && chmod +x $WT/Evil.app/Contents/MacOS/evil && ` +
				`"` + macLSRegister + `" -f $WT/Evil.app >/dev/null 2>&1; exit 42`,
			twin: `test -d $WT`,
			check: func(t *testing.T, f *macFixture) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				out, _ := exec.CommandContext(ctx, macLSRegister, "-dump").Output()
				if strings.Contains(string(out), "com.kusaw.escape-probe-"+s.vars["MARKER"]) {
					exec.Command(macLSRegister, "-u", filepath.Join(f.wt, "Evil.app")).Run()
					t.Errorf("the step registered an app of the worktree with LaunchServices")
				}
			}},
		{name: "checklist: lldb -p of an outside process fails",
			before: func(t *testing.T, f *macFixture) string {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				out, _ := exec.CommandContext(ctx, "/usr/bin/lldb", "-p", s.vars["MARKERPID"], "--batch", "-o", "process detach").CombinedOutput()
				if !strings.Contains(string(out), "detached") {
					return "lldb cannot attach outside the sandbox either (developer tools not enabled?): " + firstLines(string(out), 3)
				}
				return ""
			},
			attack: `if /usr/bin/lldb -p $MARKERPID --batch -o 'process detach' 2>&1 | grep -q detached; then echo "ESCAPED: lldb attached"; exit 1; fi; exit 42`,
			twin:   `test -x /usr/bin/lldb && kill -0 $$`},
		{name: "checklist: git and cc still work",
			before: hostWorks("/usr/bin/cc", "--version"),
			attack: `refused sh -c "echo x > $OUTSIDE/victim.txt"; exit 42`,
			twin: `git --version >/dev/null && git -C $WT status --porcelain >/dev/null && git -C $WT log -1 --format=%s | grep -q . && ` +
				`printf 'int main(void){return 0;}\n' > $TMP/t.c && cc -o $TMP/t $TMP/t.c && $TMP/t`,
			check: macUnchanged("$ROOT/outside/victim.txt", "original\n")},
		{name: "checklist: node still works",
			before: func(t *testing.T, f *macFixture) string {
				if _, err := exec.LookPath("node"); err != nil {
					return "node is not on PATH"
				}
				return ""
			},
			attack: `refused node -e 'require("fs").writeFileSync(process.env.OUTSIDE + "/node.txt", "x")'; exit 42`,
			twin:   `node -e 'const os = require("os"); os.cpus(); os.networkInterfaces(); os.uptime(); require("fs").writeFileSync(process.env.WT + "/node.txt", "x")'`,
			check:  macAbsent("$ROOT/outside/node.txt"), twinHost: macPresent(wtRel + "/node.txt")},
		{name: "checklist: a pty of its own works, the user's terminals do not",
			attack: `for t in /dev/ttys000 /dev/ttys001 /dev/console; do refused sh -c "exec 3<>$t"; done; exit 42`,
			twin:   `/usr/bin/script -q /dev/null /usr/bin/true`},
		{name: "checklist: other processes' command lines",
			attack: `refused sh -c 'ps -ww -p $MARKERPID -o command= | grep -q kusaw-marker'; refused sh -c 'ps -axww -o command= | grep -q kusaw-marker-$MARKER'; exit 42`,
			twin:   `uname -a >/dev/null && sysctl -n hw.ncpu kern.osproductversion >/dev/null && ps -p $$ -o comm= >/dev/null`},
		{name: "write another app's preferences",
			attack: `/usr/bin/defaults write com.kusaw.escape-probe planted -string yes >/dev/null 2>&1; refused sh -c '/usr/bin/defaults read com.kusaw.escape-probe planted 2>/dev/null | grep -q yes'; exit 42`,
			twin:   `/usr/bin/defaults read -g AppleLocale >/dev/null 2>&1 || true`,
			check: func(t *testing.T, f *macFixture) {
				if out, err := exec.Command("/usr/bin/defaults", "read", "com.kusaw.escape-probe", "planted").Output(); err == nil {
					exec.Command("/usr/bin/defaults", "delete", "com.kusaw.escape-probe").Run()
					t.Errorf("the step wrote preferences outside: %s", out)
				}
			}},
	}
}

func TestEscapeSeatbelt(t *testing.T) {
	if r := sandbox.CheckSeatbelt(); !r.Available {
		msg := "the Seatbelt backend cannot run here: " + r.Msg
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	f := newMacFixture(t)
	s := &macSuite{f: f}

	agentDir, err := os.MkdirTemp("/tmp", "kusaw-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(agentDir) })
	agent := filepath.Join(agentDir, "agent.sock")
	al, err := net.Listen("unix", agent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	go macAcceptAll(al)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	go macAcceptAll(host)
	lease, err := net.Listen("tcp", "127.0.0.1:0") // stands in for the egress lease
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close() })
	go macAcceptAll(lease)
	s.leasePort = lease.Addr().(*net.TCPAddr).Port

	marker := strconv.Itoa(os.Getpid())
	victim := exec.Command("/bin/sh", "-c", "sleep 60", "kusaw-marker-"+marker)
	if err := victim.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })

	s.vars = map[string]string{
		"WT": f.wt, "COMMON": f.common, "GITDIR": f.gitdir, "HOME_": f.home, "STORE": f.store,
		"OUTSIDE": f.outside, "SHARED": f.shared, "ATTEMPT": f.attempt, "ART": f.artifacts, "TMP": f.tmp,
		"REPO": f.repo, "ROOT": f.root, "H": f.helper, "HOSTPID": strconv.Itoa(os.Getpid()),
		"AGENTSOCK": agent, "HOSTTCP": host.Addr().String(), "LEASE": lease.Addr().String(),
		"MARKER": marker, "MARKERPID": strconv.Itoa(victim.Process.Pid),
	}
	s.vars["GOCACHE_DIR"] = macGoCache(t)
	if out, err := exec.Command("/usr/bin/getconf", "DARWIN_USER_TEMP_DIR").Output(); err == nil {
		s.vars["USERTEMP"] = strings.TrimRight(strings.TrimSpace(string(out)), "/")
	} else {
		t.Fatalf("getconf DARWIN_USER_TEMP_DIR: %v", err)
	}
	cases := macCases(t, s)
	if len(cases) < 40 {
		t.Fatalf("the macOS escape suite has %d cases; it must mirror the Linux suite", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.before != nil {
				if why := c.before(t, f); why != "" {
					t.Skip(why)
				}
			}
			code, out := s.run(t, c.edit, c.opt, c.attack)
			if code != 42 {
				t.Errorf("attack was not refused (exit %d, want 42):\n%s", code, out)
			}
			if c.check != nil {
				c.check(t, f)
			}
			code, out = s.run(t, c.edit, c.opt, c.twin)
			if code != 0 {
				t.Errorf("the legitimate twin failed (exit %d):\n%s", code, out)
			}
			if c.twinHost != nil {
				c.twinHost(t, f)
			}
		})
	}
	// Nothing of the run is left in the user's repository.
	if st := macGit(t, f.repo, "status", "--porcelain", "--ignored"); strings.Contains(st, ".mcp.json") || strings.Contains(st, ".cursor") {
		t.Errorf("stand-ins left in the user's repository:\n%s", st)
	}
}

func macAcceptAll(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
