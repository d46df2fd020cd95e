package worktree

import (
	"fmt"
	"strings"
)

// RunBranches lists the branches one run made in this repository, by name
// with their commits: its run branch kusaw/<run-id> and its attempts'
// kusaw/attempts/<run-id>/<step>/<n>. The names come from the run id, never
// from a record, so nothing else can be named (retention deletes these).
func (r *Repo) RunBranches(runID string) (map[string]string, error) {
	if err := checkRunID(runID); err != nil {
		return nil, err
	}
	// for-each-ref matches a pattern literally up to a slash: the run
	// branch itself, and everything below the run's attempt prefix. The
	// run id has no glob characters (checkRunID).
	out, err := r.git.run(gitCmd{dir: r.workDir(), args: []string{"for-each-ref", "--format=%(objectname) %(refname)",
		"refs/heads/" + RunBranch(runID), "refs/heads/" + attemptPrefix + runID + "/"}})
	if err != nil {
		return nil, fmt.Errorf("list the branches of run %s in %s: %v", runID, r, err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		sha, ref, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		b := strings.TrimPrefix(ref, "refs/heads/")
		if b == RunBranch(runID) || strings.HasPrefix(b, attemptPrefix+runID+"/") {
			got[b] = sha
		}
	}
	return got, nil
}

// KusawBranches lists every kusaw branch of the repository in one git
// process, by the run it belongs to: what RunBranches would give for
// each run, for a pass over many runs.
func (r *Repo) KusawBranches() (map[string]map[string]string, error) {
	out, err := r.git.run(gitCmd{dir: r.workDir(), args: []string{"for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/" + branchPrefix}})
	if err != nil {
		return nil, fmt.Errorf("list the kusaw branches of %s: %v", r, err)
	}
	got := map[string]map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		sha, ref, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		b := strings.TrimPrefix(ref, "refs/heads/")
		id, ok := runOfBranch(b)
		if !ok {
			continue
		}
		if got[id] == nil {
			got[id] = map[string]string{}
		}
		got[id][b] = sha
	}
	return got, nil
}

// runOfBranch is the run id a kusaw branch belongs to.
func runOfBranch(b string) (string, bool) {
	if rest, ok := strings.CutPrefix(b, attemptPrefix); ok {
		id, _, ok := strings.Cut(rest, "/")
		return id, ok && checkRunID(id) == nil
	}
	id, ok := strings.CutPrefix(b, branchPrefix)
	return id, ok && !strings.Contains(id, "/") && checkRunID(id) == nil
}

// DeleteRunBranches deletes the branches RunBranches lists, except one
// checked out in a worktree (git's own rule: kusaw never pulls a branch
// from under a checkout), and returns what it deleted and what it left.
// Each deletion names the commit it saw, so a branch that moved meanwhile
// stays.
func (r *Repo) DeleteRunBranches(runID string) (deleted, left []string, err error) {
	branches, err := r.RunBranches(runID)
	if err != nil || len(branches) == 0 {
		return nil, nil, err
	}
	return r.DeleteBranchesOf(runID, branches)
}

// DeleteBranchesOf is DeleteRunBranches for branches already listed (by
// KusawBranches); a branch that is not the run's own is refused.
func (r *Repo) DeleteBranchesOf(runID string, branches map[string]string) (deleted, left []string, err error) {
	if err := checkRunID(runID); err != nil {
		return nil, nil, err
	}
	for b, sha := range branches {
		if id, ok := runOfBranch(b); !ok || id != runID || !isHash(sha) {
			return nil, nil, fmt.Errorf("branch %s is not one of run %s's", b, runID)
		}
	}
	if len(branches) == 0 {
		return nil, nil, nil
	}
	wts, err := r.listWorktrees()
	if err != nil {
		return nil, nil, err
	}
	out := map[string]bool{}
	for _, w := range wts {
		out[w.Branch] = true
	}
	var in strings.Builder
	for b, sha := range branches {
		if out[b] {
			left = append(left, b)
			continue
		}
		fmt.Fprintf(&in, "delete refs/heads/%s %s\n", b, sha)
		deleted = append(deleted, b)
	}
	if len(deleted) == 0 {
		return nil, left, nil
	}
	// One transaction: all of them go, or none.
	if _, err := r.git.run(gitCmd{dir: r.workDir(), stdin: strings.NewReader(in.String()), args: []string{"update-ref", "--no-deref", "--stdin"}}); err != nil {
		return nil, append(left, deleted...), fmt.Errorf("delete the branches of run %s in %s: %v", runID, r, err)
	}
	return deleted, left, nil
}
