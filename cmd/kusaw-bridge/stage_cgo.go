//go:build linux && cgo

package main

// The confinement stage in C, run by glibc as a constructor before the Go
// runtime starts: a sandboxed step's first program then costs a C
// program's start, not a Go one's (the figures: docs/benchmarks.md,
// "Kernel filters, fourth pass"). It does what confine.Run does, the same
// rights per Landlock ABI, the same messages and exit statuses; anything
// it does not handle (a bad argument, the stage's command being this
// program's own bridge, which confines after its hand-over) it leaves to
// the Go code by returning. confine.Run is the implementation without
// cgo; TestStageImplementationsAgree holds both to one behaviour.

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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

struct kl_ruleset { uint64_t fs, net, scoped; };
struct kl_beneath { uint64_t allowed; int32_t fd; } __attribute__((packed));

extern char **environ;

static const char *const kusaw_usage = "usage: __confine [-w WRITABLE_PATH]... -- COMMAND [ARG...]";

// kusaw_err is Go's text for an errno: strerror's, lower-cased first.
static const char *kusaw_err(int e) {
	static char buf[128];
	snprintf(buf, sizeof buf, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] += 'a' - 'A';
	return buf;
}

static void kusaw_fail(int code, const char *msg, const char *arg, int e) {
	fprintf(stderr, "kusaw: ");
	fprintf(stderr, msg, arg);
	if (e)
		fprintf(stderr, ": %s", kusaw_err(e));
	fprintf(stderr, "\n");
	_exit(code);
}

// kusaw_own_bridge mirrors isOwnBridge in main.go.
static int kusaw_own_bridge(char **cmd, int n, const char *self) {
	struct stat a, b;
	if (n < 2 || strcmp(cmd[1], "--lease") != 0)
		return 0;
	if (strcmp(cmd[0], self) == 0)
		return 1;
	return stat("/proc/self/exe", &a) == 0 && stat(cmd[0], &b) == 0 &&
		a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

static void kusaw_landlock(char **writable, int nw) {
	static const char *const always[] = {"/dev", "/proc"};
	long abi = syscall(KL_CREATE, NULL, 0, KL_VERSION);
	if (abi < 1)
		return;
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
	int rs = syscall(KL_CREATE, &attr, size, 0);
	if (rs < 0)
		kusaw_fail(125, "confine: landlock: creating the ruleset%s", "", errno);
	for (int i = 0; i < 2 + nw; i++) {
		const char *p = i < 2 ? always[i] : writable[i - 2];
		int fd = open(p, O_PATH | O_CLOEXEC);
		if (fd < 0)
			continue; // left out: it then cannot be written, the safe side
		struct stat st;
		struct kl_beneath rule = {attr.fs, fd};
		if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
			rule.allowed &= KL_FILE_RIGHTS;
		int r = syscall(KL_ADD_RULE, rs, KL_RULE_PATH_BENEATH, &rule, 0);
		int e = errno;
		close(fd);
		if (r < 0)
			kusaw_fail(125, "confine: landlock: allowing writes beneath %s", p, e);
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		kusaw_fail(125, "confine: landlock: no_new_privs%s", "", errno);
	if (syscall(KL_RESTRICT, rs, 0) < 0)
		kusaw_fail(125, "confine: landlock: restricting%s", "", errno);
	close(rs);
}

// kusaw_executable is Go's findExecutable: a file, not a folder, that
// this process may execute.
static int kusaw_executable(const char *p) {
	struct stat st;
	return stat(p, &st) == 0 && !S_ISDIR(st.st_mode) && faccessat(AT_FDCWD, p, X_OK, AT_EACCESS) == 0;
}

// kusaw_lookpath is exec.LookPath: a name with a slash as it is, else the
// first PATH entry that has it, refused when that entry is relative.
static const char *kusaw_lookpath(const char *name) {
	static char buf[4096];
	if (strchr(name, '/'))
		return kusaw_executable(name) ? name : NULL;
	const char *path = getenv("PATH");
	if (!path)
		return NULL;
	for (const char *s = path;; ) {
		const char *e = strchr(s, ':');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		if (n == 0) {
			if (kusaw_executable(name))
				return NULL; // found in the working folder: Go's ErrDot
		} else if (n + 1 + strlen(name) < sizeof buf) {
			snprintf(buf, sizeof buf, "%.*s/%s", (int)n, s, name);
			if (kusaw_executable(buf))
				return buf[0] == '/' ? buf : NULL;
		}
		if (!e)
			return NULL;
		s = e + 1;
	}
}

// Only glibc calls a constructor with argc, argv and envp (musl passes
// nothing): elsewhere the stage is the Go code's.
#ifdef __GLIBC__
__attribute__((constructor)) static void kusaw_stage(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 2 || argv == NULL || strcmp(argv[1], "__confine") != 0)
		return;
	char **writable = calloc(argc, sizeof *writable);
	int nw = 0, i = 2;
	if (!writable)
		return;
	for (; i < argc; i++) {
		if (strcmp(argv[i], "-w") == 0 && i + 1 < argc)
			writable[nw++] = argv[++i];
		else
			break;
	}
	// Bad arguments are the Go code's to report.
	if (i >= argc || strcmp(argv[i], "--") != 0 || i + 1 >= argc) {
		free(writable);
		return;
	}
	char **cmd = argv + i + 1;
	if (kusaw_own_bridge(cmd, argc - i - 1, argv[0])) {
		free(writable);
		return;
	}
	long r = syscall(SYS_keyctl, KEYCTL_JOIN, 0, 0, 0, 0);
	if (r < 0 && errno != ENOSYS && errno != EOPNOTSUPP)
		kusaw_fail(125, "confine: cannot give the step a session keyring of its own%s", "", errno);
	kusaw_landlock(writable, nw);
	const char *path = kusaw_lookpath(cmd[0]);
	if (!path)
		kusaw_fail(127, "cannot run %s: not found", cmd[0], 0);
	execve(path, cmd, environ);
	kusaw_fail(126, "cannot run %s", cmd[0], errno);
}
#endif
*/
import "C"
