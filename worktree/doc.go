// Package worktree manages run branches and per-attempt git worktrees with
// the git binary, and reads refs, commits and diffs with go-git (built with
// the tag kusaw_nogogit, as the kusaw CLI is, with the git binary and
// branch refs from git's files).
//
// Branches: a run has kusaw/<run-id> in each repo; an attempt has
// kusaw/attempts/<run-id>/<step>/<n> (RunBranch, AttemptBranch). Git stores
// refs as paths, so kusaw/<run-id>/<step>/<n> cannot exist next to
// kusaw/<run-id>; hence the separate prefix.
//
// kusaw's git runs outside every sandbox with an explicit environment (no
// inherited GIT_* variables, GIT_TERMINAL_PROMPT=0) and never runs the
// repository's hooks or fsmonitor command (core.hooksPath=/dev/null,
// core.fsmonitor=false). When the repository has no user.name or
// user.email, kusaw's commits use "kusaw <kusaw@localhost>".
//
// A sandboxed step writes its git objects to a private folder (the
// repository's objects/ are read-only to it); ImportObjects brings what the
// attempt branch needs into the repository, re-hashed by index-pack
// --strict, before CommitAll.
//
// worktree add, remove and prune are serialised per repository (git picks
// colliding administrative names otherwise), within the process and across
// kusaw processes through the lock file .git/kusaw-worktree.lock.
package worktree
