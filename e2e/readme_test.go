package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kusaw/kusaw/providers/providertest"
)

// TestReadmeOwnRepository follows the README's "On your own repository"
// section literally: every command its code blocks and its prose name, in
// their order, and no kusaw command they do not name (the test checks
// both against the README's text). What a test cannot take from a user is
// the environment alone: a home of its own, a free port for serve instead
// of 7300, and on PATH, as claude, the fake CLI (a wrapper that asks it to
// edit a file and record its environment). The fake does not call the
// Messages API: api.anthropic.com is not reachable from here, and the
// README sets no base_url; the key's way through inject is
// TestEgressInjectEndToEnd's, and here the agent's environment shows the
// placeholder, never the key.
func TestReadmeOwnRepository(t *testing.T) {
	needSandbox(t)
	need(t, "make")
	need(t, "go")
	readme := readFile(t, filepath.Join(repoRoot(), "README.md"))
	i := strings.Index(readme, "## On your own repository")
	if i < 0 {
		t.Fatal("README has no 'On your own repository' section")
	}
	section := readme[i:]
	if j := strings.Index(section[3:], "\n## "); j >= 0 {
		section = section[:j+3]
	}
	inReadme := func(cmd string) {
		t.Helper()
		if !strings.Contains(section, cmd) {
			t.Fatalf("the README section no longer says %q: change this test with it", cmd)
		}
	}

	// Install: make install into a prefix, and go install from the checkout.
	top := t.TempDir()
	prefix := filepath.Join(top, "prefix")
	inReadme("make install")
	inReadme("PREFIX=~/.local")
	mk := exec.Command("make", "-s", "install", "PREFIX="+prefix)
	mk.Dir = repoRoot()
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	kusaw := filepath.Join(prefix, "bin", "kusaw")
	for _, b := range []string{kusaw, filepath.Join(prefix, "bin", "kusaw-bridge"), filepath.Join(prefix, "bin", "kusaw-daemon")} {
		if fi, err := os.Stat(b); err != nil || fi.Mode().Perm()&0o111 == 0 {
			t.Fatalf("make install did not install %s: %v", b, err)
		}
	}
	inReadme("go install ./cmd/...")
	gobin := filepath.Join(top, "gobin")
	gi := exec.Command("go", "install", "./cmd/...")
	gi.Dir = repoRoot()
	gi.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-buildvcs=false")
	if out, err := gi.CombinedOutput(); err != nil {
		t.Fatalf("go install: %v\n%s", err, out)
	}
	for _, b := range []string{"kusaw", "kusaw-bridge", "kusaw-daemon"} {
		if _, err := os.Stat(filepath.Join(gobin, b)); err != nil {
			t.Errorf("go install ./cmd/... did not install %s", b)
		}
	}

	// The user's repository, with its own tests.
	repo := newRepo(t, top, "your-repo")
	writeFile(t, filepath.Join(repo, "Makefile"), "test:\n\t@echo your tests passed\n")
	git(t, repo, "add", ".")
	git(t, repo, "commit", "-q", "-m", "tests")

	// The environment: claude on PATH is the fake CLI.
	fakes := providertest.BuildT(t)
	wrap := filepath.Join(top, "agent-bin")
	// Beside the wrapper: the sandbox shows the CLI's own folder.
	bin, err := os.ReadFile(fakes.Claude)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(wrap, "fake-claude"), string(bin))
	writeFile(t, filepath.Join(wrap, "claude"), "#!/bin/sh\n# kusaw's --version probe runs on the host: no files then.\ncase \"$1\" in --version) exec "+filepath.Join(wrap, "fake-claude")+` "$@";; esac`+"\nFAKE_AGENT_SCENARIO=edit_file FAKE_AGENT_ENV_FILE=agent-env.json exec "+filepath.Join(wrap, "fake-claude")+` "$@"`+"\n")
	for _, f := range []string{"claude", "fake-claude"} {
		if err := os.Chmod(filepath.Join(wrap, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var env []string
	for _, kv := range testEnv(t, top) {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			kv = "PATH=" + filepath.Join(prefix, "bin") + ":" + wrap + ":" + p
		}
		env = append(env, kv)
	}
	var ran []string
	run := func(stdin string, args ...string) result {
		t.Helper()
		cmd := exec.Command(kusaw, args...)
		cmd.Dir, cmd.Env = repo, env
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		ran = append(ran, shellJoin(append([]string{"kusaw"}, args...)))
		r := result{out.String(), errb.String(), exitCode(err)}
		if r.code != 0 {
			t.Fatalf("kusaw %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return r
	}
	runID := func(r result) string {
		t.Helper()
		m := regexp.MustCompile(`run (\S+) succeeded`).FindStringSubmatch(r.stdout)
		if m == nil {
			t.Fatalf("kusaw run did not say which run succeeded:\n%s%s", r.stdout, r.stderr)
		}
		return m[1]
	}

	inReadme("cd ~/src/your-repo")
	run("", "init", "--sandbox")
	run("", "validate")
	inReadme("kusaw run checks runs your tests alone, sandboxed")
	checks := runID(run("", "run", "checks"))
	if got := readFile(t, filepath.Join(repo, ".kusaw", "runs", checks, "steps", "checks", "1", "stdout.log")); !strings.Contains(got, "your tests passed") {
		t.Errorf("kusaw run checks did not run the repository's tests: %q", got)
	}
	const realKey = "sk-ant-readme-REAL-key-0815"
	run(realKey+"\n", "config", "set", "providers.claude-code.api_key", "--secret")
	run("", "config", "set", "steps.implement.prompt", "Add a --version flag to the CLI")
	if f := readFile(t, filepath.Join(repo, "factory.yaml")); strings.Contains(f, realKey) || !strings.Contains(f, "Add a --version flag") {
		t.Fatalf("factory.yaml after config set:\n%s", f)
	}
	id := runID(run("", "run"))
	if got := readFile(t, filepath.Join(repo, ".kusaw", "runs", id, "steps", "checks", "1", "stdout.log")); !strings.Contains(got, "your tests passed") {
		t.Errorf("checks did not run the repository's tests: %q", got)
	}
	if s := run("", "show", id); !strings.Contains(s.stdout, "implement") || !strings.Contains(s.stdout, "checks") {
		t.Errorf("kusaw show:\n%s", s.stdout)
	}
	if rs := run("", "runs"); !strings.Contains(rs.stdout, id) || !strings.Contains(rs.stdout, checks) {
		t.Errorf("kusaw runs does not list %s and %s:\n%s", id, checks, rs.stdout)
	}
	run("", "log", "verify", ".kusaw/runs/"+id+"/events.jsonl", ".kusaw/runs/"+id+"/steps/implement/1/egress.log")
	// The work is on the branch kusaw/RUN; the checkout is never touched.
	inReadme("The work is on the branch `kusaw/RUN` of your repository")
	var agentEnv map[string]string
	if err := json.Unmarshal([]byte(git(t, repo, "show", "kusaw/"+id+":agent-env.json")), &agentEnv); err != nil {
		t.Fatalf("the agent's work is not on kusaw/%s: %v", id, err)
	}
	if agentEnv["ANTHROPIC_API_KEY"] != "factory-egress-placeholder" {
		t.Errorf("the agent's key variable is %q, want the placeholder", agentEnv["ANTHROPIC_API_KEY"])
	}
	if st := git(t, repo, "status", "--porcelain"); strings.Contains(st, "agent-env.json") || strings.Contains(st, "FAKE_AGENT") {
		t.Errorf("the checkout was touched:\n%s", st)
	}
	if hits := grepDir(t, filepath.Join(repo, ".kusaw"), realKey); len(hits) > 0 {
		t.Errorf("the key is in the records: %v", hits)
	}
	if strings.Contains(git(t, repo, "log", "-p", "kusaw/"+id), realKey) {
		t.Error("the key is on the run's branch")
	}

	// The web page.
	const token = "readme-token-0123456789abcdef"
	run(token+"\n", "config", "set", "serve.token", "--secret")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	srv := exec.Command(kusaw, "serve", "--listen", addr)
	srv.Dir, srv.Env = repo, env
	ran = append(ran, "kusaw serve --listen 127.0.0.1:7300") // on a free port instead
	var logs syncBuffer
	srv.Stderr = &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Signal(os.Interrupt); _ = srv.Wait() })
	inReadme("http://127.0.0.1:7300/?token=TOKEN")
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
	var page string
	waitFor(t, "the web page", 20*time.Second, func() bool {
		resp, err := client.Get("http://" + addr + "/?token=" + token)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(strings.ToLower(page), "<html") {
		t.Errorf("the web page is not HTML:\n%.300s", page)
	}
	resp, err := client.Get("http://" + addr + "/v1/runs")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), id) {
		t.Errorf("the page's API (with the token's cookie) does not list the run: %d %.300s\n%s", resp.StatusCode, b, logs.String())
	}
	inReadme("`kusaw env` shows kusaw's own settings")
	run("", "env")
	inReadme("`kusaw\nschema` is the file's JSON Schema")
	run("", "schema")

	// What the test ran is what the README names, in its order: the code
	// blocks' kusaw commands, with the prose's (run checks, runs, env,
	// schema) where the prose names them.
	cmds := readmeCommands(section)
	if len(cmds) < 9 {
		t.Fatalf("found only %d kusaw commands in the README's code blocks: %q", len(cmds), cmds)
	}
	var want []string
	for _, c := range cmds {
		c = strings.NewReplacer("RUN", id).Replace(c)
		want = append(want, c)
		switch {
		case c == "kusaw validate":
			want = append(want, "kusaw run checks")
		case strings.HasPrefix(c, "kusaw show "):
			want = append(want, "kusaw runs")
		}
	}
	want = append(want, "kusaw env", "kusaw schema")
	norm := func(xs []string) string {
		var out []string
		for _, x := range xs {
			out = append(out, strings.Join(shellSplit(x), " "))
		}
		return strings.Join(out, "\n")
	}
	if g, w := norm(ran), norm(want); g != w {
		t.Errorf("the kusaw commands the test ran are not the README's:\nran:\n%s\nREADME:\n%s", g, w)
	}
}

// readmeCommands are the kusaw command lines of a section's sh code
// blocks, comments cut.
func readmeCommands(section string) []string {
	var out []string
	in := false
	for _, line := range strings.Split(section, "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		}
		if !in {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "kusaw ") {
			out = append(out, line)
		}
	}
	return out
}

// shellSplit splits a command line as sh would for plain words and
// double-quoted strings (all the README uses).
func shellSplit(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, has := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, has = !quoted, true
		case r == ' ' && !quoted:
			if has {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
			has = true
		}
	}
	if has {
		out = append(out, cur.String())
	}
	return out
}

// shellJoin quotes the words that need it.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t") {
			a = `"` + a + `"`
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
