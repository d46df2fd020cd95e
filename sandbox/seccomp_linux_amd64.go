package sandbox

import "golang.org/x/sys/unix"

const auditArch = unix.AUDIT_ARCH_X86_64

// x32 calls carry bit 30 in their number under the x86_64 architecture
// value: killed like a foreign architecture. All but -1, no x32 call: a
// tracer skips a call by setting its number to -1 (strace's fault
// injection), the kernel filters after it, and the kernel's own answer to
// -1 is ENOSYS (libseccomp lets it through the same way).
var archKilled = [][2]uint32{{0x40000000, 0xfffffffe}}

// The x86_64 calls arm64 only has in their *at form.
var archAllowed = []uintptr{
	unix.SYS_OPEN, unix.SYS_CREAT, unix.SYS_STAT, unix.SYS_LSTAT, unix.SYS_ACCESS, unix.SYS_READLINK,
	unix.SYS_MKDIR, unix.SYS_RMDIR, unix.SYS_LINK, unix.SYS_UNLINK, unix.SYS_SYMLINK, unix.SYS_RENAME,
	unix.SYS_CHMOD, unix.SYS_CHOWN, unix.SYS_LCHOWN, unix.SYS_MKNOD, unix.SYS_GETDENTS, unix.SYS_UTIME,
	unix.SYS_UTIMES, unix.SYS_FUTIMESAT, unix.SYS_DUP2, unix.SYS_PIPE, unix.SYS_POLL, unix.SYS_SELECT,
	unix.SYS_EPOLL_CREATE, unix.SYS_EPOLL_WAIT, unix.SYS_EVENTFD, unix.SYS_SIGNALFD, unix.SYS_INOTIFY_INIT,
	unix.SYS_FORK, unix.SYS_VFORK, unix.SYS_PAUSE, unix.SYS_ALARM, unix.SYS_TIME, unix.SYS_GETPGRP,
	unix.SYS_ARCH_PRCTL, unix.SYS_SET_THREAD_AREA, unix.SYS_GET_THREAD_AREA,
}

// Port access and the local descriptor table (modify_ldt's long history).
var archRefused = []uintptr{unix.SYS_IOPL, unix.SYS_IOPERM, unix.SYS_MODIFY_LDT, unix.SYS_USELIB, unix.SYS__SYSCTL}
