//go:build !linux

package sandbox

// No pool outside Linux: the Seatbelt backend makes no stand-ins.

type standInPool struct{}

func openStandInPool(int) *standInPool { return nil }

func (*standInPool) giveBack(string) bool { return false }

func (p *Plan) takeStandIns() {}
