package factory

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kusaw/kusaw/attempt"
	"github.com/kusaw/kusaw/chainlog"
	"github.com/kusaw/kusaw/internal/proc"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/secretstore"
	"github.com/kusaw/kusaw/status"
	"github.com/kusaw/kusaw/worktree"
)

// State is a factory's state directory.
type State struct {
	Dir string
	// Recovered lists the runs this Open found abandoned and marked
	// interrupted.
	Recovered []string
}

// OpenState opens (creating) a state directory and recovers runs whose
// owner died: each is marked interrupted with its running attempts, and
// their worktrees are removed.
func OpenState(dir string) (*State, error) {
	if err := os.MkdirAll(filepath.Join(dir, record.RunsDir), record.DirMode()); err != nil {
		return nil, fmt.Errorf("cannot create the state directory %s: %v (fix: check state_dir in the factory file)", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, record.ActiveDir), record.DirMode()); err != nil {
		return nil, fmt.Errorf("cannot create %s: %v", filepath.Join(dir, record.ActiveDir), err)
	}
	// The records hold prompts, outputs and egress decisions: the state
	// folder is private to kusaw's user unless state_dir_mode shares it.
	// Setting its mode each time also closes a folder an older kusaw made
	// 0755; what lies below is then out of other users' reach too.
	for _, d := range []string{dir, filepath.Join(dir, record.RunsDir), filepath.Join(dir, record.ActiveDir)} {
		if err := os.Chmod(d, record.DirMode()); err != nil {
			// A folder kusaw cannot change (another user's) is used as
			// it is, unless it is more open than the factory allows.
			if fi, serr := os.Stat(d); serr != nil || fi.Mode().Perm()&^record.DirMode() != 0 {
				return nil, fmt.Errorf("cannot make %s private: %v (fix: chmod %o %s as its owner, or set state_dir_mode)", d, err, record.DirMode(), d)
			}
		}
	}
	s := &State{Dir: dir}
	if err := s.recover(); err != nil {
		return s, err
	}
	return s, nil
}

// RunDir is the folder of one run.
func (s *State) RunDir(id string) string { return filepath.Join(s.Dir, record.RunsDir, id) }

// NewRunID returns a sortable run id: UTC time and 4 random hex digits.
func NewRunID(now time.Time) string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// idSecond is the time part of a run id (YYYYMMDD-HHMMSS).
func idSecond(id string) string {
	if len(id) >= 15 {
		return id[:15]
	}
	return id
}

// Runs lists the run records, newest first.
func (s *State) Runs() ([]*record.RunRecord, error) {
	entries, err := os.ReadDir(filepath.Join(s.Dir, record.RunsDir))
	if err != nil {
		return nil, err
	}
	var out []*record.RunRecord
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		r, err := s.LoadRun(e.Name())
		if err != nil {
			continue // a run folder without a record yet
		}
		out = append(out, r)
	}
	// Ids sort by the second they were made in; the creation time orders
	// runs started within the same second.
	sort.Slice(out, func(i, j int) bool {
		si, sj := idSecond(out[i].ID), idSecond(out[j].ID)
		if si != sj {
			return si > sj
		}
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// LoadRun reads a run's record. A unique prefix of an id is accepted.
func (s *State) LoadRun(id string) (*record.RunRecord, error) {
	full, err := s.resolveID(id)
	if err != nil {
		return nil, err
	}
	var r record.RunRecord
	if err := readJSON(filepath.Join(s.RunDir(full), record.RunFile), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (s *State) resolveID(id string) (string, error) {
	if !record.ValidName(id) {
		return "", fmt.Errorf("%w %q", record.ErrNoRun, id)
	}
	if _, err := os.Stat(filepath.Join(s.RunDir(id), record.RunFile)); err == nil {
		return id, nil
	}
	entries, _ := os.ReadDir(filepath.Join(s.Dir, record.RunsDir))
	var match []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), id) {
			match = append(match, e.Name())
		}
	}
	if len(match) == 1 {
		return match[0], nil
	}
	if len(match) > 1 {
		return "", fmt.Errorf("%w %q: it begins %s", record.ErrAmbiguousRun, id, strings.Join(match, ", "))
	}
	return "", fmt.Errorf("%w %q (list runs with: kusaw runs)", record.ErrNoRun, id)
}

// Attempts reads the attempt records of the pipeline's own steps, in
// pipeline order of the run's steps, then attempt number: what decides a
// step's outcome and the run's exit code. Helpers are not among them.
func (s *State) Attempts(r *record.RunRecord) ([]*record.AttemptRecord, error) {
	var out []*record.AttemptRecord
	seen := map[string]bool{}
	for _, st := range r.Steps {
		if seen[st.ID] {
			continue // a step listed twice: its attempts are read once
		}
		seen[st.ID] = true
		for _, a := range s.stepAttempts(r.ID, st.ID) {
			if a.Role == nil {
				out = append(out, a)
			}
		}
	}
	return out, nil
}

// Helpers reads the attempts of the helpers the run's shapes ran
// (fixers, judges, resolve steps), in the order they started. A helper's
// attempt is one with a role, or any attempt of a step with no line in
// run.json of its own (a record from before roles were recorded).
func (s *State) Helpers(r *record.RunRecord) ([]*record.AttemptRecord, error) {
	listed := map[string]bool{}
	for _, st := range r.Steps {
		listed[st.ID] = true
	}
	entries, err := os.ReadDir(filepath.Join(s.RunDir(r.ID), record.StepsDir))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	var out []*record.AttemptRecord
	for _, en := range entries {
		if !en.IsDir() {
			continue
		}
		for _, a := range s.stepAttempts(r.ID, en.Name()) {
			if a.Role != nil || !listed[en.Name()] {
				out = append(out, a)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, err
}

// stepAttempts reads the attempts of one step of a run, in number order.
func (s *State) stepAttempts(run, step string) []*record.AttemptRecord {
	dir := filepath.Join(s.RunDir(run), record.StepsDir, step)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var recs []*record.AttemptRecord
	for _, e := range entries {
		var a record.AttemptRecord
		if err := readJSON(filepath.Join(dir, e.Name(), record.AttemptFile), &a); err != nil {
			continue
		}
		recs = append(recs, &a)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Number < recs[j].Number })
	return recs
}

// AttemptDir is the folder of one attempt.
func (s *State) AttemptDir(run, step string, n int) string {
	return record.AttemptDir(s.RunDir(run), step, n)
}

// RequestCancel asks the run's owner to cancel it: the owner watches for the
// cancel file. It fails for a run that already ended.
func (s *State) RequestCancel(id string) (*record.RunRecord, error) {
	r, err := s.LoadRun(id)
	if err != nil {
		return nil, err
	}
	if r.State.Final() {
		return r, fmt.Errorf("run %s already ended (%s)", r.ID, r.State)
	}
	if err := os.WriteFile(filepath.Join(s.RunDir(r.ID), record.CancelFile), []byte(time.Now().UTC().Format(time.RFC3339Nano)+"\n"), record.FileMode()); err != nil {
		return r, err
	}
	return r, nil
}

// RunLock is an exclusive flock held for as long as its owner lives: a run's
// executor, or serve on its state directory.
type RunLock struct{ f *os.File }

// TryLock takes the lock at path without waiting; ok is false when another
// process holds it.
func TryLock(path string) (*RunLock, bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, record.FileMode())
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return &RunLock{f: f}, true, nil
}

func (l *RunLock) Unlock() {
	if l != nil && l.f != nil {
		_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
		l.f.Close()
		l.f = nil
	}
}

// AllAttempts is Attempts and then Helpers: every attempt of the run, as
// recovery and a resume must see them (a helper's attempt may still run
// on a worker too), and as the views show them.
func (s *State) AllAttempts(r *record.RunRecord) ([]*record.AttemptRecord, error) {
	out, err := s.Attempts(r)
	h, herr := s.Helpers(r)
	return append(out, h...), errors.Join(err, herr)
}

// recover marks every active run whose owner is gone as interrupted.
func (s *State) recover() error {
	entries, err := os.ReadDir(filepath.Join(s.Dir, record.ActiveDir))
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		id := e.Name()
		marker := filepath.Join(s.Dir, record.ActiveDir, id)
		runDir := s.RunDir(id)
		if _, err := os.Stat(runDir); err != nil {
			os.Remove(marker)
			continue
		}
		l, ok, err := TryLock(filepath.Join(runDir, record.LockFile))
		if err != nil {
			errs = append(errs, fmt.Errorf("run %s: %v", id, err))
			continue
		}
		if !ok {
			continue // its owner is alive
		}
		if err := s.interrupt(id); err != nil {
			errs = append(errs, err)
		} else {
			s.Recovered = append(s.Recovered, id)
			os.Remove(marker)
		}
		l.Unlock()
	}
	return errors.Join(errs...)
}

// interrupt records an abandoned run as interrupted and removes what its
// attempts left in the repositories.
func (s *State) interrupt(id string) error {
	runDir := s.RunDir(id)
	var r record.RunRecord
	if err := readJSON(filepath.Join(runDir, record.RunFile), &r); err != nil {
		return fmt.Errorf("recover run %s: %v", id, err)
	}
	now := time.Now().UTC()
	var errs []error
	key := recoveryKey()
	attempts, _ := s.AllAttempts(&r)
	for _, a := range attempts {
		if a.Finished != nil || Detached(a) {
			// A detached attempt goes on on its worker: a resumed run
			// re-attaches to it, anything else ends it (FinishDetached).
			continue
		}
		if err := s.closeAttempt(&r, a, now, key, "kusaw stopped while the attempt ran"); err != nil {
			errs = append(errs, err)
		}
	}
	// Worktrees the records may not name (a crash between git worktree add
	// and the record's update): every kusaw worktree inside this run's
	// folder goes.
	for _, rr := range r.Repos {
		repo, err := worktree.OpenRepo(rr.Path)
		if err != nil {
			continue
		}
		wts, err := repo.ListKusawWorktrees()
		if err == nil {
			for _, w := range wts {
				// A registration a crash cut short names no folder yet
				// (makeAdmin writes gitdir after HEAD) and is locked, so
				// prune leaves it: this run's own attempt branch says it
				// is the run's.
				half := w.Path == "" && worktree.IsAttemptBranchOf(w.Branch, id)
				if within(runDir, w.Path) || half {
					if err := repo.RemoveWorktree(w); err != nil {
						errs = append(errs, err)
					}
				}
			}
		}
		_ = repo.Prune()
	}
	if err := sweepAttemptDirs(runDir, &r, s.runRepos(&r), now); err != nil {
		errs = append(errs, err)
	}
	r.State = status.RunInterrupted
	r.Reason = status.ReasonRunInterrupted
	r.Message = "kusaw stopped while the run was running"
	r.Fix = status.ReasonRunInterrupted.Info().Fix
	r.Finished = &now
	os.Remove(filepath.Join(runDir, record.CancelFile))
	// The events first: run.json then names their final seal.
	seal, err := appendFinal(filepath.Join(runDir, record.EventsFile), key, attempt.LogOptions(r.ID, "", 0, chainlog.KindEvents), record.Event{TS: now, Run: r.ID, Type: record.EvRunFinished,
		Data: map[string]any{"state": r.State, "reason": r.Reason, "message": r.Message, "fix": r.Fix, "recovered": true}})
	if err == nil {
		r.EventsSeal = &seal
	}
	if err := writeJSON(filepath.Join(runDir, record.RunFile), &r); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// closeAttempt ends an attempt its kusaw left unfinished as interrupted:
// what its processes left running ends, its worktrees go, its events and
// egress log are closed and sealed, and its step in r is marked.
func (s *State) closeAttempt(r *record.RunRecord, a *record.AttemptRecord, now time.Time, key ed25519.PrivateKey, msg string) error {
	var errs []error
	a.Outcome = status.OutcomeInterrupted
	a.Reason = status.ReasonRunInterrupted
	a.Message = msg
	a.Fix = status.ReasonRunInterrupted.Info().Fix
	a.Finished = &now
	for i := range a.Processes {
		p := &a.Processes[i]
		if p.Outcome == "" {
			// What the dead kusaw's process left running (children
			// the parent-death signal did not reach) ends now.
			if _, err := proc.EndGroup(p.PID, p.Start); err != nil {
				errs = append(errs, fmt.Errorf("end the processes of %s attempt %d: %v", a.Step, a.Number, err))
			}
			p.Outcome = status.OutcomeInterrupted
		}
	}
	dir := s.AttemptDir(r.ID, a.Step, a.Number)
	// A tree taken from a worktree pool is in the attempt's folder before
	// its repository registers it: what a crash in between left there
	// (the tree, its slot's stage folder) no repository lists, so it goes
	// first, and RemoveWorktree then finds nothing at the planned path.
	if _, err := worktree.RemoveUnregistered(filepath.Join(dir, record.WorktreesDir), s.runRepos(r)); err != nil {
		errs = append(errs, fmt.Errorf("%s attempt %d: %v", a.Step, a.Number, err))
	}
	for i := range a.Worktrees {
		w := &a.Worktrees[i]
		if err := attempt.RemoveWorktree(w); err != nil {
			errs = append(errs, err)
		}
	}
	os.RemoveAll(filepath.Join(dir, record.TmpDir))
	_, _ = appendFinal(filepath.Join(dir, record.EventsFile), key, attempt.LogOptions(r.ID, a.Step, a.Number, chainlog.KindEvents), record.Event{TS: now, Run: r.ID, Step: a.Step, Attempt: a.Number, Type: record.EvAttemptFinished,
		Data: map[string]any{"outcome": status.OutcomeInterrupted, "reason": status.ReasonRunInterrupted, "message": a.Message, "recovered": true}})
	closeRecovered(filepath.Join(dir, record.EgressLogFile), key, attempt.LogOptions(r.ID, a.Step, a.Number, chainlog.KindEgress))
	os.Remove(filepath.Join(dir, record.WorktreesDir)) // empty once its worktrees are gone
	removeLeaseDirs(dir)
	if err := writeJSON(filepath.Join(dir, record.AttemptFile), a); err != nil {
		errs = append(errs, err)
	}
	for i := range r.Steps {
		if r.Steps[i].ID == a.Step && r.Steps[i].Outcome == "" {
			r.Steps[i].Outcome = status.OutcomeInterrupted
			r.Steps[i].Reason = status.ReasonRunInterrupted
			r.Steps[i].Finished = &now
		}
	}
	return errors.Join(errs...)
}

// runRepos opens the run's repositories (those that still open).
func (s *State) runRepos(r *record.RunRecord) []*worktree.Repo {
	var out []*worktree.Repo
	for _, rr := range r.Repos {
		if repo, err := worktree.OpenRepo(rr.Path); err == nil {
			out = append(out, repo)
		}
	}
	return out
}

// Detached reports whether an attempt was left running on a worker by a
// serve that died: unfinished, with the worker and token of its claim.
func Detached(a *record.AttemptRecord) bool {
	return a.Finished == nil && a.Worker != "" && a.Token != 0
}

func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..")
}

// appendFinal continues an events file left by a dead kusaw with a closing
// event and seals it, so the record of an interrupted run ends like any
// other. chainlog.Open refuses a file whose lines do not all carry the
// factory's signatures for this place (so recovery never signs what kusaw
// did not write), and marks where the dead writer stopped.
func appendFinal(path string, key ed25519.PrivateKey, opts chainlog.Options, ev record.Event) (chainlog.SealRef, error) {
	if key == nil {
		return chainlog.SealRef{}, errors.New("no log-signing key")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return chainlog.SealRef{}, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		var e struct {
			Seq int64 `json:"seq"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Seq > ev.Seq {
			ev.Seq = e.Seq
		}
	}
	ev.Seq++
	w, err := chainlog.Open(path, key, opts)
	if err != nil {
		return chainlog.SealRef{}, err
	}
	if err := w.Append(ev); err != nil {
		w.Close()
		return chainlog.SealRef{}, err
	}
	if err := w.Close(); err != nil {
		return chainlog.SealRef{}, err
	}
	return w.LastSeal(), nil
}

// closeRecovered closes a log a dead kusaw left open (an attempt's
// egress.log): chainlog.Open writes the recovered marker, which names any
// lines it found unsealed, and Close the final seal. A log that does not
// verify, or does not exist, is left as it is.
func closeRecovered(path string, key ed25519.PrivateKey, opts chainlog.Options) {
	if key == nil {
		return
	}
	if _, err := os.Stat(path); err != nil {
		return
	}
	if w, err := chainlog.Open(path, key, opts); err == nil {
		_ = w.Close()
	}
}

// recoveryKey loads the log-signing key for closing abandoned logs; nil
// when it cannot (the logs then stay unsealed at their end, which verify
// reports).
func recoveryKey() ed25519.PrivateKey {
	dir, err := secretstore.Dir()
	if err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, chainlog.KeyFile)); err != nil {
		return nil
	}
	k, err := chainlog.LoadOrCreateKey(dir)
	if err != nil {
		return nil
	}
	return k
}

// ReadLog reads a run's log file (a path relative to the run's folder,
// checked by record.ValidLogPath) from offset, at most max bytes. A missing file
// reads as empty.
func (s *State) ReadLog(runID, rel string, offset, max int64) ([]byte, error) {
	if !record.ValidLogPath(rel) {
		return nil, fmt.Errorf("%w: %q", record.ErrBadLogPath, rel)
	}
	f, err := os.Open(filepath.Join(s.RunDir(runID), filepath.FromSlash(rel)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %q is not a regular file", record.ErrBadLogPath, rel)
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(f, max))
}
