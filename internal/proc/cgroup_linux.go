package proc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// group is a cgroup (v1: one folder per controller; v2: one folder) that
// kusaw made below the group it runs in, for one process. It never moves
// another process and never writes a parent group's files.
type group struct {
	dirs map[string]string // controller → folder (v2: every controller → the same folder)
	v2   bool
}

// cgroupRoots finds, per controller, the folder of the group this
// process runs in: v1 hierarchies from /proc/self/cgroup and mountinfo,
// and the v2 group when its controllers are delegated to it.
func cgroupRoots() (v1 map[string]string, v2 string, v2ctl map[string]bool) {
	v1 = map[string]string{}
	v2ctl = map[string]bool{}
	mounts := cgroupMounts()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return v1, "", v2ctl
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			if m, ok := mounts["cgroup2"]; ok {
				dir := filepath.Join(m.point, relTo(m.root, parts[2]))
				if c, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); err == nil {
					for _, f := range strings.Fields(string(c)) {
						v2ctl[f] = true
					}
				}
				v2 = dir
			}
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			if m, ok := mounts[ctl]; ok {
				v1[ctl] = filepath.Join(m.point, relTo(m.root, parts[2]))
			}
		}
	}
	return v1, v2, v2ctl
}

type mount struct{ point, root string }

// cgroupMounts maps each v1 controller (and "cgroup2") to its mount.
func cgroupMounts() map[string]mount {
	out := map[string]mount{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fa, fb := strings.Fields(pre), strings.Fields(post)
		if len(fa) < 5 || len(fb) < 3 {
			continue
		}
		m := mount{point: fa[4], root: fa[3]}
		switch fb[0] {
		case "cgroup2":
			if _, seen := out["cgroup2"]; !seen {
				out["cgroup2"] = m
			}
		case "cgroup":
			for _, o := range strings.Split(fb[2], ",") {
				if _, seen := out[o]; !seen {
					out[o] = m
				}
			}
		}
	}
	return out
}

func relTo(root, p string) string {
	if root == "/" {
		return p
	}
	if r, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// newGroup makes a child group named name below kusaw's own group for
// each controller a limit needs and can have, and writes the limits. The
// controllers it could not use are returned, for rlimits to stand in.
//
// With spare set it may take a group Prewarm made ahead instead (its own
// name then, and its limits when they are the same): making one, or
// writing its limits, waits for the kernel's cgroup lock, which a Prewarm
// may hold through a grace period.
func newGroup(name string, l Limits, spare bool) (*group, []string) {
	ctls := wanted(l)
	if len(ctls) == 0 {
		return nil, nil
	}
	var g *group
	var missing []string
	written := false
	if spare {
		g, missing, written = takeSpare(ctls, l)
	}
	if g == nil {
		g, missing = makeGroup(name, ctls)
	}
	if written {
		return g, missing
	}
	for c, dir := range g.dirs {
		if err := g.write(c, dir, l); err != nil {
			g.removeDir(dir)
			delete(g.dirs, c)
			missing = append(missing, c)
		}
	}
	if len(g.dirs) == 0 {
		return nil, missing
	}
	return g, missing
}

// makeGroup makes the folders of a group for controllers ctls; missing
// are those it could not make.
func makeGroup(name string, ctls []string) (*group, []string) {
	v1, v2, v2ctl := cgroupRoots()
	g := &group{dirs: map[string]string{}}
	var missing []string
	// v2 when it has every controller delegated, else v1 per controller.
	all2 := v2 != ""
	for _, c := range ctls {
		all2 = all2 && v2ctl[c]
	}
	if all2 {
		dir := filepath.Join(v2, name)
		if err := os.Mkdir(dir, 0o755); err == nil {
			g.v2 = true
			for _, c := range ctls {
				g.dirs[c] = dir
			}
		}
	}
	for _, c := range ctls {
		if g.dirs[c] != "" {
			continue
		}
		base, ok := v1[c]
		if !ok {
			missing = append(missing, c)
			continue
		}
		dir := filepath.Join(base, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			missing = append(missing, c)
			continue
		}
		g.dirs[c] = dir
	}
	return g, missing
}

func (g *group) write(c, dir string, l Limits) error {
	w := func(file, v string) error { return os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644) }
	switch {
	case c == "pids":
		return w("pids.max", strconv.Itoa(l.Pids))
	case c == "memory" && g.v2:
		_ = w("memory.swap.max", "0")
		return w("memory.max", strconv.FormatInt(l.Memory, 10))
	case c == "memory":
		if err := w("memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)); err != nil {
			return err
		}
		// With swap accounting, swap counts too: no escape into swap.
		_ = w("memory.memsw.limit_in_bytes", strconv.FormatInt(l.Memory, 10))
		return nil
	case c == "cpu" && g.v2:
		return w("cpu.max", fmt.Sprintf("%d 100000", l.CPU*100000))
	case c == "cpu":
		if err := w("cpu.cfs_period_us", "100000"); err != nil {
			return err
		}
		return w("cpu.cfs_quota_us", strconv.Itoa(l.CPU*100000))
	}
	return nil
}

// add puts pid into the group (each controller's folder).
func (g *group) add(pid int) error {
	var errs []error
	done := map[string]bool{}
	for _, dir := range g.dirs {
		if done[dir] {
			continue
		}
		done[dir] = true
		errs = append(errs, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644))
	}
	placed()
	return errors.Join(errs...)
}

// hit names the limit the group reached: a fork refused (pids) or the
// kernel's OOM killer (memory).
func (g *group) hit() string {
	if dir := g.dirs["pids"]; dir != "" && eventCount(filepath.Join(dir, "pids.events"), "max") > 0 {
		return LimitPids
	}
	if dir := g.dirs["memory"]; dir != "" {
		f := "memory.oom_control"
		if g.v2 {
			f = "memory.events"
		}
		if eventCount(filepath.Join(dir, f), "oom_kill") > 0 {
			return LimitMemory
		}
	}
	return ""
}

func eventCount(file, key string) int64 {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// killAll kills every process in the group (all descendants of the one
// kusaw put there, also those that left its process group) and removes
// the folders.
func (g *group) close() {
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := 0
		for _, dir := range g.dirs {
			for _, pid := range procsOf(dir) {
				left++
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, dir := range g.dirs {
		g.removeDir(dir)
	}
}

func procsOf(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func (g *group) removeDir(dir string) {
	for i := 0; i < 50; i++ {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rlimitsFor applies rlimits to pid for the limits no cgroup enforces:
// RLIMIT_NPROC for pids (not for root, whom the kernel exempts), and
// RLIMIT_DATA for memory. Disk gets RLIMIT_FSIZE (one file cannot
// outgrow it) whatever else counts it.
func rlimitsFor(pid int, l Limits, missing []string) {
	set := func(res int, v uint64) {
		_ = unix.Prlimit(pid, res, &unix.Rlimit{Cur: v, Max: v}, nil)
	}
	for _, c := range missing {
		switch c {
		case "pids":
			// RLIMIT_NPROC counts every task of the user, on the whole
			// machine (a desktop has thousands): the limit is the
			// user's count now plus the attempt's allowance.
			if os.Geteuid() != 0 {
				set(unix.RLIMIT_NPROC, uint64(userTasks(os.Getuid())+l.Pids))
			}
		case "memory":
			set(unix.RLIMIT_DATA, uint64(l.Memory))
		}
	}
	if l.Disk > 0 {
		set(unix.RLIMIT_FSIZE, uint64(l.Disk))
	}
}

// Enforcement says, for each limit, how this machine enforces it for a
// process kusaw starts now (sandbox check --verbose).
func Enforcement() map[string]string {
	out := map[string]string{
		LimitOutput: "counted by kusaw: the process group is killed past it",
		LimitDisk:   "counted by kusaw every 2s over the attempt's tmp and worktrees (and RLIMIT_FSIZE per file)",
	}
	probe := Limits{Pids: 1 << 20, Memory: 1 << 50, CPU: 1024}
	g, missing := newGroup(fmt.Sprintf("kusaw-probe-%d", os.Getpid()), probe, false)
	if g != nil {
		for c, dir := range g.dirs {
			kind := "cgroup v1 " + c + " controller"
			if g.v2 {
				kind = "cgroup v2 " + c + " controller"
			}
			out[c] = kind + " (" + filepath.Dir(dir) + ")"
		}
		g.close()
	}
	for _, c := range missing {
		switch c {
		case "pids":
			if os.Geteuid() == 0 {
				out[c] = "not enforced (no usable pids cgroup, and root is exempt from RLIMIT_NPROC)"
			} else {
				out[c] = "RLIMIT_NPROC: this user's processes and threads when the attempt starts, plus the limit"
			}
		case "memory":
			out[c] = "RLIMIT_DATA per process (no usable memory cgroup)"
		case "cpu":
			out[c] = "not enforced (no usable cpu cgroup)"
		}
	}
	return out
}

// totalMemory is MemTotal from /proc/meminfo (0 when unknown: no limit).
func totalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// hold makes cmd wait, before it runs its program, until release is
// called: kusaw puts the process into its cgroup and sets its rlimits in
// between, so nothing it starts (bwrap forks at once) runs outside them.
// /bin/sh reads one line from a pipe and then execs the program.
func hold(cmd *exec.Cmd) (release func(), err error) {
	// A program that cannot start is left to Start, whose error says so
	// (the shell would turn it into exit status 126 or 127).
	prog := cmd.Path
	if !filepath.IsAbs(prog) && cmd.Dir != "" {
		prog = filepath.Join(cmd.Dir, prog) // how Start resolves it
	}
	if !strings.Contains(cmd.Path, "/") {
		prog = "" // sh would search PATH where Start does not
	}
	if fi, err := os.Stat(prog); prog == "" || err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 || cmd.Err != nil {
		return nil, fmt.Errorf("not an executable file: %s", cmd.Path)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	fd := 3 + len(cmd.ExtraFiles)
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	release = func() {
		_, _ = w.Write([]byte("go\n"))
		w.Close()
	}
	if isReaped(cmd) {
		// The reaper holds itself (reapHeldArg): no shell in between.
		cmd.Args = append([]string{cmd.Args[0], reapHeldArg, strconv.Itoa(fd)}, cmd.Args[2:]...)
		return release, nil
	}
	args := append([]string{"/bin/sh", "-c", fmt.Sprintf(`read _ <&%d || exit 126; exec "$@" %d<&-`, fd, fd), "kusaw-hold", prog}, cmd.Args[1:]...)
	cmd.Path, cmd.Args = "/bin/sh", args
	return release, nil
}

// ReapStaleGroups ends what a kusaw that died (kill -9) left in the child
// groups it made: a group kusaw-<pid>-<n> whose kusaw <pid> no longer runs
// has every process in it killed and is removed. Processes that left the
// step's process group (setsid) are in its cgroup all the same. Groups of
// a kusaw still running are left alone. It returns how many groups it
// removed.
func ReapStaleGroups() int {
	v1, v2, _ := cgroupRoots()
	roots := map[string]bool{}
	for _, d := range v1 {
		roots[d] = true
	}
	if v2 != "" {
		roots[v2] = true
	}
	n := 0
	for root := range roots {
		entries, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range entries {
			owner, ok := staleOwner(e.Name())
			if !ok || !e.IsDir() || owner == os.Getpid() || Alive(owner) {
				continue
			}
			g := &group{dirs: map[string]string{"": filepath.Join(root, e.Name())}}
			g.close()
			n++
		}
	}
	return n
}

// staleOwner reads the kusaw pid out of a group name kusaw-<pid>-<n>.
func staleOwner(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "kusaw-")
	if !ok {
		return 0, false
	}
	pid, seq, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	p, err := strconv.Atoi(pid)
	if _, err2 := strconv.Atoi(seq); err != nil || err2 != nil || p <= 1 {
		return 0, false
	}
	return p, true
}

// userTasks counts the tasks (threads) whose real uid is uid, as the
// kernel does for RLIMIT_NPROC.
func userTasks(uid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	want := strconv.Itoa(uid)
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		var real string
		threads := 0
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Uid:"); ok {
				if f := strings.Fields(v); len(f) > 0 {
					real = f[0]
				}
			} else if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				threads, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		if real == want {
			n += threads
		}
	}
	return n
}
