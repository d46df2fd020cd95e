package deliver

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// git runs the git binary in dir. kusaw's own commits run no hooks and no
// fsmonitor; a credential prompt never waits for a terminal.
func git(ctx context.Context, dir string, extra []string, args ...string) (string, error) {
	full := append([]string{"-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false"}, extra...)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "LC_ALL=C")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return strings.TrimSpace(out.String()), fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, firstLines(msg, 4))
	}
	return strings.TrimSpace(out.String()), nil
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " / ")
}

// filterGuard returns -c options that switch off every clean and smudge
// filter driver the repository's git configuration (system, global,
// local) defines. Which files a driver applies to is decided by the
// .gitattributes of the tree being checked out, and the run branch's tree
// was written by a sandboxed step: with git-lfs installed globally, a
// step's `* filter=lfs` and its own .lfsconfig would make kusaw's checkout
// on the host fetch from a URL the step chose, past the egress proxy. A
// file under such a driver lands as the blob holds it (for LFS, the
// pointer; `git lfs checkout` fetches the content afterwards). A driver
// name -c cannot express (one with '=') fails the delivery instead.
func filterGuard(ctx context.Context, dir string) ([]string, error) {
	out, err := git(ctx, dir, nil, "config", "--name-only", "--get-regexp", `^filter\.`)
	if err != nil && out != "" {
		return nil, err
	}
	seen := map[string]bool{}
	guard := []string{"-c", "filter.lfs.process=", "-c", "filter.lfs.smudge=", "-c", "filter.lfs.clean=", "-c", "filter.lfs.required=false"}
	seen["lfs"] = true
	for _, key := range strings.Split(out, "\n") {
		key = strings.TrimSpace(key)
		i := strings.LastIndexByte(key, '.')
		if !strings.HasPrefix(key, "filter.") || i <= len("filter.") {
			continue
		}
		name := key[len("filter."):i]
		if seen[name] {
			continue
		}
		seen[name] = true
		if strings.ContainsAny(name, "=\n") {
			return nil, fmt.Errorf("git filter driver %q cannot be switched off for the delivery; rename it in your git config", name)
		}
		for _, k := range []string{"process=", "smudge=", "clean=", "required=false"} {
			guard = append(guard, "-c", "filter."+name+"."+k)
		}
	}
	return guard, nil
}

// runTrailer marks kusaw's merge and squash commits so that delivering the
// same run again finds them (a squash leaves no ancestry to find).
func runTrailer(run string) string { return "Kusaw-Run: " + run }

// merge brings the run branch into Merge.Into and returns the commit the
// target now points at; already is true when it held the run's work before.
func merge(ctx context.Context, p Plan) (sha string, already bool, err error) {
	m := p.Merge
	run, err := git(ctx, p.RepoPath, nil, "rev-parse", "--verify", "refs/heads/"+p.RunBranch+"^{commit}")
	if err != nil {
		return "", false, fmt.Errorf("the run branch %s is missing: %v", p.RunBranch, err)
	}
	into, err := git(ctx, p.RepoPath, nil, "rev-parse", "--verify", "refs/heads/"+m.Into+"^{commit}")
	if err != nil {
		return "", false, fmt.Errorf("the branch %s to merge into does not exist in %s", m.Into, p.RepoPath)
	}
	if _, err := git(ctx, p.RepoPath, nil, "merge-base", "--is-ancestor", run, into); err == nil {
		return into, true, nil
	}
	if found, _ := git(ctx, p.RepoPath, nil, "log", "-1", "--format=%H", "--fixed-strings", "--grep", runTrailer(p.RunID), into); found != "" {
		return into, true, nil
	}
	msg := m.Message
	if msg == "" {
		msg = "kusaw: merge run " + p.RunID
	}
	msg += "\n\n" + runTrailer(p.RunID) + "\n"

	wt, err := checkedOutIn(ctx, p.RepoPath, m.Into)
	if err != nil {
		return "", false, err
	}
	guard, err := filterGuard(ctx, p.RepoPath)
	if err != nil {
		return "", false, err
	}
	id := slices.Concat(guard, p.Identity)
	if wt != "" {
		// The target is someone's checkout: merge there, only when clean,
		// so its files follow the branch.
		if dirty, _ := git(ctx, wt, nil, "status", "--porcelain", "--untracked-files=no"); dirty != "" {
			return "", false, fmt.Errorf("%s has %s checked out with uncommitted changes; commit or stash them, then run kusaw deliver %s", wt, m.Into, p.RunID)
		}
		if err := mergeIn(ctx, wt, id, how(m), run, msg); err != nil {
			return "", false, err
		}
		sha, err := git(ctx, wt, nil, "rev-parse", "HEAD")
		return sha, false, err
	}
	if how(m) == HowFFOnly {
		if _, err := git(ctx, p.RepoPath, nil, "merge-base", "--is-ancestor", into, run); err != nil {
			return "", false, fmt.Errorf("%s has commits the run branch lacks, so it cannot fast-forward; deliver with merge.how: merge or squash, or rebase by hand", m.Into)
		}
		if _, err := git(ctx, p.RepoPath, nil, "update-ref", "-m", "kusaw deliver "+p.RunID, "refs/heads/"+m.Into, run, into); err != nil {
			return "", false, err
		}
		return run, false, nil
	}
	// Not checked out anywhere: merge in a temporary worktree of our own.
	tmp, err := os.MkdirTemp("", "kusaw-deliver-")
	if err != nil {
		return "", false, err
	}
	os.Remove(tmp) // git worktree add wants to create it
	defer func() {
		git(context.Background(), p.RepoPath, nil, "worktree", "remove", "--force", tmp)
		os.RemoveAll(tmp)
	}()
	if _, err := git(ctx, p.RepoPath, guard, "worktree", "add", "--detach", "--quiet", tmp, into); err != nil {
		return "", false, err
	}
	if err := mergeIn(ctx, tmp, id, how(m), run, msg); err != nil {
		return "", false, err
	}
	sha, err = git(ctx, tmp, nil, "rev-parse", "HEAD")
	if err != nil {
		return "", false, err
	}
	if _, err := git(ctx, p.RepoPath, nil, "update-ref", "-m", "kusaw deliver "+p.RunID, "refs/heads/"+m.Into, sha, into); err != nil {
		return "", false, err
	}
	return sha, false, nil
}

// mergeIn merges commit into the checkout at dir; a conflict is undone and
// reported with the files it touched.
func mergeIn(ctx context.Context, dir string, id []string, how, commit, msg string) error {
	var args []string
	switch how {
	case HowFFOnly:
		args = []string{"merge", "--ff-only", commit}
	case HowMerge:
		args = []string{"merge", "--no-ff", "-m", msg, commit}
	case HowSquash:
		args = []string{"merge", "--squash", commit}
	}
	if _, err := git(ctx, dir, id, args...); err != nil {
		files, _ := git(ctx, dir, id, "diff", "--name-only", "--diff-filter=U")
		git(context.Background(), dir, id, "reset", "--merge")
		if files != "" {
			return fmt.Errorf("%w: conflicts in %s", ErrConflict, strings.Join(strings.Fields(files), ", "))
		}
		return err
	}
	if how == HowSquash {
		if _, err := git(ctx, dir, id, "commit", "--quiet", "-m", msg); err != nil {
			return err
		}
	}
	return nil
}

// checkedOutIn returns the worktree (the main checkout or a linked one)
// that has branch checked out, or "".
func checkedOutIn(ctx context.Context, repo, branch string) (string, error) {
	out, err := git(ctx, repo, nil, "worktree", "list", "--porcelain")
	if err != nil {
		return "", err
	}
	var path string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "worktree "):
			path = strings.TrimPrefix(line, "worktree ")
		case line == "branch refs/heads/"+branch:
			return path, nil
		}
	}
	return "", nil
}

// push sends the run branch to the remote under Push.Branch. Pushing the
// same commit again changes nothing; a remote branch that moved elsewhere
// is not overwritten.
func push(ctx context.Context, p Plan) error {
	if _, err := git(ctx, p.RepoPath, nil, "rev-parse", "--verify", "refs/heads/"+p.RunBranch+"^{commit}"); err != nil {
		return fmt.Errorf("the run branch %s is missing", p.RunBranch)
	}
	_, err := git(ctx, p.RepoPath, nil, "push", "--quiet", "--porcelain", p.Push.Remote, "refs/heads/"+p.RunBranch+":refs/heads/"+p.Push.Branch)
	return err
}
