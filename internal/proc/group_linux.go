package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// A process's identity that a reused pid does not share: the boot it ran
// in and its start time in clock ticks since that boot.

// StartID names the process pid as it runs now ("BOOTID:TICKS"), so that
// a later kusaw can tell it from another process that got the same pid.
// It works on a zombie too (until it is reaped).
func StartID(pid int) (string, error) {
	st, err := readStat(pid)
	if err != nil {
		return "", err
	}
	boot, err := bootID()
	if err != nil {
		return "", err
	}
	return boot + ":" + strconv.FormatUint(st.start, 10), nil
}

// EndGroup kills (SIGKILL) what is left of the process group an
// interrupted attempt's process led: pgid is the leader's pid, start its
// StartID when it ran. Processes are chosen by group and start time only,
// never by name: a member must be in the group and have started no earlier
// than the leader; a live process with the group's number that is not the
// recorded leader means the number was reused, and nothing is killed.
// After a reboot nothing of the group can be left. It returns how many
// processes it signalled.
func EndGroup(pgid int, start string) (int, error) {
	if pgid <= 1 || start == "" {
		return 0, nil
	}
	boot, ticks, ok := strings.Cut(start, ":")
	leaderStart, err := strconv.ParseUint(ticks, 10, 64)
	if !ok || err != nil {
		return 0, fmt.Errorf("process start %q is not BOOTID:TICKS", start)
	}
	cur, err := bootID()
	if err != nil {
		return 0, err
	}
	if boot != cur {
		return 0, nil
	}
	if st, err := readStat(pgid); err == nil && st.start != leaderStart {
		return 0, nil // the number belongs to another process now
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	self := os.Getpid()
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.pgrp != pgid || st.start < leaderStart || st.state == 'Z' {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n, nil
}

type procStat struct {
	state byte
	pgrp  int
	start uint64
}

// readStat reads the fields kusaw needs from /proc/PID/stat. The command
// name (field 2) may hold spaces and parentheses, so fields are counted
// from its closing parenthesis.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); pgrp is field 5, starttime field 22.
	if len(f) < 20 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	pgrp, err1 := strconv.Atoi(f[2])
	start, err2 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return procStat{state: f[0][0], pgrp: pgrp, start: start}, nil
}

func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
