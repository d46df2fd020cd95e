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
// A plan is ordered mounts, each with its reason (later ones cover earlier
// ones): the system read-only; private /dev, /proc, /tmp, /run; the home and
// the repositories' own checkouts hidden; allow_read; the writable
// worktrees and the git folders a commit needs (with Input.ObjectDir, new
// objects go to the attempt's private object folder and the repositories'
// own objects/ stay read-only); the credential folders and
// caller's hidden paths on top; then the protected control files and agent
// settings, read-only even inside the worktrees. The environment is built
// from a fixed base set, the step's env, the temp variables and the proxy
// variables; Plan.String and Plan.JSON never show values.
//
// Probes runs doctor's probes P1–P4 against a plan.
package sandbox
