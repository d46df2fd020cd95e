//go:build linux && (amd64 || arm64)

package sandbox

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The seccomp filter every Linux attempt runs under (bwrap --seccomp FD).
// It is an allowlist: the system calls below are what programs a step runs
// (shells, git, Go, Node, Python, make, compilers, debuggers of their own
// children) use, with Docker's default profile (moby/profiles) as the
// reference. What is not named fails with ENOSYS, which programs take for
// an older kernel and fall back from; what is named as refused fails with
// EPERM. A foreign architecture (32-bit x86 or arm, x32) kills the process:
// its system call numbers mean other calls.

const (
	retAllow  = unix.SECCOMP_RET_ALLOW
	retKill   = unix.SECCOMP_RET_KILL_PROCESS
	retErrno  = unix.SECCOMP_RET_ERRNO
	retEPERM  = retErrno | uint32(unix.EPERM)
	retENOSYS = retErrno | uint32(unix.ENOSYS)
	// A socket family the step has no use for: EAFNOSUPPORT, what a kernel
	// without it answers, so a program probing for it carries on.
	retNoFamily = retErrno | uint32(unix.EAFNOSUPPORT)
)

// seccompData offsets (struct seccomp_data): nr, arch, ip, args[6]. The
// low 32 bits of an argument come first on these little-endian machines.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

func argLow(i int) uint32  { return uint32(offArgs + 8*i) }
func argHigh(i int) uint32 { return uint32(offArgs + 8*i + 4) }

// allowed are the system calls allowed whatever their arguments, on every
// supported architecture; archAllowed (per architecture) adds the legacy
// calls only some have.
var allowed = []uintptr{
	// files and folders
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_READV, unix.SYS_WRITEV, unix.SYS_PREAD64, unix.SYS_PWRITE64,
	unix.SYS_PREADV, unix.SYS_PWRITEV, unix.SYS_PREADV2, unix.SYS_PWRITEV2, unix.SYS_OPENAT, unix.SYS_OPENAT2,
	unix.SYS_CLOSE, unix.SYS_CLOSE_RANGE, unix.SYS_LSEEK, unix.SYS_FSTAT, unix.SYS_NEWFSTATAT, unix.SYS_STATX,
	unix.SYS_STATFS, unix.SYS_FSTATFS, unix.SYS_FACCESSAT, unix.SYS_FACCESSAT2, unix.SYS_GETDENTS64,
	unix.SYS_GETCWD, unix.SYS_CHDIR, unix.SYS_FCHDIR, unix.SYS_MKDIRAT, unix.SYS_MKNODAT, unix.SYS_UNLINKAT,
	unix.SYS_RENAMEAT, unix.SYS_RENAMEAT2, unix.SYS_LINKAT, unix.SYS_SYMLINKAT, unix.SYS_READLINKAT,
	unix.SYS_FCHMOD, unix.SYS_FCHMODAT, unix.SYS_FCHMODAT2, unix.SYS_FCHOWN, unix.SYS_FCHOWNAT, unix.SYS_UMASK,
	unix.SYS_TRUNCATE, unix.SYS_FTRUNCATE, unix.SYS_FALLOCATE, unix.SYS_FADVISE64, unix.SYS_READAHEAD,
	unix.SYS_FSYNC, unix.SYS_FDATASYNC, unix.SYS_SYNC, unix.SYS_SYNCFS, unix.SYS_SYNC_FILE_RANGE,
	unix.SYS_UTIMENSAT, unix.SYS_FLOCK, unix.SYS_FCNTL, unix.SYS_IOCTL, unix.SYS_DUP, unix.SYS_DUP3,
	unix.SYS_PIPE2, unix.SYS_SENDFILE, unix.SYS_SPLICE, unix.SYS_TEE, unix.SYS_VMSPLICE, unix.SYS_COPY_FILE_RANGE,
	unix.SYS_GETXATTR, unix.SYS_LGETXATTR, unix.SYS_FGETXATTR, unix.SYS_SETXATTR, unix.SYS_LSETXATTR,
	unix.SYS_FSETXATTR, unix.SYS_LISTXATTR, unix.SYS_LLISTXATTR, unix.SYS_FLISTXATTR, unix.SYS_REMOVEXATTR,
	unix.SYS_LREMOVEXATTR, unix.SYS_FREMOVEXATTR, unix.SYS_GETXATTRAT, unix.SYS_SETXATTRAT,
	unix.SYS_LISTXATTRAT, unix.SYS_REMOVEXATTRAT, unix.SYS_NAME_TO_HANDLE_AT, unix.SYS_CACHESTAT,
	unix.SYS_INOTIFY_INIT1, unix.SYS_INOTIFY_ADD_WATCH, unix.SYS_INOTIFY_RM_WATCH, unix.SYS_MEMFD_CREATE,
	// polling, events, timers
	unix.SYS_EPOLL_CREATE1, unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_PWAIT2,
	unix.SYS_PPOLL, unix.SYS_PSELECT6, unix.SYS_EVENTFD2, unix.SYS_SIGNALFD4, unix.SYS_TIMERFD_CREATE,
	unix.SYS_TIMERFD_SETTIME, unix.SYS_TIMERFD_GETTIME, unix.SYS_TIMER_CREATE, unix.SYS_TIMER_SETTIME,
	unix.SYS_TIMER_GETTIME, unix.SYS_TIMER_GETOVERRUN, unix.SYS_TIMER_DELETE, unix.SYS_GETITIMER,
	unix.SYS_SETITIMER, unix.SYS_NANOSLEEP, unix.SYS_CLOCK_NANOSLEEP, unix.SYS_CLOCK_GETTIME,
	unix.SYS_CLOCK_GETRES, unix.SYS_GETTIMEOFDAY, unix.SYS_ADJTIMEX, unix.SYS_CLOCK_ADJTIME, unix.SYS_TIMES,
	// asynchronous I/O (the old kind: a handful of calls, no shared rings)
	unix.SYS_IO_SETUP, unix.SYS_IO_DESTROY, unix.SYS_IO_SUBMIT, unix.SYS_IO_CANCEL, unix.SYS_IO_GETEVENTS,
	unix.SYS_IO_PGETEVENTS,
	// memory
	unix.SYS_BRK, unix.SYS_MMAP, unix.SYS_MUNMAP, unix.SYS_MPROTECT, unix.SYS_MREMAP, unix.SYS_MSYNC,
	unix.SYS_MADVISE, unix.SYS_MINCORE, unix.SYS_MLOCK, unix.SYS_MLOCK2, unix.SYS_MUNLOCK, unix.SYS_MLOCKALL,
	unix.SYS_MUNLOCKALL, unix.SYS_REMAP_FILE_PAGES, unix.SYS_MEMBARRIER, unix.SYS_MSEAL,
	unix.SYS_PKEY_ALLOC, unix.SYS_PKEY_FREE, unix.SYS_PKEY_MPROTECT, unix.SYS_MAP_SHADOW_STACK,
	unix.SYS_GET_MEMPOLICY, unix.SYS_SET_MEMPOLICY, unix.SYS_MBIND, unix.SYS_MEMFD_SECRET,
	// processes, threads, signals (inside the sandbox's own PID namespace)
	unix.SYS_EXECVE, unix.SYS_EXECVEAT, unix.SYS_EXIT, unix.SYS_EXIT_GROUP, unix.SYS_WAIT4, unix.SYS_WAITID,
	unix.SYS_KILL, unix.SYS_TKILL, unix.SYS_TGKILL, unix.SYS_PIDFD_OPEN, unix.SYS_PIDFD_SEND_SIGNAL,
	unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN, unix.SYS_RT_SIGPENDING,
	unix.SYS_RT_SIGSUSPEND, unix.SYS_RT_SIGTIMEDWAIT, unix.SYS_RT_SIGQUEUEINFO, unix.SYS_RT_TGSIGQUEUEINFO,
	unix.SYS_SIGALTSTACK, unix.SYS_RESTART_SYSCALL, unix.SYS_FUTEX, unix.SYS_FUTEX_WAITV, unix.SYS_FUTEX_WAKE,
	unix.SYS_FUTEX_WAIT, unix.SYS_FUTEX_REQUEUE, unix.SYS_SET_ROBUST_LIST, unix.SYS_GET_ROBUST_LIST,
	unix.SYS_SET_TID_ADDRESS, unix.SYS_RSEQ, unix.SYS_GETPID, unix.SYS_GETPPID, unix.SYS_GETTID,
	unix.SYS_GETPGID, unix.SYS_SETPGID, unix.SYS_GETSID, unix.SYS_SETSID, unix.SYS_PRCTL,
	unix.SYS_GETRLIMIT, unix.SYS_SETRLIMIT, unix.SYS_PRLIMIT64, unix.SYS_GETRUSAGE, unix.SYS_GETPRIORITY,
	unix.SYS_SETPRIORITY, unix.SYS_IOPRIO_GET, unix.SYS_IOPRIO_SET, unix.SYS_PROCESS_MRELEASE,
	// process_vm_readv/writev check what ptrace attach checks; the
	// processes of one sandbox are all the step's own (see the ptrace rule).
	unix.SYS_PROCESS_VM_READV, unix.SYS_PROCESS_VM_WRITEV,
	unix.SYS_SCHED_YIELD, unix.SYS_SCHED_GETAFFINITY, unix.SYS_SCHED_SETAFFINITY, unix.SYS_SCHED_GETATTR,
	unix.SYS_SCHED_SETATTR, unix.SYS_SCHED_GETPARAM, unix.SYS_SCHED_SETPARAM, unix.SYS_SCHED_GETSCHEDULER,
	unix.SYS_SCHED_SETSCHEDULER, unix.SYS_SCHED_GET_PRIORITY_MAX, unix.SYS_SCHED_GET_PRIORITY_MIN,
	unix.SYS_SCHED_RR_GET_INTERVAL, unix.SYS_GETCPU,
	// identity (only the ids mapped into the sandbox's user namespace)
	unix.SYS_GETUID, unix.SYS_GETEUID, unix.SYS_GETGID, unix.SYS_GETEGID, unix.SYS_GETRESUID,
	unix.SYS_GETRESGID, unix.SYS_GETGROUPS, unix.SYS_SETUID, unix.SYS_SETGID, unix.SYS_SETREUID,
	unix.SYS_SETREGID, unix.SYS_SETRESUID, unix.SYS_SETRESGID, unix.SYS_SETFSUID, unix.SYS_SETFSGID,
	unix.SYS_SETGROUPS, unix.SYS_CAPGET, unix.SYS_CAPSET,
	// system information
	unix.SYS_UNAME, unix.SYS_SYSINFO, unix.SYS_GETRANDOM,
	// System V and POSIX IPC: the sandbox has its own IPC namespace
	unix.SYS_SHMGET, unix.SYS_SHMAT, unix.SYS_SHMDT, unix.SYS_SHMCTL, unix.SYS_SEMGET, unix.SYS_SEMOP,
	unix.SYS_SEMTIMEDOP, unix.SYS_SEMCTL, unix.SYS_MSGGET, unix.SYS_MSGSND, unix.SYS_MSGRCV, unix.SYS_MSGCTL,
	unix.SYS_MQ_OPEN, unix.SYS_MQ_UNLINK, unix.SYS_MQ_TIMEDSEND, unix.SYS_MQ_TIMEDRECEIVE, unix.SYS_MQ_NOTIFY,
	unix.SYS_MQ_GETSETATTR,
	// sockets, once made (socket and socketpair are checked below)
	unix.SYS_BIND, unix.SYS_LISTEN, unix.SYS_ACCEPT, unix.SYS_ACCEPT4, unix.SYS_CONNECT,
	unix.SYS_GETSOCKNAME, unix.SYS_GETPEERNAME, unix.SYS_SENDTO, unix.SYS_RECVFROM, unix.SYS_SENDMSG,
	unix.SYS_RECVMSG, unix.SYS_SENDMMSG, unix.SYS_RECVMMSG, unix.SYS_SHUTDOWN, unix.SYS_SETSOCKOPT,
	unix.SYS_GETSOCKOPT,
	// filters a program adds for itself only narrow what it may do: Landlock
	// (kusaw's own stage uses it), seccomp (browsers, other sandboxes)
	unix.SYS_LANDLOCK_CREATE_RULESET, unix.SYS_LANDLOCK_ADD_RULE, unix.SYS_LANDLOCK_RESTRICT_SELF,
	unix.SYS_SECCOMP,
}

// refused are named refusals (EPERM): what the host's kernel offers a
// process and a step has no use for. Unnamed calls get ENOSYS.
var refused = []uintptr{
	// the kernel key store (add_key, request_key; keyctl is checked below)
	unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	// page-fault handling in user space, performance counters, eBPF: the
	// usual ways into kernel bugs
	unix.SYS_USERFAULTFD, unix.SYS_PERF_EVENT_OPEN, unix.SYS_BPF,
	// mounts and roots
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT, unix.SYS_CHROOT, unix.SYS_FSOPEN,
	unix.SYS_FSCONFIG, unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE,
	unix.SYS_OPEN_TREE_ATTR, unix.SYS_MOUNT_SETATTR, unix.SYS_STATMOUNT, unix.SYS_LISTMOUNT,
	// other namespaces (unshare and clone are checked below)
	unix.SYS_SETNS,
	// the machine itself
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD, unix.SYS_REBOOT, unix.SYS_INIT_MODULE,
	unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_ACCT,
	unix.SYS_SETTIMEOFDAY, unix.SYS_CLOCK_SETTIME, unix.SYS_SETHOSTNAME, unix.SYS_SETDOMAINNAME,
	unix.SYS_SYSLOG, unix.SYS_QUOTACTL, unix.SYS_QUOTACTL_FD, unix.SYS_VHANGUP, unix.SYS_OPEN_BY_HANDLE_AT,
	unix.SYS_FANOTIFY_INIT, unix.SYS_FANOTIFY_MARK, unix.SYS_PIDFD_GETFD, unix.SYS_KCMP,
	unix.SYS_PROCESS_MADVISE, unix.SYS_MOVE_PAGES, unix.SYS_MIGRATE_PAGES,
}

// noSys are refused with ENOSYS: programs fall back to older calls.
var noSys = []uintptr{
	// io_uring: its rings bypass this filter, and most kernel escapes of
	// recent years went through it; libuv, Tokio and others fall back
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	// clone3's flags sit behind a pointer a filter cannot read; glibc
	// and Go fall back to clone, whose flags are checked
	unix.SYS_CLONE3,
}

// Namespace flags of clone and unshare. CLONE_NEWTIME shares its bit with
// clone's exit signal, so it is checked for unshare only.
const (
	nsFlags     = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP
	unshareMask = nsFlags | unix.CLONE_NEWTIME
)

// Personalities a step may set: Linux's default, the 32-bit and
// uname-2.6 variants, no address-space randomisation (debuggers turn it
// off for the programs they start), and the query. READ_IMPLIES_EXEC and
// the rest are refused.
var personalities = []uint32{0, perLinux32, uname26, uname26 | perLinux32, addrNoRandomize, 0xffffffff}

// From <linux/personality.h> (x/sys/unix does not carry them).
const (
	perLinux32      = 0x0008
	uname26         = 0x0020000
	addrNoRandomize = 0x0040000
)

// conditional are the calls decided by their arguments. Each block ends in
// returns, never falls through, and may jump only inside itself.
func conditional() map[uintptr][]bpf.Instruction {
	return map[uintptr][]bpf.Instruction{
		// Local, IPv4, IPv6 and routing information (getaddrinfo and
		// Go's net package read interfaces over NETLINK_ROUTE). No
		// AF_VSOCK (the host's VMs), AF_PACKET, AF_ALG, Bluetooth, ...
		unix.SYS_SOCKET: {
			bpf.LoadAbsolute{Off: argLow(0), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipTrue: 6},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_INET, SkipTrue: 5},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_INET6, SkipTrue: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_NETLINK, SkipFalse: 2},
			bpf.LoadAbsolute{Off: argLow(2), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.NETLINK_ROUTE, SkipTrue: 1},
			bpf.RetConstant{Val: retNoFamily},
			bpf.RetConstant{Val: retAllow},
		},
		unix.SYS_SOCKETPAIR:  argIn(0, []uint32{unix.AF_UNIX}, retAllow, retNoFamily),
		unix.SYS_PERSONALITY: argIn(0, personalities, retAllow, retEPERM),
		// Tracing stays for the step's own children (gdb, delve and
		// strace start theirs with PTRACE_TRACEME; strace falls back to
		// it when PTRACE_SEIZE fails); attaching to a running process
		// is refused.
		unix.SYS_PTRACE: {
			bpf.LoadAbsolute{Off: argHigh(0), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 4},
			bpf.LoadAbsolute{Off: argLow(0), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PTRACE_ATTACH, SkipTrue: 2},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PTRACE_SEIZE, SkipTrue: 1},
			bpf.RetConstant{Val: retAllow},
			bpf.RetConstant{Val: retEPERM},
		},
		// New processes and threads, never new namespaces (bwrap made the
		// sandbox's before the filter; nested user namespaces are off).
		unix.SYS_CLONE:   flagsNone(0, nsFlags),
		unix.SYS_UNSHARE: flagsNone(0, unshareMask),
		// keyctl: only joining a new, anonymous session keyring, which is
		// what kusaw's own first stage does so the host's is not inherited.
		// Everything else (reading, writing, searching keys) is refused.
		unix.SYS_KEYCTL: {
			bpf.LoadAbsolute{Off: argLow(0), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.KEYCTL_JOIN_SESSION_KEYRING, SkipFalse: 5},
			bpf.LoadAbsolute{Off: argLow(1), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 3},
			bpf.LoadAbsolute{Off: argHigh(1), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipFalse: 1},
			bpf.RetConstant{Val: retAllow},
			bpf.RetConstant{Val: retEPERM},
		},
	}
}

// argIn: hit when argument i (as the 32-bit int the kernel reads) is one
// of vals, else miss.
func argIn(i int, vals []uint32, hit, miss uint32) []bpf.Instruction {
	b := []bpf.Instruction{bpf.LoadAbsolute{Off: argLow(i), Size: 4}}
	for k, v := range vals {
		b = append(b, bpf.JumpIf{Cond: bpf.JumpEqual, Val: v, SkipTrue: uint8(len(vals) - k)})
	}
	return append(b, bpf.RetConstant{Val: miss}, bpf.RetConstant{Val: hit})
}

// flagsNone: allowed when argument i has none of mask's bits (the mask
// lies in the low 32 bits), else EPERM.
func flagsNone(i int, mask uint32) []bpf.Instruction {
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: argLow(i), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: mask, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retEPERM},
	}
}

// segment is what the filter does for the calls lo..hi: return ret, or,
// for a call decided by its arguments, run block.
type segment struct {
	lo, hi uint32
	ret    uint32
	block  []bpf.Instruction
}

// seccompSegments cuts the whole range of call numbers into segments,
// sorted: every named call with its action, neighbouring calls with the
// same return merged into one segment, what archKilled names killed, and
// every number left ENOSYS.
func seccompSegments() ([]segment, error) {
	var items []segment
	for _, t := range []struct {
		nrs []uintptr
		ret uint32
	}{{allowed, retAllow}, {archAllowed, retAllow}, {refused, retEPERM}, {archRefused, retEPERM}, {noSys, retENOSYS}} {
		for _, nr := range t.nrs {
			items = append(items, segment{uint32(nr), uint32(nr), t.ret, nil})
		}
	}
	for nr, b := range conditional() {
		items = append(items, segment{uint32(nr), uint32(nr), 0, b})
	}
	for _, r := range archKilled {
		items = append(items, segment{r[0], r[1], retKill, nil})
	}
	slices.SortFunc(items, func(a, b segment) int { return cmp.Compare(a.lo, b.lo) })
	var segs []segment
	put := func(s segment) {
		if n := len(segs); n > 0 && s.block == nil && segs[n-1].block == nil && segs[n-1].ret == s.ret {
			segs[n-1].hi = s.hi
			return
		}
		segs = append(segs, s)
	}
	next := uint64(0) // the first number no segment covers yet
	for _, it := range items {
		if uint64(it.lo) < next {
			return nil, fmt.Errorf("seccomp: system call %d named twice (or in a killed range)", it.lo)
		}
		if uint64(it.lo) > next {
			put(segment{uint32(next), it.lo - 1, retENOSYS, nil})
		}
		put(it)
		next = uint64(it.hi) + 1
	}
	if next <= 0xffffffff {
		put(segment{uint32(next), 0xffffffff, retENOSYS, nil})
	}
	return segs, nil
}

// target is where a jump goes: an instruction of the filter by its index
// ('a'), instruction k of block i ('b'), or the shared return of action i
// ('r').
type target struct {
	kind byte
	i, k uint32
}

// symInstr is an instruction of the filter before its jumps are resolved.
type symInstr struct {
	ins    bpf.Instruction
	jt, jf *target // for a JumpIf
}

// assemble lays the filter out: the architecture check, then a binary
// search over the segments' lower bounds, one comparison a step (a few per
// call even on kernels without seccomp's per-call cache), then the blocks,
// then one return of each action. Every step that decides a call, and
// every jump of a block to a return, goes to that action's shared return:
// no return is repeated, and the whole stays within a conditional jump's
// reach (255), so it needs no long jumps. (The kernel checks, converts,
// compiles and emulates the filter at each start of a sandbox, twice with
// bwrap, whose PID 1 installs it too: the fewer instructions, the less.)
func assemble(segs []segment) ([]bpf.Instruction, error) {
	ret := func(v uint32) *target { return &target{'r', v, 0} }
	prog := []symInstr{
		{ins: bpf.LoadAbsolute{Off: offArch, Size: 4}},
		{ins: bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch}, jf: ret(retKill)},
		{ins: bpf.LoadAbsolute{Off: offNr, Size: 4}},
	}
	at := map[target]int{} // where each target lands
	var blocks [][]bpf.Instruction
	var build func(lo, hi int) *target
	build = func(lo, hi int) *target {
		if hi-lo == 1 {
			if s := segs[lo]; s.block != nil {
				blocks = append(blocks, s.block)
				return &target{'b', uint32(len(blocks) - 1), 0}
			}
			return ret(segs[lo].ret)
		}
		mid := (lo + hi) / 2
		i := len(prog)
		prog = append(prog, symInstr{ins: bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: segs[mid].lo}})
		self := &target{'a', uint32(i), 0}
		at[*self] = i
		jf := build(lo, mid)
		prog[i].jt, prog[i].jf = build(mid, hi), jf
		return self
	}
	// The search starts right after the number's load.
	if root := build(0, len(segs)); root.kind != 'a' {
		return nil, fmt.Errorf("seccomp: one segment, nothing to search")
	}
	load := target{'a', 2, 0}
	at[load] = 2
	prog[1].jt = &load
	for bi, b := range blocks {
		syms, err := blockSyms(uint32(bi), b)
		if err != nil {
			return nil, err
		}
		for k, sy := range syms {
			at[target{'b', uint32(bi), uint32(k)}] = len(prog)
			prog = append(prog, sy)
		}
	}
	// The shared returns, in the order the jumps first name them.
	for _, p := range prog {
		for _, t := range []*target{p.jt, p.jf} {
			if t != nil && t.kind == 'r' {
				if _, ok := at[*t]; !ok {
					at[*t] = len(prog)
					prog = append(prog, symInstr{ins: bpf.RetConstant{Val: t.i}})
				}
			}
		}
	}
	out := make([]bpf.Instruction, len(prog))
	for i, p := range prog {
		out[i] = p.ins
		if p.jt == nil {
			continue
		}
		j := p.ins.(bpf.JumpIf)
		skip := func(t *target) (uint8, error) {
			d := at[*t] - i - 1
			if d < 0 || d > 255 {
				return 0, fmt.Errorf("seccomp: instruction %d of the filter jumps %d, beyond the 255 a conditional jump reaches", i, d)
			}
			return uint8(d), nil
		}
		var err error
		if j.SkipTrue, err = skip(p.jt); err != nil {
			return nil, err
		}
		if j.SkipFalse, err = skip(p.jf); err != nil {
			return nil, err
		}
		out[i] = j
	}
	return out, nil
}

// blockSyms turns block number bi into symbolic instructions: a jump to
// one of its returns goes to the shared return instead, and a return only
// jumps reached is left out.
func blockSyms(bi uint32, b []bpf.Instruction) ([]symInstr, error) {
	kept := make([]int, len(b)) // new index of each instruction, -1 if left out
	n := 0
	for k, ins := range b {
		_, isRet := ins.(bpf.RetConstant)
		fallenInto := false
		if k > 0 {
			switch b[k-1].(type) {
			case bpf.JumpIf, bpf.RetConstant:
			default:
				fallenInto = true
			}
		}
		if isRet && !fallenInto {
			kept[k] = -1
			continue
		}
		switch ins.(type) {
		case bpf.LoadAbsolute, bpf.JumpIf, bpf.RetConstant:
		default:
			return nil, fmt.Errorf("seccomp: block %d has an instruction the filter does not use: %v", bi, ins)
		}
		kept[k] = n
		n++
	}
	to := func(k int) (*target, error) {
		if k >= len(b) {
			return nil, fmt.Errorf("seccomp: block %d jumps out of itself", bi)
		}
		if r, ok := b[k].(bpf.RetConstant); ok {
			return &target{'r', r.Val, 0}, nil
		}
		return &target{'b', bi, uint32(kept[k])}, nil
	}
	var out []symInstr
	for k, ins := range b {
		if kept[k] < 0 {
			continue
		}
		sy := symInstr{ins: ins}
		if j, ok := ins.(bpf.JumpIf); ok {
			var err error
			if sy.jt, err = to(k + 1 + int(j.SkipTrue)); err != nil {
				return nil, err
			}
			if sy.jf, err = to(k + 1 + int(j.SkipFalse)); err != nil {
				return nil, err
			}
		}
		out = append(out, sy)
	}
	if len(out) > 0 {
		if _, ok := out[len(out)-1].ins.(bpf.RetConstant); !ok {
			if _, ok := out[len(out)-1].ins.(bpf.JumpIf); !ok {
				return nil, fmt.Errorf("seccomp: block %d falls through", bi)
			}
		}
	}
	return out, nil
}

// seccompProgram assembles the filter. The result is what bwrap's
// --seccomp reads: struct sock_filter entries back to back.
func seccompProgram() ([]byte, error) {
	segs, err := seccompSegments()
	if err != nil {
		return nil, err
	}
	prog, err := assemble(segs)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, ins := range raw {
		out = binary.NativeEndian.AppendUint16(out, ins.Op)
		out = append(out, ins.Jt, ins.Jf)
		out = binary.NativeEndian.AppendUint32(out, ins.K)
	}
	return out, nil
}

var (
	seccompOnce  sync.Once
	seccompBytes []byte
	seccompErr   error
)

// SeccompFilter returns the compiled filter: on amd64 the program
// seccompProgram builds, kept in the source (seccompPrebuilt, checked
// against it by TestSeccompPrebuiltIsTheProgram), since building it costs
// every start of kusaw sandbox exec about 0.1 ms of a core it needs for
// the plan (docs/benchmarks.md, "Lean start, twelfth pass (issue 25)");
// elsewhere built once per process.
func SeccompFilter() ([]byte, error) {
	seccompOnce.Do(func() {
		if seccompPrebuilt != "" {
			seccompBytes = []byte(seccompPrebuilt)
			return
		}
		seccompBytes, seccompErr = seccompProgram()
	})
	return seccompBytes, seccompErr
}

//go:generate go test -run TestSeccompPrebuiltIsTheProgram -update-seccomp .

// seccompFile returns the filter in a fresh in-memory file positioned at
// its start, for bwrap to read (one per command: bwrap reads it to the end).
func seccompFile() (*os.File, error) {
	prog, err := SeccompFilter()
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("kusaw-seccomp", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("sandbox: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "kusaw-seccomp")
	if _, err := f.Write(prog); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: writing the seccomp filter: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
