// Package attempt is kusaw's executor: it runs one attempt from its spec
// (record.AttemptSpec) on this machine and returns its finished record
// (docs/architecture.md, "The life of an attempt"). serve's engine and a
// cluster worker both run attempts through it; it never imports factory,
// serve or cluster.
//
//	rec := attempt.Run(ctx, host, spec, job)
//
// Host is the machine (repositories, state folder, signing key, secret
// source, proxy, event callback); Job is the attempt's place in its run
// (folder, run branches, the pipeline's shape, the caller's options).
// Open, Execute and Finish are the same run in parts, for an executor
// that runs the middle elsewhere (the cluster's dispatch records what a
// worker did through them).
package attempt
