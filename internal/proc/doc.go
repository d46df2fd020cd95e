// Package proc supervises the processes kusaw starts: each runs as the
// leader of its own process group, its output is copied through the
// caller's filter, and when it must stop the group gets SIGTERM, then
// SIGKILL after a grace period. Whatever is left of the group when the
// leader exits is killed, so nothing outlives its step.
//
// It imports nothing of kusaw: callers pass plain options and get a plain
// result.
package proc
