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
