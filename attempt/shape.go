package attempt

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/worktree"
)

// What the pipeline's shape gives an attempt where it runs: a resolve's
// merge started in its worktrees, a judge's candidates exported, a
// worker's shape laid out from the spec.

// maxNamedFiles bounds the conflicted files a record names.
const maxNamedFiles = 50

// startMerges merges the commits a resolve step is given into its
// worktrees, leaving the conflicts for it to edit.
func (a *Attempt) startMerges() error {
	for repo, theirs := range a.job.Shape.Merge {
		wt := a.wts[repo]
		if wt == nil {
			return fmt.Errorf("step %s has no worktree of repo %s to resolve the merge in", a.step.ID, repo)
		}
		files, err := wt.StartMerge(theirs)
		if err != nil {
			return err
		}
		if len(files) > maxNamedFiles {
			files = append(files[:maxNamedFiles:maxNamedFiles], fmt.Sprintf("… and %d more", len(files)-maxNamedFiles))
		}
		a.events.Emit(record.EvMergeConflict, map[string]any{"repo": repo, "merging": theirs, "files": files})
	}
	return nil
}

// Where a judge's attempt finds the candidates (its own folder).
const (
	candidatesDir = "candidates"
	envCandidateN = "KUSAW_CANDIDATE_"
	envCandidates = "KUSAW_CANDIDATES"
)

// exportCandidates writes each candidate a judge reads into a folder of
// the attempt's own, from the repositories of the machine it runs on:
// $KUSAW_CANDIDATE_<n> (a folder per repo when there are several),
// readable only; KUSAW_CANDIDATES lists their numbers.
func (a *Attempt) exportCandidates() error {
	if len(a.job.Shape.Candidates) == 0 {
		return nil
	}
	env := map[string]string{}
	for k, v := range a.job.Shape.Env {
		env[k] = v
	}
	readOnly := slices.Clone(a.job.Shape.ReadOnly)
	var nums []string
	for _, c := range a.job.Shape.Candidates {
		d := filepath.Join(a.dir, candidatesDir, strconv.Itoa(c.Number))
		if err := os.MkdirAll(d, record.DirMode()); err != nil {
			return err
		}
		for repoName, head := range c.Heads {
			rc := a.f.Repos[repoName]
			if rc == nil {
				return fmt.Errorf("candidate %d: repo %s is not on this machine", c.Number, repoName)
			}
			repo, err := a.job.openRepo(repoName, rc.Path)
			if err != nil {
				return fmt.Errorf("candidate %d: %v", c.Number, err)
			}
			out := d
			if len(c.Heads) > 1 {
				out = filepath.Join(d, repoName)
			}
			if err := repo.Export(head, out); err != nil {
				return fmt.Errorf("candidate %d: %v", c.Number, err)
			}
		}
		env[envCandidateN+strconv.Itoa(c.Number)] = d
		readOnly = append(readOnly, d)
		nums = append(nums, strconv.Itoa(c.Number))
	}
	env[envCandidates] = strings.Join(nums, " ")
	a.job.Shape.Env, a.job.Shape.ReadOnly = env, readOnly
	return nil
}

// ShapeOf is the shape of another machine's attempt, from its spec: the
// handoff's files written under dir (which stands in for the
// placeholder), and the shape's env, sibling branches, merges and
// candidates as they are.
func ShapeOf(spec *record.AttemptSpec, dir string) (Shape, error) {
	opt := Shape{Siblings: spec.Siblings, Merge: spec.Merge, Candidates: spec.Candidates}
	if len(spec.Env) > 0 {
		opt.Env = maps.Clone(spec.Env)
	}
	h := spec.Handoff
	if h == nil {
		return opt, nil
	}
	if err := os.MkdirAll(dir, record.DirMode()); err != nil {
		return Shape{}, err
	}
	for name, body := range h.Files {
		if name != filepath.Base(name) || name == "." || name == ".." {
			continue // a name, never a path
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), record.FileMode()); err != nil {
			return Shape{}, err
		}
	}
	opt.ReadOnly, opt.Handoff = []string{dir}, dir
	opt.Note = strings.ReplaceAll(h.Note, record.HandoffPlaceholder, dir)
	if opt.Env == nil {
		opt.Env = map[string]string{}
	}
	for k, v := range h.Env {
		opt.Env[k] = strings.ReplaceAll(v, record.HandoffPlaceholder, dir)
	}
	return opt, nil
}

// ForeignJob is the job of another machine's attempt run on this one (a
// cluster worker's), in runDir (the run's folder here) against repos (this
// machine's repositories by name). Each repo gets a run branch of the
// attempt's own, made at the spec's base with the worktree: attempts of
// one run may run here at once from different bases. Its records are
// volatile: the folder goes with the attempt, and serve keeps the records
// that count.
func ForeignJob(spec *record.AttemptSpec, repos map[string]string, runDir string) (Job, error) {
	if err := spec.Check(); err != nil {
		return Job{}, err
	}
	if err := os.MkdirAll(filepath.Join(runDir, record.StepsDir), record.DirMode()); err != nil {
		return Job{}, err
	}
	job := Job{Dir: record.AttemptDir(runDir, spec.Step, spec.Number), NewBranches: true, Volatile: true, RunBranchElsewhere: true}
	opened := map[string]*worktree.Repo{}
	for _, sr := range spec.Repos {
		path := repos[sr.Name]
		repo, err := worktree.OpenRepo(path)
		if err != nil {
			return Job{}, err
		}
		opened[path] = repo
		branch := worktree.RunBranch(spec.Run + "." + spec.Step + "." + strconv.Itoa(spec.Number))
		// The run's starting commit, not the attempt's base: setup runs
		// outside the sandbox only on the former (setupPlace).
		job.Repos = append(job.Repos, record.RunRepo{Name: sr.Name, Path: path, BaseSHA: sr.RunBase, Branch: branch, HeadSHA: sr.Base})
	}
	shape, err := ShapeOf(spec, filepath.Join(runDir, "handoff", spec.Step, strconv.Itoa(spec.Number)))
	if err != nil {
		return Job{}, err
	}
	job.Shape = shape
	job.OpenRepo = func(_, path string) (*worktree.Repo, error) {
		if r := opened[path]; r != nil {
			return r, nil
		}
		return worktree.OpenRepo(path)
	}
	return job, nil
}
