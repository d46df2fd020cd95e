// Package factory ties kusaw together: runs, pipelines, attempts, the queue,
// events and records, and the engine that serve drives. It is the only
// package that imports sandbox, egress, worktree and providers together.
package factory
