package attempt

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/internal/testkit"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

type secrets map[string]string

func (s secrets) Get(k string) (string, error) {
	if v, ok := s[k]; ok {
		return v, nil
	}
	return "", errors.New("no such secret")
}

// fixture is a repository with one commit and the spec of
// testdata/NAME.spec.json on it, a host and a job for it: an attempt with
// no run, no engine and no factory file.
func fixture(t *testing.T, name string) (*Host, *record.AttemptSpec, Job, string) {
	t.Helper()
	testkit.NeedGit(t)
	dir := t.TempDir()
	repo := filepath.Join(dir, "app")
	os.MkdirAll(repo, 0o755)
	testkit.GitRun(t, repo, "init", "-q", "-b", "main")
	testkit.GitRun(t, repo, "config", "user.email", "t@example.invalid")
	testkit.GitRun(t, repo, "config", "user.name", "t")
	os.WriteFile(filepath.Join(repo, "README"), []byte("app"), 0o644)
	testkit.GitRun(t, repo, "add", ".")
	testkit.GitRun(t, repo, "commit", "-qm", "init")
	base := testkit.GitRun(t, repo, "rev-parse", "HEAD")
	b, err := os.ReadFile(filepath.Join("testdata", name+".spec.json"))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := record.ParseSpec([]byte(strings.ReplaceAll(string(b), "$BASE", base)))
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	state := filepath.Join(dir, "state")
	h := &Host{StateDir: state, Repos: map[string]string{"app": repo}, Kusaw: "/bin/false", Key: key,
		Secrets: func() (SecretSource, error) { return secrets{"tok": "s3cr3t-value"}, nil }}
	job := Job{Dir: record.AttemptDir(filepath.Join(state, record.RunsDir, spec.Run), spec.Step, spec.Number), NewBranches: true,
		Repos: []record.RunRepo{{Name: "app", Path: repo, BaseSHA: base, Branch: "kusaw/" + spec.Run, HeadSHA: base}}}
	return h, spec, job, repo
}

// The executor runs an attempt from its spec alone: the worktree on the
// attempt branch, the process with its secret and parameter, the commit,
// the run branch moved, and the records sealed, with the secret redacted.
func TestRunFromSpecFixture(t *testing.T) {
	h, spec, job, repo := fixture(t, "command")
	var advanced []string
	job.Advanced = func(repo, sha string) { advanced = append(advanced, repo+"@"+sha) }
	rec := Run(context.Background(), h, spec, job)
	if rec.Outcome != status.OutcomePassed || rec.ExitCode == nil || *rec.ExitCode != 0 {
		t.Fatalf("attempt %s %s: %s", rec.Outcome, rec.Reason, rec.Message)
	}
	if len(rec.Worktrees) != 1 || !rec.Worktrees[0].Changed || !rec.Worktrees[0].Removed {
		t.Fatalf("worktrees %+v", rec.Worktrees)
	}
	head := rec.Worktrees[0].HeadSHA
	if got := testkit.GitRun(t, repo, "rev-parse", "kusaw/attempts/r1/edit/1"); got != head {
		t.Errorf("attempt branch at %s, want %s", got, head)
	}
	if got := testkit.GitRun(t, repo, "rev-parse", "kusaw/r1"); got != head || len(advanced) != 1 {
		t.Errorf("run branch at %s (advanced %v), want %s", got, advanced, head)
	}
	// The step wrote the secret into its file: it is committed as written
	// (the worktree is the step's), but never reaches kusaw's records.
	if got := testkit.GitRun(t, repo, "show", head+":out.txt"); got != "s3cr3t-value" {
		t.Errorf("out.txt %q", got)
	}
	out, _ := os.ReadFile(filepath.Join(job.Dir, record.StdoutFile))
	if string(out) != "token=<secret> param=42\n" {
		t.Errorf("stdout.log %q", out)
	}
	for _, f := range []string{record.AttemptFile, record.EventsFile, record.SpecFile} {
		b, err := os.ReadFile(filepath.Join(job.Dir, f))
		if err != nil || strings.Contains(string(b), "s3cr3t") {
			t.Errorf("%s: %v (or it holds the secret)", f, err)
		}
	}
	res, err := chainlog.VerifyFile(filepath.Join(job.Dir, record.EventsFile), h.Key.Public().(ed25519.PublicKey),
		chainlog.Binding{Run: spec.Run, Step: spec.Step, Attempt: spec.Number, Kind: chainlog.KindEvents})
	if err != nil || !res.Final {
		t.Errorf("events: %+v %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(job.Dir, record.TmpDir)); !os.IsNotExist(err) {
		t.Errorf("tmp/ left: %v", err)
	}
}

// A secret the machine does not hold refuses the attempt before its
// process starts, naming the key and the fix.
func TestRunFromSpecFixtureSecretMissing(t *testing.T) {
	h, spec, job, _ := fixture(t, "command")
	h.Secrets = func() (SecretSource, error) { return secrets{}, nil }
	var refused *status.Error
	job.Refused = func(se *status.Error) { refused = se }
	rec := Run(context.Background(), h, spec, job)
	if rec.Outcome != status.OutcomeRefused || rec.Reason != status.ReasonSecretMissing || !strings.Contains(rec.Fix, "kusaw config set tok --secret") {
		t.Fatalf("attempt %s %s: %s (fix %s)", rec.Outcome, rec.Reason, rec.Message, rec.Fix)
	}
	if len(rec.Processes) != 1 || rec.Processes[0].PID != 0 {
		t.Errorf("a process started: %+v", rec.Processes)
	}
	if refused != nil {
		t.Errorf("a missing secret is not a sandbox refusal: %+v", refused)
	}
}
