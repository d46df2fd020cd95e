//go:build !linux

package proc

import "os/exec"

// group: cgroups are Linux's; elsewhere only kusaw's own counting applies.
type group struct{}

func newGroup(_ string, l Limits, _ bool) (*group, []string) { return nil, wanted(l) }
func (g *group) add(int) error                               { return nil }
func (g *group) hit() string                                 { return "" }
func (g *group) close()                                      {}

func rlimitsFor(int, Limits, []string) {}

// Enforcement says how this machine enforces each limit.
func Enforcement() map[string]string {
	return map[string]string{
		LimitOutput: "counted by kusaw: the process group is killed past it",
		LimitDisk:   "counted by kusaw every 2s over the attempt's tmp and worktrees",
		LimitPids:   "not enforced on this system",
		LimitMemory: "not enforced on this system",
		LimitCPU:    "not enforced on this system",
	}
}

// totalMemory: unknown here; memory is not bounded.
func totalMemory() int64 { return 0 }

// hold: nothing to place the process into before it runs.
func hold(*exec.Cmd) (func(), error) { return func() {}, nil }

// ReapStaleGroups: no cgroups here.
func ReapStaleGroups() int { return 0 }
