package factory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/deliver"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// deliverRun does the pipeline's deliver after the run succeeded: outside
// every sandbox, with the user's git. Its outcome goes into run.json and
// the run's events; it never changes the run's state.
func (e *Engine) deliverRun(ctx context.Context, r *Run) {
	pl := e.F.Pipelines[r.Record.Pipeline]
	if pl == nil || pl.Deliver == nil {
		return
	}
	d := e.deliver(ctx, r.Record, pl.Deliver, r.redact.String, func(typ string, data map[string]any) {
		r.events.Emit(typ, data)
	})
	r.mu.Lock()
	r.Record.Delivery = d
	r.mu.Unlock()
	r.save()
}

// deliver builds the plan from the factory's keys and the run's record,
// runs it and says what happened.
func (e *Engine) deliver(ctx context.Context, rec *record.RunRecord, dl *config.Deliver, redact func(string) string, emit func(string, map[string]any)) *record.Delivery {
	out := &record.Delivery{Time: time.Now().UTC()}
	fail := func(step string, err error) *record.Delivery {
		out.State, out.Failed = record.DeliveryFailed, step
		out.Message = redact(err.Error())
		out.Fix = status.Fill(status.ReasonDeliverFailed.Info().Fix, map[string]string{"RUN": rec.ID})
		emit(record.EvDeliverFailed, map[string]any{"step": step, "reason": status.ReasonDeliverFailed, "message": out.Message, "fix": out.Fix})
		return out
	}
	repoName := dl.Repo
	if repoName == "" && len(e.F.RepoOrder) > 0 {
		repoName = e.F.RepoOrder[0]
	}
	out.Repo = repoName
	var rr *record.RunRepo
	for i := range rec.Repos {
		if rec.Repos[i].Name == repoName {
			rr = &rec.Repos[i]
		}
	}
	if rr == nil {
		return fail("merge", fmt.Errorf("run %s has no run branch in repo %s", rec.ID, repoName))
	}
	// A follow-up run delivers under its chain's first run: the same
	// pushed branch, the same pull request.
	expand := strings.NewReplacer("{run}", threadID(rec), "{pipeline}", rec.Pipeline)
	plan := deliver.Plan{RunID: rec.ID, RepoPath: rr.Path, RunBranch: rr.Branch, Identity: kusawIdentity()}
	if m := dl.Merge; m != nil {
		changed, err := e.configChanged(ctx, rr)
		if err != nil {
			return fail("merge", err)
		}
		if len(changed) > 0 {
			return fail("merge", fmt.Errorf("the run changed %s, kusaw's own configuration, in %s: merging would hand the next runs a sandboxed step's version of it; review the run branch (git -C %s diff %s %s) and merge it by hand",
				strings.Join(changed, ", "), rr.Path, rr.Path, rr.BaseSHA, rr.Branch))
		}
		plan.Merge = &deliver.Merge{Into: m.Into, How: m.How, Message: fmt.Sprintf("kusaw: %s run %s", rec.Pipeline, rec.ID)}
		out.Into = m.Into
	}
	if p := dl.Push; p != nil {
		plan.Push = &deliver.Push{Remote: p.Remote, Branch: expand.Replace(p.Branch)}
	}
	if p := dl.PullRequest; p != nil {
		token, err := e.secretValue(p.Token)
		if err != nil {
			return fail("pull_request", err)
		}
		title := p.Title
		if title == "" {
			title = fmt.Sprintf("kusaw: %s run %s", rec.Pipeline, threadID(rec))
		}
		body, err := e.pullBody(ctx, rec, rr, p.BodyFile)
		if err != nil {
			return fail("pull_request", err)
		}
		plan.PullRequest = &deliver.PullRequest{Forge: p.Forge, APIURL: p.APIURL, Repo: p.Repo, Base: p.Base, Token: token, Title: expand.Replace(title), Body: body}
	}
	res, err := deliver.Run(ctx, plan, func(step string, data map[string]any, err error) {
		if err != nil {
			return
		}
		switch step {
		case "merged":
			emit(record.EvDeliverMerged, data)
		case "pushed":
			emit(record.EvDeliverPushed, data)
		case "pull_request":
			emit(record.EvDeliverPull, data)
		}
	})
	out.Merged, out.Pushed, out.PullURL, out.PullNumber = res.Merged, res.Pushed, res.PullURL, res.PullNumber
	if err != nil {
		step := "merge"
		var se *deliver.StepError
		if errors.As(err, &se) {
			step = se.Step
		}
		return fail(step, err)
	}
	out.State = record.DeliveryDone
	return out
}

// SecretValue reads a {secret: KEY} from the factory's secret store (serve
// checks webhook signatures and comments on the forge with it).
func (e *Engine) SecretValue(ref *config.SecretRef) (string, error) { return e.secretValue(ref) }

// secretValue reads a {secret: KEY} from the secret store.
func (e *Engine) secretValue(ref *config.SecretRef) (string, error) {
	if ref == nil {
		return "", errors.New("no token: kusaw config set pipelines.NAME.deliver.pull_request.token --secret")
	}
	src, err := e.secretSource()
	if err != nil {
		return "", err
	}
	v, err := src.Get(ref.Key)
	if err != nil || v == "" {
		return "", fmt.Errorf("secret %s is not in the secret store: kusaw config set %s --secret", ref.Key, ref.Key)
	}
	return v, nil
}

// pullBody is the body file's text, or the run's summary: its steps with
// outcomes, what its agents used and cost, and the diffstat of the run
// branch.
func (e *Engine) pullBody(ctx context.Context, rec *record.RunRecord, rr *record.RunRepo, file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("pull_request.body_file: %v", err)
		}
		return string(b), nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Run `%s` of pipeline `%s` succeeded.\n\n| step | outcome | attempts |\n|---|---|---|\n", rec.ID, rec.Pipeline)
	for _, s := range rec.Steps {
		fmt.Fprintf(&b, "| %s | %s | %d |\n", s.ID, s.Outcome, s.Attempts)
	}
	if u := rec.Usage; u != nil {
		fmt.Fprintf(&b, "\nAgents used %d tokens", u.Tokens())
		if u.CostUSD != nil {
			fmt.Fprintf(&b, ", $%.4f", *u.CostUSD)
		}
		if u.Turns > 0 {
			fmt.Fprintf(&b, " in %d turns", u.Turns)
		}
		b.WriteString(".\n")
	}
	// The run branch's .gitattributes are a step's: no textconv or diff
	// driver of the user's config runs on its files here.
	cmd := exec.CommandContext(ctx, "git", "-C", rr.Path, "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
		"diff", "--no-ext-diff", "--no-textconv", "--stat", rr.BaseSHA, "refs/heads/"+rr.Branch)
	if stat, err := cmd.Output(); err == nil && len(stat) > 0 {
		fmt.Fprintf(&b, "\n```\n%s```\n", stat)
	}
	fmt.Fprintf(&b, "\nRecords: `kusaw show %s`; check them with `kusaw log verify`.\n", rec.ID)
	return b.String(), nil
}

// kusawIdentity is the committer of kusaw's own merge and squash commits.
func kusawIdentity() []string {
	return []string{"-c", "user.name=kusaw", "-c", "user.email=kusaw@localhost"}
}

// Deliver does a finished run's deliver again (kusaw deliver RUN): each step
// is idempotent, so a merge already done or a pull request already open is
// found and kept up to date. The run must have succeeded.
func (e *Engine) Deliver(ctx context.Context, id string) (*record.Delivery, error) {
	rec, err := e.State.LoadRun(id)
	if err != nil {
		return nil, err
	}
	if rec.State != status.RunSucceeded {
		return nil, fmt.Errorf("run %s is %s: only a succeeded run is delivered", rec.ID, rec.State)
	}
	pl := e.F.Pipelines[rec.Pipeline]
	if pl == nil || pl.Deliver == nil {
		return nil, fmt.Errorf("pipeline %s has no deliver: add pipelines.%s.deliver to %s", rec.Pipeline, rec.Pipeline, e.F.Path)
	}
	dir := e.State.RunDir(rec.ID)
	l, ok, err := TryLock(filepath.Join(dir, record.LockFile))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("run %s is held by another kusaw; try again when it is done", rec.ID)
	}
	defer l.Unlock()
	r := &Run{Record: rec, Dir: dir, e: e, lock: l, redact: &attempt.Redactor{}}
	r.events = e.openRunSink(r)
	defer r.events.Close()
	e.deliverRun(ctx, r)
	return rec.Delivery, nil
}

// configChanged lists the files of the factory's own configuration (the
// factory file, the steps' prompt files, anything under state_dir) that
// lie in the run's repository and that the run branch changed. When the
// factory lives in the repository it works on (kusaw init's layout), a
// step can edit factory.yaml (sandbox: {mode: off}), a prompt, or commit
// files under the ignored state folder (which a checkout overwrites), and
// a merge into the checked-out branch would make that the host's
// configuration.
func (e *Engine) configChanged(ctx context.Context, rr *record.RunRepo) ([]string, error) {
	root := rr.Path
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	var paths []string
	add := func(p string) {
		if p == "" {
			return
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if rel, err := filepath.Rel(root, p); err == nil && filepath.IsLocal(rel) {
			paths = append(paths, filepath.ToSlash(rel))
		}
	}
	add(e.F.Path)
	add(e.F.StateDir)
	for _, s := range e.F.Steps {
		add(s.PromptFile)
	}
	if len(paths) == 0 {
		return nil, nil
	}
	args := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "diff", "--no-ext-diff", "--no-textconv", "--name-only", "-z",
		rr.BaseSHA, "refs/heads/" + rr.Branch, "--"}, paths...)
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = rr.Path
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("cannot tell whether the run changed kusaw's configuration in %s (git diff %s %s: %v)", rr.Path, rr.BaseSHA, rr.Branch, err)
	}
	var changed []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			changed = append(changed, f)
		}
	}
	return changed, nil
}
