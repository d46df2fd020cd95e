//go:build !linux

package proc

// group: cgroups are Linux's; elsewhere only kusaw's own counting applies.
type group struct{}

func newGroup(_ string, l Limits) (*group, []string) { return nil, wanted(l) }
func (g *group) add(int) error                       { return nil }
func (g *group) hit() string                         { return "" }
func (g *group) close()                              {}

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
