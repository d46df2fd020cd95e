// Package factory is the engine of one machine: runs, pipelines,
// scheduling, state, recovery, gates, notifications and delivery, driven
// by kusaw run and by serve. Each attempt it resolves into a spec and
// hands to an Executor: package attempt runs it here, the cluster's
// dispatch (Options.Remote) on a worker.
//
// The engine:
//
//	e, err := factory.New(f, factory.Options{OnEvent: show, Proxy: shared})
//	defer e.Close()                  // stops the proxy it started itself
//	run, err := e.Run(ctx, "default") // or e.Prepare(p) then e.Execute(ctx, run)
//	run.Record                        // run.json; record.RunExitCode(run.Record, State.AllAttempts) is kusaw run's status
//
// New opens the state directory, which marks runs whose owner died as
// interrupted and removes their worktrees (OpenState does the same for
// commands that only read). Canceling ctx cancels the run; so does a cancel
// file (State.RequestCancel, kusaw cancel). Each attempt runs in fresh
// worktrees on branch kusaw/attempts/<run>/<step>/<n> from the run branch
// kusaw/<run>, under the sandbox when its mode is required, behind an
// egress lease when its network is allowlist; its record is attempt.json,
// its events a chained, sealed events.jsonl (chainlog), and secrets are
// redacted from every file the run writes.
package factory
