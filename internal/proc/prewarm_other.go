//go:build !linux

package proc

// Prewarm: no cgroups to place processes into here.
func Prewarm(Limits) (stop func()) { return func() {} }
