package factory

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/config"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/steps"
	"github.com/kusaw/kusaw/worktree"
)

// The pipeline's shapes carried out: items in order, parallel groups and
// their merges, candidates, retries and fix loops (docs/pipelines.md).
// What to do next is decided in schedule.go; this file does it.

// attemptOpts is what a shape asks of one attempt.
type attemptOpts = attempt.Shape

// item is one pipeline item: the indexes of its steps in r.steps.
type item struct {
	idx   []int
	group int // 1-based group number, 0 for a single step
}

// itemsOf lays the run's steps out as the pipeline's items; a run of
// steps that is not a pipeline's (kusaw sandbox exec) is one item per step.
func itemsOf(pl *config.Pipeline, steps []*config.Step) []item {
	ids := stepIDs(steps)
	if pl == nil || !slices.Equal(pl.StepIDs(), ids) {
		out := make([]item, len(steps))
		for i := range steps {
			out[i] = item{idx: []int{i}}
		}
		return out
	}
	var out []item
	i, groups := 0, 0
	for _, it := range pl.Steps {
		var g item
		if it.Group != nil {
			groups++
			g.group = groups
		}
		for range it.IDs() {
			g.idx = append(g.idx, i)
			i++
		}
		out = append(out, g)
	}
	return out
}

// itemEnd is how an item ended; ok means the pipeline goes on.
type itemEnd struct {
	ok       bool
	canceled bool
	reason   status.Reason
	msg      string
	// fix is the failed attempt's fix (filled in with what it found),
	// which the run's last line repeats; "": the reason's own.
	fix string
}

// runItems executes the run's items in order and ends the run.
func (e *Engine) runItems(ctx context.Context, r *Run) {
	items := itemsOf(e.F.Pipelines[r.Record.Pipeline], r.steps)
	for _, it := range items {
		if r.resume.skip(it.idx[len(it.idx)-1]) {
			continue
		}
		if ctx.Err() != nil {
			r.end(status.RunCanceled, status.ReasonRunCanceled, "the run was canceled")
			return
		}
		// A pipeline limit crossed stops the run before its next item.
		if le := r.runLimit(); le != nil {
			r.limitEnd(le, "before step "+r.steps[it.idx[0]].ID)
			return
		}
		var end itemEnd
		gated := false
		if s := r.steps[it.idx[0]]; it.group == 0 && s.Gate != nil {
			end = e.waitGate(ctx, r, it.idx[0])
			gated = !end.ok
		}
		switch {
		case gated:
		case it.group > 0:
			end = e.runGroup(ctx, r, it)
		default:
			end = e.runSingle(ctx, r, it.idx[0])
		}
		switch {
		case end.ok:
		case end.canceled || ctx.Err() != nil:
			r.end(status.RunCanceled, status.ReasonRunCanceled, "the run was canceled during step "+r.steps[it.idx[0]].ID)
			return
		default:
			if le := r.runLimit(); le != nil {
				r.limitEnd(le, end.msg)
				return
			}
			r.endFix(status.RunFailed, end.reason, end.msg, end.fix)
			return
		}
	}
	e.deliverRun(ctx, r)
	r.end(status.RunSucceeded, status.ReasonNone, "")
}

// stepEnd is how one step (all its attempts) ended.
type stepEnd struct {
	last     *record.AttemptRecord
	attempts int
	heads    map[string]string // repo → its passing commit, to merge or choose
}

func (s stepEnd) passed() bool { return s.last != nil && s.last.Outcome == status.OutcomePassed }

// runSingle runs a step alone: passing work is on the run branch after it.
func (e *Engine) runSingle(ctx context.Context, r *Run, i int) itemEnd {
	s := r.steps[i]
	end := e.runStep(ctx, r, i, false)
	if end.passed() && s.Candidates > 1 {
		if err := r.moveHeads(end.heads, nil); err != nil {
			r.stepDone(i, end, status.OutcomeFailed, status.ReasonCommitFailed)
			return itemEnd{reason: status.ReasonCommitFailed, msg: fmt.Sprintf("step %s: %v", s.ID, err)}
		}
	}
	r.stepDone(i, end, end.last.Outcome, end.last.Reason)
	return e.judgeEnd(s, end)
}

// judgeEnd turns a step's end into its item's: a failure ends the run
// unless the step may fail alone (continue_on_failure).
func (e *Engine) judgeEnd(s *config.Step, end stepEnd) itemEnd {
	last := end.last
	switch {
	case last.Outcome == status.OutcomePassed:
		return itemEnd{ok: true}
	case last.Outcome == status.OutcomeCanceled || last.Outcome == status.OutcomeInterrupted:
		return itemEnd{canceled: true}
	case s.ContinueOnFailure:
		return itemEnd{ok: true}
	}
	return itemEnd{reason: last.Reason, fix: last.Fix, msg: fmt.Sprintf("step %s %s after %d attempt(s): %s", s.ID, last.Outcome, end.attempts, last.Message)}
}

// runStep runs one step to its end: its candidates, or its attempts with
// retries and fix loops. inGroup keeps the run branch where it is.
func (e *Engine) runStep(ctx context.Context, r *Run, i int, inGroup bool) stepEnd {
	s := r.steps[i]
	r.mu.Lock()
	sr := &r.Record.Steps[i]
	sr.Started = ptrTime(time.Now().UTC())
	r.mu.Unlock()
	data := map[string]any{"step": s.ID, "attempts": s.Attempts}
	if s.Candidates > 1 {
		data["candidates"] = s.Candidates
	}
	r.events.Emit(record.EvStepStarted, data)
	if s.Candidates > 1 {
		return e.runCandidates(ctx, r, i)
	}
	return e.runAttempts(ctx, r, i, inGroup)
}

// stepDone records a step's end in run.json and its step.finished event.
func (r *Run) stepDone(i int, end stepEnd, o status.Outcome, reason status.Reason) {
	r.mu.Lock()
	sr := &r.Record.Steps[i]
	sr.Outcome, sr.Reason = o, reason
	sr.Attempts = end.attempts
	sr.Finished = ptrTime(time.Now().UTC())
	r.mu.Unlock()
	r.save()
	r.events.Emit(record.EvStepFinished, map[string]any{"step": sr.ID, "outcome": o, "reason": reason, "attempts": end.attempts})
	if o != status.OutcomePassed && o != status.OutcomeCanceled && o != status.OutcomeInterrupted {
		r.e.notify(r, "step.failed", sr.ID)
	}
}

// takeAttempt numbers the next attempt of a step: numbers go on across a
// step's occurrences, fixers, judges and resolves (folders and branches
// are per number).
func (r *Run) takeAttempt(step string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.numbers == nil {
		r.numbers = map[string]int{}
	}
	n, ok := r.numbers[step]
	if !ok {
		n = r.resume.attemptBase(step)
		if r.resume != nil && n > 0 && r.resume.detached[step] == n {
			// Its last attempt goes on on a worker: re-attach to it
			// (attempt) rather than number a new one.
			r.numbers[step] = n
			return n
		}
	}
	n++
	r.numbers[step] = n
	return n
}

// runAttempt runs one attempt within the engine's attempt slots: serve's
// own (max_parallel) for an attempt that runs here, the cluster's
// (max_running; the workers' slots bound it too) for one a worker runs.
func (e *Engine) runAttempt(ctx context.Context, r *Run, s *config.Step, n, of int, opt attemptOpts) *record.AttemptRecord {
	slots := e.opts.Slots
	if e.runsRemote(s, opt) {
		slots = e.opts.RemoteSlots
	}
	if release, err := slots.acquire(ctx); err == nil {
		defer release()
	}
	r.mu.Lock()
	if r.opts == nil {
		r.opts = map[string]attemptOpts{}
	}
	r.opts[record.AttemptID(r.ID(), s.ID, n)] = opt
	r.mu.Unlock()
	a := e.attempt(ctx, r, s, n, of)
	r.addUsage(s.ID, a.Usage)
	return a
}

// attemptOpt is what the pipeline asked of an attempt (none for one that
// runs as written).
func (r *Run) attemptOpt(step string, n int) attemptOpts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.opts[record.AttemptID(r.ID(), step, n)]
}

// runAgainIfLost runs an attempt of s numbered n and, while its worker
// is lost (the infrastructure's failure, not the step's), runs it again
// under the step's next number, at most MaxLost times: for the shapes'
// single attempts (a candidate, a judge, a fixer, a resolve); runAttempts
// does the same within its own loop. A nil from run (it could not start)
// ends it.
func (e *Engine) runAgainIfLost(ctx context.Context, r *Run, s *config.Step, n int, run func(n int) *record.AttemptRecord) *record.AttemptRecord {
	a := run(n)
	for lost := 0; a != nil && a.Outcome == status.OutcomeLost && lost < MaxLost && ctx.Err() == nil; lost++ {
		a = run(r.takeAttempt(s.ID))
	}
	return a
}

// runAttempts runs a step's attempts one after another: retry rules
// decide whether another runs, a fixer may run between them.
func (e *Engine) runAttempts(ctx context.Context, r *Run, i int, keep bool) stepEnd {
	s := r.steps[i]
	var end stepEnd
	var from map[string]string
	var prev *record.AttemptRecord
	first, lost := 0, 0
	for k := 1; ; k++ {
		n := r.takeAttempt(s.ID)
		if k == 1 {
			first = n
			r.mu.Lock()
			r.Record.Steps[i].FirstAttempt = n
			r.mu.Unlock()
		}
		if k > 1 && r.runLimit() != nil {
			break // the pipeline's limit: no further attempt (runItems says which)
		}
		opt := attemptOpts{From: from, Keep: keep, KeepSession: s.ContinueSession}
		if prev != nil {
			e.handoff(r, prev, &opt)
			if s.ContinueSession {
				opt.Resume = sessionOf(r, prev)
			}
		}
		end.last = e.runAttempt(ctx, r, s, n, first+s.Attempts-1+lost, opt)
		end.attempts = k
		r.mu.Lock()
		r.Record.Steps[i].Attempts = k
		r.mu.Unlock()
		// A lost attempt (its worker vanished) is the infrastructure's
		// failure: dispatched again without counting, up to MaxLost.
		if end.last.Outcome == status.OutcomeLost && lost < MaxLost && ctx.Err() == nil {
			lost++
			k--
			continue
		}
		plan := decideRetry(s, k, end.last)
		if end.last.Outcome != status.OutcomePassed {
			r.events.Emit(record.EvStepRetry, map[string]any{"step": s.ID, "attempt": n, "again": plan.Again, "why": plan.Why})
		}
		if !plan.Again || ctx.Err() != nil {
			break
		}
		from = nil
		if plan.Fix {
			from = e.runFixer(ctx, r, s, end.last)
		}
		if plan.Backoff > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(plan.Backoff):
			}
		}
		prev = end.last
	}
	if end.passed() {
		end.heads = headsOf(end.last)
	}
	return end
}

func headsOf(a *record.AttemptRecord) map[string]string {
	h := map[string]string{}
	for _, w := range a.Worktrees {
		if w.HeadSHA != "" {
			h[w.Repo] = w.HeadSHA
		}
	}
	return h
}

// runFixer runs a step's on_failure fixer on the failed attempt's branches
// and returns where the next attempt starts: the fixer's branches when it
// passed, nil (the run branch) when it did not.
func (e *Engine) runFixer(ctx context.Context, r *Run, s *config.Step, failed *record.AttemptRecord) map[string]string {
	fs := e.F.Steps[s.OnFailure]
	if fs == nil {
		return nil
	}
	n := r.takeAttempt(fs.ID)
	opt := attemptOpts{From: map[string]string{}, Keep: true, Role: record.FixerRole(s.ID, failed.Number)}
	for _, w := range failed.Worktrees {
		if w.HeadSHA != "" {
			opt.From[w.Repo] = w.Branch
		}
	}
	e.handoff(r, failed, &opt)
	r.events.Emit(record.EvFixStarted, map[string]any{"step": s.ID, "fixer": fs.ID, "fixer_attempt": n, "failed_attempt": failed.Number})
	fx := e.runAgainIfLost(ctx, r, fs, n, func(n int) *record.AttemptRecord { return e.runAttempt(ctx, r, fs, n, n, opt) })
	data := map[string]any{"step": s.ID, "fixer": fs.ID, "fixer_attempt": fx.Number, "outcome": fx.Outcome}
	if fx.Outcome != status.OutcomePassed {
		data["next_from"] = "the run branch (the fixer did not pass)"
		r.events.Emit(record.EvFixFinished, data)
		return nil
	}
	next := map[string]string{}
	for _, w := range fx.Worktrees {
		if w.HeadSHA != "" {
			next[w.Repo] = w.Branch
		}
	}
	data["next_from"] = next
	r.events.Emit(record.EvFixFinished, data)
	return next
}

// Environment names of the previous attempt's hand-off.
const (
	envPrevious     = "KUSAW_PREVIOUS_"
	handoffDir      = "handoff"
	handoffMaxLines = 40
	handoffMaxBytes = 4 << 10
)

// handoff tells the next attempt (or a fixer) how the previous one ended:
// KUSAW_PREVIOUS_* variables, a folder it may read (outcome, the last
// lines of its output), and for an agent step a note in the prompt.
func (e *Engine) handoff(r *Run, prev *record.AttemptRecord, opt *attemptOpts) {
	adir := record.AttemptDir(r.Dir, prev.Step, prev.Number)
	dir := filepath.Join(adir, handoffDir)
	_ = os.MkdirAll(dir, record.DirMode())
	var out bytes.Buffer
	for _, p := range prev.Processes {
		for _, f := range []string{p.Stderr, p.Stdout} {
			if f == "" {
				continue
			}
			tail := tailLines(readTail(filepath.Join(adir, f), 64<<10), handoffMaxLines, handoffMaxBytes)
			_ = os.WriteFile(filepath.Join(dir, f+".tail"), tail, record.FileMode())
			out.Write(tail)
		}
	}
	exit := ""
	if prev.ExitCode != nil {
		exit = strconv.Itoa(*prev.ExitCode)
	}
	facts := map[string]string{"STEP": prev.Step, "ATTEMPT": strconv.Itoa(prev.Number), "OUTCOME": string(prev.Outcome),
		"REASON": string(prev.Reason), "EXIT_CODE": exit, "MESSAGE": prev.Message, "DIR": dir,
		"OUTPUT": string(tailLines(out.Bytes(), 20, 2<<10))}
	var summary strings.Builder
	for _, k := range []string{"STEP", "ATTEMPT", "OUTCOME", "REASON", "EXIT_CODE", "MESSAGE"} {
		fmt.Fprintf(&summary, "%s=%s\n", strings.ToLower(k), facts[k])
	}
	_ = os.WriteFile(filepath.Join(dir, "outcome"), []byte(summary.String()), record.FileMode())
	if opt.Env == nil {
		opt.Env = map[string]string{}
	}
	for k, v := range facts {
		opt.Env[envPrevious+k] = strings.ToValidUTF8(strings.ReplaceAll(v, "\x00", ""), "?")
	}
	opt.ReadOnly = append(opt.ReadOnly, dir)
	opt.Handoff = dir
	opt.Note = fmt.Sprintf("\n\n(kusaw: attempt %d of step %s ended %s: %s. Its outcome and the last lines of its output are in %s.)",
		prev.Number, prev.Step, describeFailure(prev), truncate(prev.Message, 500), dir)
}

// readTail reads at most the last max bytes of a file: a step's output
// may be far larger than memory.
func readTail(path string, max int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return nil
	}
	off := st.Size() - max
	if off < 0 {
		off = 0
	}
	b := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(b, off)
	return b[:n]
}

// tailLines is the last n lines of b, at most max bytes.
func tailLines(b []byte, n, max int) []byte {
	b = bytes.TrimRight(b, "\n")
	for i, cut := len(b)-1, 0; i >= 0; i-- {
		if b[i] == '\n' {
			cut++
			if cut == n {
				b = b[i+1:]
				break
			}
		}
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	if len(b) > 0 {
		b = append(b, '\n')
	}
	return b
}

// moveHeads moves run branches to merged or chosen work: the moves are
// recorded first (with mark's changes to the record), then made, then
// cleared; a restart finishes recorded moves (finishMoves) rather than
// redoing the work.
func (r *Run) moveHeads(heads map[string]string, mark func()) error {
	r.mu.Lock()
	var moves []record.HeadMove
	for _, rr := range r.Record.Repos {
		if to, ok := heads[rr.Name]; ok && to != "" && to != rr.HeadSHA {
			moves = append(moves, record.HeadMove{Repo: rr.Name, Branch: rr.Branch, From: rr.HeadSHA, To: to})
		}
	}
	if mark != nil {
		mark()
	}
	r.Record.Pending = moves
	r.mu.Unlock()
	r.save()
	return r.finishMoves()
}

// finishMoves makes the run's recorded branch moves that are not made yet.
func (r *Run) finishMoves() error {
	for _, m := range r.Record.Pending {
		rr := r.repo(m.Repo)
		if rr == nil {
			return fmt.Errorf("repo %s is not in the run", m.Repo)
		}
		repo, err := r.openRepo(rr.Name, rr.Path)
		if err != nil {
			return err
		}
		head, err := repo.Head(m.Branch)
		if err != nil {
			return err
		}
		if head != m.To {
			if ok, err := repo.IsAncestor(head, m.To); err != nil || !ok {
				return fmt.Errorf("%s moved to %s meanwhile, which %s does not contain; kusaw leaves it", m.Branch, head, m.To)
			}
			if err := repo.SetBranch(m.Branch, head, m.To); err != nil {
				return err
			}
		}
		r.mu.Lock()
		rr.HeadSHA = m.To
		r.mu.Unlock()
		r.events.Emit(record.EvHeadsMoved, map[string]any{"repo": m.Repo, "branch": m.Branch, "from": m.From, "sha": m.To})
	}
	r.mu.Lock()
	r.Record.Pending = nil
	r.mu.Unlock()
	r.save()
	return nil
}

// runGroup runs a parallel group: every member from the same run-branch
// tip at once, then their commits merged into the run branch in the
// order written.
func (e *Engine) runGroup(ctx context.Context, r *Run, it item) itemEnd {
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	members := make([]memberState, len(it.idx))
	ids := make([]string, len(it.idx))
	for j, i := range it.idx {
		s := r.steps[i]
		members[j] = memberState{Step: s.ID, ContinueOnFailure: s.ContinueOnFailure}
		ids[j] = s.ID
		r.mu.Lock()
		r.Record.Steps[i].Group = it.group
		r.mu.Unlock()
	}
	tips := map[string]string{}
	for _, rr := range r.Record.Repos {
		tips[rr.Name] = rr.HeadSHA
	}
	r.events.Emit(record.EvGroupStarted, map[string]any{"group": it.group, "steps": ids, "from": tips})
	ends := make([]stepEnd, len(it.idx))
	done := make(chan int, len(it.idx))
	for j, i := range it.idx {
		go func() {
			ends[j] = e.runStep(gctx, r, i, true)
			done <- j
		}()
	}
	var plan groupPlan
	canceled := false
	for range it.idx {
		j := <-done
		members[j].Done, members[j].Outcome = true, ends[j].last.Outcome
		plan = decideGroup(members)
		if plan.CancelRest && !canceled {
			canceled = true
			r.events.Emit(record.EvGroupCanceling, map[string]any{"group": it.group, "why": plan.Why})
			cancel()
		}
	}
	if ctx.Err() != nil {
		for j, i := range it.idx {
			r.stepDone(i, ends[j], ends[j].last.Outcome, ends[j].last.Reason)
		}
		return itemEnd{canceled: true}
	}
	if plan.Failed >= 0 {
		for j, i := range it.idx {
			r.stepDone(i, ends[j], ends[j].last.Outcome, ends[j].last.Reason)
		}
		f := ends[plan.Failed]
		return itemEnd{reason: f.last.Reason, fix: f.last.Fix, msg: fmt.Sprintf("step %s %s after %d attempt(s) in parallel group %s: %s",
			ids[plan.Failed], f.last.Outcome, f.attempts, strings.Join(ids, ", "), f.last.Message)}
	}
	heads, end := e.mergeGroup(ctx, r, it, ends, tips)
	mark := func() {
		for j, i := range it.idx {
			sr := &r.Record.Steps[i]
			sr.Outcome, sr.Reason = ends[j].last.Outcome, ends[j].last.Reason
			sr.Attempts, sr.Finished = ends[j].attempts, ptrTime(time.Now().UTC())
		}
	}
	if !end.ok {
		r.mu.Lock()
		mark()
		r.mu.Unlock()
		r.save()
		return end
	}
	if err := r.moveHeads(heads, mark); err != nil {
		return itemEnd{reason: status.ReasonCommitFailed, msg: fmt.Sprintf("parallel group %s: %v", strings.Join(ids, ", "), err)}
	}
	for j, i := range it.idx {
		r.events.Emit(record.EvStepFinished, map[string]any{"step": r.steps[i].ID, "outcome": ends[j].last.Outcome, "reason": ends[j].last.Reason, "attempts": ends[j].attempts})
	}
	r.events.Emit(record.EvGroupMerged, map[string]any{"group": it.group, "steps": ids, "heads": heads})
	return itemEnd{ok: true}
}

// mergeGroup merges the passing members' commits onto the tips, in
// written order, per repo. A conflict runs the first member's resolve
// step when it has one; otherwise the group fails with merge_conflict.
func (e *Engine) mergeGroup(ctx context.Context, r *Run, it item, ends []stepEnd, tips map[string]string) (map[string]string, itemEnd) {
	heads := map[string]string{}
	for k, v := range tips {
		heads[k] = v
	}
	resolve := r.steps[it.idx[0]].Resolve
	for j, i := range it.idx {
		if !ends[j].passed() {
			continue // a member that may fail alone: nothing to merge
		}
		s := r.steps[i]
		for _, rr := range r.Record.Repos {
			theirs := ends[j].heads[rr.Name]
			if theirs == "" || theirs == tips[rr.Name] {
				continue
			}
			repo, err := r.openRepo(rr.Name, rr.Path)
			if err != nil {
				return nil, itemEnd{reason: status.ReasonWorktreeFailed, msg: err.Error()}
			}
			msg := fmt.Sprintf("kusaw: run %s, merge step %s (attempt %d) of parallel group %d", r.ID(), s.ID, ends[j].last.Number, it.group)
			merged, err := repo.Merge(heads[rr.Name], theirs, msg)
			var ce *worktree.ConflictError
			if errors.As(err, &ce) {
				// A step may have touched thousands of files: the records
				// name the first ones and count the rest.
				if len(ce.Files) > maxNamedFiles {
					ce.Files = append(ce.Files[:maxNamedFiles:maxNamedFiles], fmt.Sprintf("… and %d more", len(ce.Files)-maxNamedFiles))
				}
				branches := []string{}
				for k := range it.idx {
					if ends[k].last != nil {
						for _, w := range ends[k].last.Worktrees {
							if w.Repo == rr.Name {
								branches = append(branches, w.Branch)
							}
						}
					}
				}
				r.events.Emit(record.EvMergeConflict, map[string]any{"group": it.group, "repo": rr.Name, "step": s.ID, "files": ce.Files, "branches": branches, "resolve": resolve})
				if resolve == "" {
					return nil, itemEnd{reason: status.ReasonMergeConflict, msg: fmt.Sprintf("parallel group %d: step %s's commit conflicts with the group's work in repo %s, in %s; every member's branch is kept (%s)",
						it.group, s.ID, rr.Name, strings.Join(ce.Files, ", "), strings.Join(branches, ", "))}
				}
				merged, err = e.resolveMerge(ctx, r, it, s.ID, rr.Name, heads[rr.Name], theirs, ce.Files)
				if err != nil {
					return nil, itemEnd{reason: status.ReasonMergeConflict, msg: fmt.Sprintf("parallel group %d: step %s's commit conflicts in repo %s, in %s, and resolve step %s did not complete the merge: %v",
						it.group, s.ID, rr.Name, strings.Join(ce.Files, ", "), resolve, err)}
				}
			} else if err != nil {
				return nil, itemEnd{reason: status.ReasonCommitFailed, msg: err.Error()}
			}
			heads[rr.Name] = merged
		}
	}
	return heads, itemEnd{ok: true}
}

// maxNamedFiles bounds the conflicted files a record names.
const maxNamedFiles = 50

// resolveMerge runs the resolve step in a worktree holding the conflicted
// merge of theirs into ours; its commit (with both parents) is the merge.
func (e *Engine) resolveMerge(ctx context.Context, r *Run, it item, member, repoName, ours, theirs string, files []string) (string, error) {
	rs := e.F.Steps[r.steps[it.idx[0]].Resolve]
	if rs == nil {
		return "", errors.New("the resolve step is not defined")
	}
	if !slices.Contains(e.F.ActiveRepos(rs), repoName) {
		return "", fmt.Errorf("step %s does not work on repo %s (add it to its repos)", rs.ID, repoName)
	}
	rr := r.repo(repoName)
	repo, err := r.openRepo(rr.Name, rr.Path)
	if err != nil {
		return "", err
	}
	var berr error
	a := e.runAgainIfLost(ctx, r, rs, r.takeAttempt(rs.ID), func(n int) *record.AttemptRecord {
		// The merge so far is on no branch yet: the resolve starts from
		// a branch of its own at it.
		base := worktree.AttemptBranch(r.ID(), rs.ID, n) + "-base"
		if berr = repo.SetBranch(base, "", ours); berr != nil {
			return nil
		}
		opt := attemptOpts{Keep: true, From: map[string]string{repoName: base}, Merge: map[string]string{repoName: theirs},
			Env: map[string]string{record.EnvMergeConflicts: strings.Join(files, "\n")}, Role: record.ResolveRole(it.group, member, repoName)}
		return e.runAttempt(ctx, r, rs, n, n, opt)
	})
	if berr != nil {
		return "", berr
	}
	if a.Outcome != status.OutcomePassed {
		return "", fmt.Errorf("attempt %d %s: %s", a.Number, a.Outcome, a.Message)
	}
	for _, w := range a.Worktrees {
		if w.Repo == repoName && w.HeadSHA != "" {
			r.events.Emit(record.EvMergeResolved, map[string]any{"group": it.group, "repo": repoName, "step": rs.ID, "attempt": a.Number, "sha": w.HeadSHA, "files": files})
			return w.HeadSHA, nil
		}
	}
	return "", errors.New("the resolve step left no commit")
}

// candidateStep is the step candidate k (from 0) runs: the step itself,
// or a copy with the candidate's own provider when candidates name them.
func candidateStep(s *config.Step, k int) *config.Step {
	if k >= len(s.CandidateProviders) || s.CandidateProviders[k] == s.Provider {
		return s
	}
	c := *s
	c.Provider = s.CandidateProviders[k]
	return &c
}

// runCandidates runs a step's candidates at once from the same tip and
// keeps one (select: first, all or judge:STEP).
func (e *Engine) runCandidates(ctx context.Context, r *Run, i int) stepEnd {
	s := r.steps[i]
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nums := make([]int, s.Candidates)
	for k := range nums {
		nums[k] = r.takeAttempt(s.ID)
	}
	r.mu.Lock()
	r.Record.Steps[i].FirstAttempt, r.Record.Steps[i].Candidates = nums[0], s.Candidates
	r.mu.Unlock()
	recs := make([]*record.AttemptRecord, len(nums))
	done := make(chan int, len(nums))
	// A lost candidate runs again under a number after the others':
	// every number the step's candidates may take is a sibling's.
	last := nums[len(nums)-1] + len(nums)*MaxLost
	for k := range nums {
		go func() {
			recs[k] = e.runAgainIfLost(cctx, r, s, nums[k], func(n int) *record.AttemptRecord {
				opt := attemptOpts{Keep: true, Env: map[string]string{record.EnvCandidate: strconv.Itoa(k + 1)}}
				for m := nums[0]; m <= last; m++ {
					if m != n {
						opt.Siblings = append(opt.Siblings, worktree.AttemptBranch(r.ID(), s.ID, m))
					}
				}
				return e.runAttempt(cctx, r, candidateStep(s, k), n, max(n, nums[len(nums)-1]), opt)
			})
			done <- k
		}()
	}
	states := make([]candState, len(nums))
	for k := range states {
		states[k].N = k + 1
	}
	var plan candPlan
	decided := false
	for order := 1; order <= len(nums); order++ {
		k := <-done
		states[k].Order, states[k].Passed = order, recs[k].Outcome == status.OutcomePassed
		if states[k].Passed && s.Select == config.SelectAll {
			states[k].DiffSize = e.diffSize(r, recs[k])
		}
		if decided {
			continue
		}
		plan = decideCandidates(s.Select, states)
		if plan.Done || plan.Judge {
			decided = true
			if plan.CancelRest {
				cancel()
			}
		}
	}
	if plan.Judge && ctx.Err() == nil {
		plan.Winner, plan.Why = e.runJudge(ctx, r, s, recs, states)
	}
	list := []map[string]any{}
	for k, a := range recs {
		w := map[string]any{"candidate": k + 1, "attempt": a.Number, "outcome": a.Outcome}
		if len(s.CandidateProviders) > 0 {
			w["provider"] = candidateStep(s, k).Provider
		}
		var br []string
		for _, wt := range a.Worktrees {
			br = append(br, wt.Branch)
		}
		w["branches"] = br
		list = append(list, w)
	}
	r.events.Emit(record.EvCandidatesSelected, map[string]any{"step": s.ID, "select": selectName(s), "chosen": plan.Winner, "why": plan.Why, "candidates": list})
	end := stepEnd{attempts: len(nums)}
	if plan.Winner > 0 {
		end.last = recs[plan.Winner-1]
		end.heads = headsOf(end.last)
		r.mu.Lock()
		r.Record.Steps[i].Chosen = end.last.Number
		r.mu.Unlock()
		return end
	}
	// None kept: the step ends as its candidates did, judged by the one
	// that ended last (a judge that did not choose fails the step).
	end.last = recs[0]
	for k := range recs {
		if states[k].Order == len(nums) {
			end.last = recs[k]
		}
	}
	if plan.Judge || end.last.Outcome == status.OutcomePassed {
		cp := *end.last
		cp.Outcome, cp.Reason, cp.Message = status.OutcomeFailed, status.ReasonStepExitNonzero, "no candidate was chosen: "+plan.Why
		end.last = &cp
	}
	return end
}

func selectName(s *config.Step) string {
	switch s.Select {
	case "":
		return string(config.SelectFirst)
	case config.SelectJudge:
		return "judge:" + s.Judge
	}
	return string(s.Select)
}

// diffSize is the size of a candidate's patches, for select: all.
func (e *Engine) diffSize(r *Run, a *record.AttemptRecord) int {
	n := 0
	for _, w := range a.Worktrees {
		rr := r.repo(w.Repo)
		repo, err := r.openRepo(rr.Name, rr.Path)
		if err != nil || w.HeadSHA == "" || w.BaseSHA == "" {
			continue
		}
		if size, err := repo.PatchSize(w.BaseSHA, w.HeadSHA); err == nil {
			n += int(size)
		}
	}
	return n
}

// runJudge runs the judge step with every passing candidate's files
// readable (KUSAW_CANDIDATE_<n>, exported where the judge runs) and reads
// its choice from $KUSAW_ARTIFACTS/choice.
func (e *Engine) runJudge(ctx context.Context, r *Run, s *config.Step, recs []*record.AttemptRecord, states []candState) (int, string) {
	js := e.F.Steps[s.Judge]
	if js == nil {
		return 0, "judge step " + s.Judge + " is not defined"
	}
	opt := attemptOpts{Keep: true, Role: record.JudgeRole(s.ID)}
	var passing []string
	for k, a := range recs {
		if !states[k].Passed {
			continue
		}
		opt.Candidates = append(opt.Candidates, record.SpecCandidate{Number: k + 1, Heads: headsOf(a)})
		passing = append(passing, strconv.Itoa(k+1))
	}
	a := e.runAgainIfLost(ctx, r, js, r.takeAttempt(js.ID), func(n int) *record.AttemptRecord { return e.runAttempt(ctx, r, js, n, n, opt) })
	if a.Outcome != status.OutcomePassed {
		return 0, fmt.Sprintf("judge %s attempt %d %s: %s", js.ID, a.Number, a.Outcome, a.Message)
	}
	dir := record.AttemptDir(r.Dir, js.ID, a.Number)
	// The judge wrote choice: read it as an artifact (a link to a host
	// file, a FIFO or a huge file is refused, not followed or read).
	b, err := record.ReadArtifact(dir, "choice", 64)
	if errors.Is(err, record.ErrNotArtifact) {
		return 0, fmt.Sprintf("judge %s's choice is refused: %v; write the candidate's number to $%s/choice as a plain file", js.ID, err, steps.EnvArtifacts)
	}
	if err != nil {
		return 0, fmt.Sprintf("judge %s wrote no choice ($%s/choice)", js.ID, steps.EnvArtifacts)
	}
	c := strings.TrimSpace(string(b))
	if !slices.Contains(passing, c) {
		return 0, fmt.Sprintf("judge %s chose %q, which is not a passing candidate (%s)", js.ID, truncate(c, 40), strings.Join(passing, ", "))
	}
	w, _ := strconv.Atoi(c)
	return w, fmt.Sprintf("judge %s chose candidate %d", js.ID, w)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Slots bound the attempts running at once across an engine's runs
// (serve.max_parallel). A nil *Slots is unbounded.
type Slots struct{ ch chan struct{} }

// NewSlots makes n slots (n < 1: unbounded).
func NewSlots(n int) *Slots {
	if n < 1 {
		return nil
	}
	return &Slots{ch: make(chan struct{}, n)}
}

// acquire waits for a slot; release gives it back. An error means ctx
// ended first.
func (s *Slots) acquire(ctx context.Context) (release func(), err error) {
	if s == nil {
		return func() {}, nil
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// InUse is how many slots are taken.
func (s *Slots) InUse() int {
	if s == nil {
		return 0
	}
	return len(s.ch)
}

// sessionOf is the agent session a continue_session attempt continues:
// the previous attempt's result's session id and its provider folder.
// Nil when the attempt reported none (it never started its agent).
func sessionOf(r *Run, prev *record.AttemptRecord) *attempt.SessionResume {
	for _, p := range prev.Processes {
		b, err := json.Marshal(p.Result)
		if err != nil {
			continue
		}
		var res struct {
			SessionID string `json:"session_id"`
		}
		if json.Unmarshal(b, &res) == nil && res.SessionID != "" {
			return &attempt.SessionResume{SessionID: res.SessionID,
				ConfigDir: filepath.Join(record.AttemptDir(r.Dir, prev.Step, prev.Number), attempt.SessionDir)}
		}
	}
	return nil
}
