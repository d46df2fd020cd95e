package proc

import (
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"
)

// Limits bound one process and everything it starts. A zero field is no
// limit. Where the machine lets kusaw use cgroups (root, or a delegated
// group) pids, memory and cpu are a child group of kusaw's own; otherwise
// rlimits stand in where one exists (Enforcement says which). Output and
// disk are counted by kusaw itself.
type Limits struct {
	Pids   int   // processes and threads at once
	Memory int64 // bytes of memory
	CPU    int   // cores
	Output int64 // bytes of stdout and stderr together
	Disk   int64 // bytes under DiskPaths
	// DiskPaths are the folders Disk counts (the attempt's tmp and
	// worktrees).
	DiskPaths []string
}

// Limit names, as Result.Limit and Enforcement report them.
const (
	LimitPids   = "pids"
	LimitMemory = "memory"
	LimitCPU    = "cpu"
	LimitOutput = "output"
	LimitDisk   = "disk"
)

// Value is the configured value of limit name, for messages.
func (l Limits) Value(name string) string {
	switch name {
	case LimitPids:
		return fmt.Sprint(l.Pids)
	case LimitMemory:
		return bytesText(l.Memory)
	case LimitCPU:
		return fmt.Sprintf("%d core(s)", l.CPU)
	case LimitOutput:
		return bytesText(l.Output)
	case LimitDisk:
		return bytesText(l.Disk)
	}
	return ""
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// outputCap counts the bytes of both output streams; past the limit it
// calls over once and swallows the rest.
type outputCap struct {
	max  int64
	n    atomic.Int64
	once sync.Once
	over func()
}

func (c *outputCap) wrap(w io.Writer) io.Writer {
	if c == nil || c.max <= 0 {
		return w
	}
	return capWriter{c, w}
}

type capWriter struct {
	c *outputCap
	w io.Writer
}

func (cw capWriter) Write(p []byte) (int, error) {
	n := cw.c.n.Add(int64(len(p)))
	if n > cw.c.max {
		keep := int64(len(p)) - (n - cw.c.max)
		if keep > 0 {
			_, _ = cw.w.Write(p[:keep])
		}
		cw.c.once.Do(cw.c.over)
		return len(p), nil
	}
	return cw.w.Write(p)
}

// wanted lists the cgroup controllers the limits need.
func wanted(l Limits) []string {
	var c []string
	if l.Pids > 0 {
		c = append(c, "pids")
	}
	if l.Memory > 0 {
		c = append(c, "memory")
	}
	if l.CPU > 0 {
		c = append(c, "cpu")
	}
	return c
}

// diskEvery is how often the disk limit is counted.
const diskEvery = 2 * time.Second

// diskUsage sums the sizes of the regular files under dirs, never
// following a link.
func diskUsage(dirs []string) int64 {
	var n int64
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(_ string, e fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if e.Type().IsRegular() {
				if fi, err := e.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
	}
	return n
}

// watchDisk calls over once when the folders outgrow max, until stop.
func watchDisk(l Limits, stop <-chan struct{}, over func()) {
	if l.Disk <= 0 || len(l.DiskPaths) == 0 {
		return
	}
	t := time.NewTicker(diskEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if diskUsage(l.DiskPaths) > l.Disk {
				over()
				return
			}
		}
	}
}

// Defaults a laptop survives, for the fields the factory leaves zero:
// 4096 processes, half the machine's memory, all cores, 20 GiB of disk,
// 1 GiB of output.
func Defaults(l Limits) Limits {
	if l.Pids == 0 {
		l.Pids = 4096
	}
	if l.Memory == 0 {
		l.Memory = totalMemory() / 2
	}
	if l.Disk == 0 {
		l.Disk = 20 << 30
	}
	if l.Output == 0 {
		l.Output = 1 << 30
	}
	return l
}
