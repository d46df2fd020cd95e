//go:build linux && cgo

package main

// The confinement stage in C, run before the Go runtime starts: a
// sandboxed step's first program then costs a C program's start, not a Go
// one's (the figures: docs/benchmarks.md, "Kernel filters, fifth pass (issue 24)",
// and the fourth pass before it). It does what confine.Run does, the same
// rights per Landlock ABI, the same messages and exit statuses; anything
// it does not handle (a bad argument, the stage's command being this
// program's own bridge, which confines after its hand-over) it leaves to
// the Go code by returning. confine.Run is the implementation without
// cgo; TestStageImplementationsAgree holds both to one behaviour.
//
// It runs from one of two places. On amd64 the program's entry point is
// kusawentry (the linker's -e), which runs the stage before the C library
// has started: glibc's static start-up alone cost about 0.35 ms, most of
// what the stage added to a step. There nothing may call the C library
// (no errno, no IFUNCs resolved yet), so the stage makes its system calls
// itself, and on any failure it only returns: the C library then starts
// and its constructor (kusaw_ctor, the other place, and the only one
// elsewhere) runs the stage again, this time reporting the failure. Doing
// it twice is harmless: a second fresh keyring, a second Landlock layer
// with the same rules.

/*
#cgo linux,amd64 LDFLAGS: -Wl,-e,kusawentry
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

// Landlock's ABI, defined here: the system's linux/landlock.h may predate
// truncation and scopes. The syscall numbers are the same on every
// architecture.
#define KL_CREATE 444
#define KL_ADD_RULE 445
#define KL_RESTRICT 446
#define KL_VERSION 1u
#define KL_RULE_PATH_BENEATH 1
#define KL_WRITE_FILE (1ull << 1)
#define KL_REMOVE_DIR (1ull << 4)
#define KL_REMOVE_FILE (1ull << 5)
#define KL_MAKE_CHAR (1ull << 6)
#define KL_MAKE_DIR (1ull << 7)
#define KL_MAKE_REG (1ull << 8)
#define KL_MAKE_SOCK (1ull << 9)
#define KL_MAKE_FIFO (1ull << 10)
#define KL_MAKE_BLOCK (1ull << 11)
#define KL_MAKE_SYM (1ull << 12)
#define KL_REFER (1ull << 13)
#define KL_TRUNCATE (1ull << 14)
#define KL_SCOPE_ABSTRACT_UNIX_SOCKET (1ull << 0)
#define KL_SCOPE_SIGNAL (1ull << 1)
#define KL_WRITE_V1 (KL_WRITE_FILE | KL_REMOVE_DIR | KL_REMOVE_FILE | KL_MAKE_CHAR | \
	KL_MAKE_DIR | KL_MAKE_REG | KL_MAKE_SOCK | KL_MAKE_FIFO | KL_MAKE_BLOCK | KL_MAKE_SYM)
#define KL_FILE_RIGHTS (KL_WRITE_FILE | KL_TRUNCATE)

#define KEYCTL_JOIN 1
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define KUSAW_CLOSE_RANGE_CLOEXEC (1u << 2)
#ifndef SYS_faccessat2
#define SYS_faccessat2 439
#endif

// Code the entry point runs before the C library has started: no stack
// protector (its canary lives in thread-local storage, not set up yet) and
// no loop turned into a call of memcpy or strlen (not resolved yet).
#if defined(__clang__)
#define KUSAW_EARLY __attribute__((no_stack_protector, no_builtin))
#else
#define KUSAW_EARLY __attribute__((no_stack_protector, optimize("no-tree-loop-distribute-patterns")))
#endif

struct kl_ruleset { uint64_t fs, net, scoped; };
struct kl_beneath { uint64_t allowed; int32_t fd; } __attribute__((packed));

// kusaw_sys is a system call made without the C library: it returns the
// result, or -errno.
KUSAW_EARLY static long kusaw_sys(long n, long a, long b, long c, long d, long e) {
#if defined(__x86_64__)
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	__asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8) : "rcx", "r11", "memory");
	return r;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	__asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
	return x0;
#else
	long r = syscall(n, a, b, c, d, e);
	return r < 0 ? -errno : r;
#endif
}

KUSAW_EARLY static int kusaw_streq(const char *a, const char *b) {
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

KUSAW_EARLY static size_t kusaw_strlen(const char *s) {
	size_t n = 0;
	while (s[n])
		n++;
	return n;
}

KUSAW_EARLY static int kusaw_stat(const char *p, struct stat *st) {
	return kusaw_sys(SYS_newfstatat, AT_FDCWD, (long)p, (long)st, 0, 0) == 0;
}

// kusaw_err is Go's text for an errno: strerror's, lower-cased first.
static const char *kusaw_err(int e) {
	static char buf[128];
	snprintf(buf, sizeof buf, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] += 'a' - 'A';
	return buf;
}

static void kusaw_report(int code, const char *msg, const char *arg, int e) {
	fprintf(stderr, "kusaw: ");
	fprintf(stderr, msg, arg);
	if (e)
		fprintf(stderr, ": %s", kusaw_err(e));
	fprintf(stderr, "\n");
	_exit(code);
}

// kusaw_fail reports a failure and ends the process, with the C library
// started (report set); without it (the entry point) it returns 0 and the
// caller returns, so the constructor can report.
KUSAW_EARLY static int kusaw_fail(int report, int code, const char *msg, const char *arg, int e) {
	if (report)
		kusaw_report(code, msg, arg, e);
	return 0;
}

// kusaw_own_bridge mirrors isOwnBridge in main.go.
KUSAW_EARLY static int kusaw_own_bridge(char **cmd, int n, const char *self) {
	struct stat a, b;
	if (n < 2 || !kusaw_streq(cmd[1], "--lease"))
		return 0;
	if (kusaw_streq(cmd[0], self))
		return 1;
	return kusaw_stat("/proc/self/exe", &a) && kusaw_stat(cmd[0], &b) &&
		a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// kusaw_landlock restricts writes to the paths argv[wfirst], argv[wfirst+2],
// ... (nw of them). It returns 1 when done (or when the kernel has no
// Landlock), 0 when it failed without reporting.
KUSAW_EARLY static int kusaw_landlock(char **argv, int wfirst, int nw, int report) {
	static const char *const always[] = {"/dev", "/proc"};
	long abi = kusaw_sys(KL_CREATE, 0, 0, KL_VERSION, 0, 0);
	if (abi < 1)
		return 1;
	struct kl_ruleset attr = {KL_WRITE_V1, 0, 0};
	size_t size = 8;
	if (abi >= 2)
		attr.fs |= KL_REFER;
	if (abi >= 3)
		attr.fs |= KL_TRUNCATE;
	if (abi >= 6) {
		attr.scoped = KL_SCOPE_ABSTRACT_UNIX_SOCKET | KL_SCOPE_SIGNAL;
		size = 24;
	}
	long rs = kusaw_sys(KL_CREATE, (long)&attr, size, 0, 0, 0);
	if (rs < 0)
		return kusaw_fail(report, 125, "confine: landlock: creating the ruleset%s", "", -rs);
	for (int i = 0; i < 2 + nw; i++) {
		const char *p = i < 2 ? always[i] : argv[wfirst + 2 * (i - 2)];
		long fd = kusaw_sys(SYS_openat, AT_FDCWD, (long)p, O_PATH | O_CLOEXEC, 0, 0);
		if (fd < 0)
			continue; // left out: it then cannot be written, the safe side
		struct stat st;
		struct kl_beneath rule = {attr.fs, (int32_t)fd};
		if (kusaw_sys(SYS_fstat, fd, (long)&st, 0, 0, 0) == 0 && !S_ISDIR(st.st_mode))
			rule.allowed &= KL_FILE_RIGHTS;
		long r = kusaw_sys(KL_ADD_RULE, rs, KL_RULE_PATH_BENEATH, (long)&rule, 0, 0);
		kusaw_sys(SYS_close, fd, 0, 0, 0, 0);
		if (r < 0) {
			kusaw_sys(SYS_close, rs, 0, 0, 0, 0);
			return kusaw_fail(report, 125, "confine: landlock: allowing writes beneath %s", p, -r);
		}
	}
	long r = kusaw_sys(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
	if (r < 0) {
		kusaw_sys(SYS_close, rs, 0, 0, 0, 0);
		return kusaw_fail(report, 125, "confine: landlock: no_new_privs%s", "", -r);
	}
	r = kusaw_sys(KL_RESTRICT, rs, 0, 0, 0, 0);
	kusaw_sys(SYS_close, rs, 0, 0, 0, 0);
	if (r < 0)
		return kusaw_fail(report, 125, "confine: landlock: restricting%s", "", -r);
	return 1;
}

// kusaw_executable is Go's findExecutable: a file, not a folder, that
// this process may execute. -1: undecided (a kernel without faccessat2,
// before the C library has started).
KUSAW_EARLY static int kusaw_executable(const char *p, int report) {
	struct stat st;
	if (!kusaw_stat(p, &st) || S_ISDIR(st.st_mode))
		return 0;
	long r = kusaw_sys(SYS_faccessat2, AT_FDCWD, (long)p, X_OK, AT_EACCESS, 0);
	if (r == -ENOSYS)
		return report ? faccessat(AT_FDCWD, p, X_OK, AT_EACCESS) == 0 : -1;
	return r == 0;
}

// kusaw_lookpath is exec.LookPath: a name with a slash as it is, else the
// first PATH entry that has it, refused when that entry is relative.
// *undecided is set when kusaw_executable could not decide.
KUSAW_EARLY static const char *kusaw_lookpath(const char *name, char **envp, int report, int *undecided) {
	static char buf[4096];
	int x;
	for (const char *c = name; *c; c++) {
		if (*c == '/') {
			x = kusaw_executable(name, report);
			*undecided = x < 0;
			return x > 0 ? name : NULL;
		}
	}
	const char *path = NULL;
	for (char **e = envp; e && *e; e++) {
		const char *v = *e;
		if (v[0] == 'P' && v[1] == 'A' && v[2] == 'T' && v[3] == 'H' && v[4] == '=') {
			path = v + 5;
			break;
		}
	}
	if (!path)
		return NULL;
	size_t ln = kusaw_strlen(name);
	for (const char *s = path;; ) {
		const char *e = s;
		while (*e && *e != ':')
			e++;
		size_t n = (size_t)(e - s);
		if (n == 0) {
			x = kusaw_executable(name, report);
			*undecided = x < 0;
			if (x != 0)
				return NULL; // found in the working folder: Go's ErrDot
		} else if (n + 1 + ln < sizeof buf) {
			for (size_t k = 0; k < n; k++)
				buf[k] = s[k];
			buf[n] = '/';
			for (size_t k = 0; k <= ln; k++)
				buf[n + 1 + k] = name[k];
			x = kusaw_executable(buf, report);
			*undecided = x < 0;
			if (x != 0)
				return x > 0 && buf[0] == '/' ? buf : NULL;
		}
		if (!*e)
			return NULL;
		s = e + 1;
	}
}

// kusaw_cloexec_inherited is confine.CloseInheritedOnExec: every descriptor
// from 3 on close-on-exec, so the step sees only stdin, stdout and stderr
// of what reached the stage (bwrap has taken kusaw's). close_range first
// (Linux 5.11); without it, the list in /proc/self/fd, which needs the C
// library: before it (report unset) it returns 0, and the constructor
// does it. 1 when done.
KUSAW_EARLY static int kusaw_cloexec_inherited(int report) {
	long r = kusaw_sys(SYS_close_range, 3, (long)~0u, KUSAW_CLOSE_RANGE_CLOEXEC, 0, 0);
	if (r == 0 || !report)
		return r == 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return kusaw_fail(report, 125, "confine: cannot mark inherited descriptors close-on-exec: listing /proc/self/fd%s", "", errno);
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long fd = strtol(e->d_name, &end, 10);
		if (*end || end == e->d_name || fd < 3 || fd == dirfd(d))
			continue;
		if (fcntl((int)fd, F_SETFD, FD_CLOEXEC) != 0 && errno != EBADF) {
			int err = errno;
			closedir(d);
			return kusaw_fail(report, 125, "confine: cannot mark an inherited descriptor close-on-exec%s", "", err);
		}
	}
	closedir(d);
	return 1;
}

// kusaw_stage runs the stage when argv asks for it: it execs the step, or
// reports a failure and exits (report), or returns (the Go code's work,
// or a failure left to the constructor to report).
KUSAW_EARLY static void kusaw_stage(int argc, char **argv, char **envp, int report) {
	if (argc < 2 || argv == NULL || !kusaw_streq(argv[1], "__confine"))
		return;
	int nw = 0, i = 2;
	for (; i < argc && kusaw_streq(argv[i], "-w") && i + 1 < argc; i += 2)
		nw++;
	// Bad arguments are the Go code's to report.
	if (i >= argc || !kusaw_streq(argv[i], "--") || i + 1 >= argc)
		return;
	char **cmd = argv + i + 1;
	if (kusaw_own_bridge(cmd, argc - i - 1, argv[0]))
		return;
	long r = kusaw_sys(SYS_keyctl, KEYCTL_JOIN, 0, 0, 0, 0);
	if (r < 0 && r != -ENOSYS && r != -EOPNOTSUPP) {
		kusaw_fail(report, 125, "confine: cannot give the step a session keyring of its own%s", "", -r);
		return;
	}
	if (!kusaw_landlock(argv, 3, nw, report))
		return;
	if (!kusaw_cloexec_inherited(report))
		return;
	int undecided = 0;
	const char *path = kusaw_lookpath(cmd[0], envp, report, &undecided);
	if (!path) {
		if (!undecided)
			kusaw_fail(report, 127, "cannot run %s: not found", cmd[0], 0);
		return;
	}
	r = kusaw_sys(SYS_execve, (long)path, (long)cmd, (long)envp, 0, 0);
	kusaw_fail(report, 126, "cannot run %s", cmd[0], -r);
}

// The write layer's stage (__layer), as confine.RunLayer does it, run
// from the constructor (the C library started: it runs once per layered
// attempt, outside the sandbox, where its 0.35 ms do not matter), so the
// Go runtime's start is spared. It takes only arguments it needs no
// judgement on: any that the Go code would refuse or report on (a bad
// argument, a path with a character overlay's options cannot carry, a
// link on the way, not a folder, the host's own user namespace) it leaves
// to the Go code before changing anything. From the first mount on, a
// failure is reported here with the Go code's message and status.
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#endif
#ifndef PR_CAP_AMBIENT_CLEAR_ALL
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#define KUSAW_OVERLAY_MAGIC 0x794c7630
#define KUSAW_CAP_V3 0x20080522
#define KUSAW_MAX_LAYERS 16

static int kusaw_layer_path_ok(const char *p) {
	char buf[PATH_MAX];
	struct stat st;
	if (p[0] != '/' || strpbrk(p, ",:\\\n"))
		return 0;
	if (!realpath(p, buf) || strcmp(buf, p) != 0)
		return 0;
	return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

// kusaw_own_userns mirrors ownUserNamespace: the initial user namespace's
// uid map is the whole identity.
static int kusaw_own_userns(void) {
	char buf[256];
	unsigned long a, b, c;
	FILE *f = fopen("/proc/self/uid_map", "r");
	if (!f)
		return 0;
	int n = fscanf(f, "%lu %lu %lu", &a, &b, &c);
	int more = fscanf(f, "%255s", buf);
	fclose(f);
	return n == 3 && !(a == 0 && b == 0 && c == 4294967295UL && more != 1);
}

static void kusaw_layer_fail(const char *what, const char *path, int e) {
	fprintf(stderr, "kusaw: layer: %s%s%s: %s", what, path ? " " : "", path ? path : "", kusaw_err(e));
	if (e == EPERM || e == EACCES || e == EINVAL)
		fprintf(stderr, " (the kernel refused an overlay in kusaw's user namespace; kusaw sandbox check --verbose says whether the write layer works here, or set write_layer: none)");
	fprintf(stderr, "\n");
	_exit(125);
}

static void kusaw_layer(int argc, char **argv, char **envp) {
	const char *l[KUSAW_MAX_LAYERS][3];
	char opts[3 * PATH_MAX + 64];
	struct statfs fs;
	int i = 2, n = 0;
	if (argc < 2 || argv == NULL || strcmp(argv[1], "__layer") != 0)
		return;
	for (; i < argc && strcmp(argv[i], "-l") == 0; i += 4, n++) {
		if (i + 3 >= argc || n == KUSAW_MAX_LAYERS)
			return;
		for (int k = 0; k < 3; k++) {
			if (!kusaw_layer_path_ok(argv[i + 1 + k]))
				return;
			l[n][k] = argv[i + 1 + k];
		}
	}
	if (n == 0 || i + 1 >= argc || strcmp(argv[i], "--") != 0 || argv[i + 1][0] != '/' || !kusaw_own_userns())
		return;
	char **cmd = argv + i + 1;
	if (mount("", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
		kusaw_layer_fail("making the mounts private", NULL, errno);
	for (int k = 0; k < n; k++) {
		// Each path is shorter than PATH_MAX (realpath took it).
		snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,userxattr", l[k][0], l[k][1], l[k][2]);
		if (mount("overlay", l[k][0], "overlay", MS_NOSUID | MS_NODEV, opts) != 0)
			kusaw_layer_fail("mounting the write layer on", l[k][0], errno);
		if (statfs(l[k][0], &fs) != 0 || fs.f_type != KUSAW_OVERLAY_MAGIC) {
			fprintf(stderr, "kusaw: layer: %s is not an overlay after mounting it\n", l[k][0]);
			_exit(125);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
		kusaw_layer_fail("letting go of the ambient capabilities", NULL, errno);
	// As confine's dropCaps: the inheritable set survives the exec.
	struct { uint32_t version; int pid; } caph = {KUSAW_CAP_V3, 0};
	struct { uint32_t eff, prm, inh; } capd[2] = {{0, 0, 0}, {0, 0, 0}};
	if (syscall(SYS_capset, &caph, capd) != 0)
		kusaw_layer_fail("letting go of the capabilities", NULL, errno);
	execve(cmd[0], cmd, envp);
	fprintf(stderr, "kusaw: layer: cannot run %s: %s\n", cmd[0], kusaw_err(errno));
	_exit(126);
}

// Only glibc calls a constructor with argc, argv and envp (musl passes
// nothing): elsewhere the stage is the Go code's.
#ifdef __GLIBC__
__attribute__((constructor)) static void kusaw_ctor(int argc, char **argv, char **envp) {
	kusaw_layer(argc, argv, envp);
	kusaw_stage(argc, argv, envp, 1);
}
#endif

#if defined(__x86_64__)
// kusawentry: the kernel's entry into the program (argc, argv and envp
// on the stack, rdx the dynamic loader's fini function or 0). It runs the
// stage without the C library, then, if the stage returned, restores the
// stack and rdx and goes on to the C library's own entry, _start.
KUSAW_EARLY void kusaw_entry_stage(long *sp) {
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);
	kusaw_stage(argc, argv, argv + argc + 1, 0);
}
__asm__(
	".pushsection .text\n"
	".globl kusawentry\n"
	".type kusawentry, @function\n"
	"kusawentry:\n"
	"	mov %rsp, %r12\n"
	"	mov %rdx, %r13\n"
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call kusaw_entry_stage\n"
	"	mov %r12, %rsp\n"
	"	mov %r13, %rdx\n"
	"	xor %r12d, %r12d\n"
	"	xor %r13d, %r13d\n"
	"	jmp _start\n"
	".popsection\n"
);
#endif
*/
import "C"
