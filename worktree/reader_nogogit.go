//go:build kusaw_nogogit

package worktree

// Built without go-git (the kusaw CLI, whose every start would pay for
// its package initialisers, ~1 ms: docs/benchmarks.md, "Lean start,
// seventh pass (issue 25)"): the git binary answers every read but a
// branch's ref, which binReader reads from git's files when it can
// (fileRef).
func goGitReaderFor(path string) (reader, error) { return nil, nil }
