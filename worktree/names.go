package worktree

import (
	"fmt"
	"strconv"
	"strings"
)

// Branch names. Git stores refs as paths, so a branch kusaw/<run-id> and a
// branch kusaw/<run-id>/<step>/<n> cannot both exist (the first would have to
// be a file and a directory at once). Attempt branches therefore live under
// their own prefix, and "attempts" is not a valid run id.
const (
	branchPrefix  = "kusaw/"
	attemptPrefix = "kusaw/attempts/"
)

// RunBranch is the branch of a run in each of its repos: kusaw/<run-id>.
func RunBranch(runID string) string { return branchPrefix + runID }

// AttemptBranch is the branch of one attempt of one step:
// kusaw/attempts/<run-id>/<step>/<n>.
func AttemptBranch(runID, step string, n int) string {
	return attemptPrefix + runID + "/" + step + "/" + strconv.Itoa(n)
}

// IsAttemptBranchOf reports whether branch is an attempt branch of run runID.
func IsAttemptBranchOf(branch, runID string) bool {
	return strings.HasPrefix(branch, attemptPrefix+runID+"/")
}

// IsKusawBranch reports whether a branch name (without refs/heads/) is one
// kusaw creates; kusaw never moves or deletes any other branch.
func IsKusawBranch(branch string) bool { return strings.HasPrefix(branch, branchPrefix) }

// checkComponent applies git's ref-name rules (git check-ref-format) to one
// path component, so a bad run id or step id is refused with a clear message
// before git sees it.
func checkComponent(kind, s string) error {
	bad := func(why string) error {
		return fmt.Errorf("invalid %s %q: %s", kind, s, why)
	}
	switch {
	case s == "":
		return bad("it is empty")
	case strings.HasPrefix(s, "."), strings.HasPrefix(s, "-"):
		return bad("it must not start with '.' or '-'")
	case strings.HasSuffix(s, "."), strings.HasSuffix(s, ".lock"):
		return bad("it must not end with '.' or '.lock'")
	case strings.Contains(s, ".."), strings.Contains(s, "@{"):
		return bad("it must not contain '..' or '@{'")
	case s == "@":
		return bad("'@' alone is not a valid name")
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\/", r) {
			return bad(fmt.Sprintf("character %q is not allowed in a git branch name", r))
		}
	}
	return nil
}

func checkRunID(runID string) error {
	if err := checkComponent("run id", runID); err != nil {
		return err
	}
	if runID == "attempts" {
		return fmt.Errorf("invalid run id %q: the name is reserved for attempt branches", runID)
	}
	return nil
}

// checkBranch validates a full kusaw branch name, component by component.
func checkBranch(branch string) error {
	if !IsKusawBranch(branch) {
		return fmt.Errorf("branch %q is not a kusaw branch (kusaw only creates and moves branches under %s)", branch, branchPrefix)
	}
	for _, c := range strings.Split(strings.TrimPrefix(branch, branchPrefix), "/") {
		if err := checkComponent("branch name component", c); err != nil {
			return fmt.Errorf("branch %q: %w", branch, err)
		}
	}
	return nil
}
