// Package sandbox computes an attempt's sandbox plan (pure data) and runs a
// process under an OS backend: bubblewrap on Linux, Seatbelt on macOS.
//
// Use:
//
//	res := sandbox.Check()            // once per process: backend, version, typed reason and fix
//	if !res.Available { return res.Err() }
//	plan, err := sandbox.BuildPlan(in) // in: worktrees, attempt folders, home, login paths, env, network, proxy
//	// err is a *status.Error with ReasonSandboxPlanRefused and a fix
//	cmd, err := sandbox.Command(ctx, plan, argv) // set Stdout/Stderr, Start, Wait
//	...
//	sandbox.Signal(cmd, syscall.SIGTERM)          // reaches the step (bwrap forwards no signal)
//	plan.Cleanup()                                // after Wait, before committing the worktrees
//
// A plan is mounts, each with its origin and reason. On Linux the view is
// an allowlist (view.go): an empty root with the system folders, the
// toolchains of the step's PATH, the files its command names, the writable
// worktrees and the git folders a commit needs (worktree.go; with
// Input.ObjectDir, new objects go to the attempt's private object folder
// and the repositories' own objects/ stay read-only), the attempt's
// folders, the agent's login state as the attempt's own copy (login.go),
// allow_read and allow_write; the credential folders and hidden paths on
// top; the protected control files and agent settings, read-only even
// inside the worktrees. Mounts are ordered folders first, writable before
// read-only at one path (ordered), so none covers one made before it; the
// root is made read-only last. The environment is built
// from a fixed base set, the step's env, the temp variables and the proxy
// variables; Plan.String and Plan.JSON never show values.
//
// Probes runs doctor's probes P1–P4 against a plan.
package sandbox
