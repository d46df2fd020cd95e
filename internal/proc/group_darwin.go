package proc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartID names the process pid as it runs now ("BOOT:SEC.USEC": the boot
// time and the process's start time), so that a later kusaw can tell it
// from another process that got the same pid.
func StartID(pid int) (string, error) {
	kp, err := kinfo(pid)
	if err != nil {
		return "", err
	}
	boot, err := bootTime()
	if err != nil {
		return "", err
	}
	return boot + ":" + startOf(kp), nil
}

// EndGroup kills (SIGKILL) what is left of the process group an
// interrupted attempt's process led, chosen by group and start time only
// (see the Linux version).
func EndGroup(pgid int, start string) (int, error) {
	if pgid <= 1 || start == "" {
		return 0, nil
	}
	boot, leader, ok := strings.Cut(start, ":")
	if !ok {
		return 0, fmt.Errorf("process start %q is not BOOT:START", start)
	}
	cur, err := bootTime()
	if err != nil {
		return 0, err
	}
	if boot != cur {
		return 0, nil
	}
	if kp, err := kinfo(pgid); err == nil && startOf(kp) != leader {
		return 0, nil
	}
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.pgrp", pgid)
	if err != nil {
		return 0, err
	}
	n := 0
	for i := range procs {
		kp := &procs[i]
		if int(kp.Eproc.Pgid) != pgid || !notEarlier(startOf(kp), leader) {
			continue
		}
		if syscall.Kill(int(kp.Proc.P_pid), syscall.SIGKILL) == nil {
			n++
		}
	}
	return n, nil
}

func startOf(kp *unix.KinfoProc) string {
	t := kp.Proc.P_starttime
	return fmt.Sprintf("%d.%06d", t.Sec, t.Usec)
}

func notEarlier(a, b string) bool {
	fa, err1 := strconv.ParseFloat(a, 64)
	fb, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && fa >= fb
}

func bootTime() (string, error) {
	tv, err := unix.SysctlTimeval("kern.boottime")
	if err != nil {
		return "", errors.New("cannot read the boot time")
	}
	return strconv.FormatInt(int64(tv.Sec), 10), nil
}

func kinfo(pid int) (*unix.KinfoProc, error) {
	ps, err := unix.SysctlKinfoProcSlice("kern.proc.pid", pid)
	if err != nil {
		return nil, err
	}
	if len(ps) != 1 || int(ps[0].Proc.P_pid) != pid {
		return nil, fmt.Errorf("no process %d", pid)
	}
	return &ps[0], nil
}
