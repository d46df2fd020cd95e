//go:build darwin

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/status"
)

// GraceDelay is how long Command's process may take after SIGTERM before
// it is killed.
var GraceDelay = 5 * time.Second

// Command returns the command that runs argv under the plan on macOS, as
// the bubblewrap Command does on Linux: the caller sets the streams,
// starts and waits, then calls KillGroup: macOS has no PID namespace, so
// a background child outlives the step otherwise. The only loopback port
// admitted is the plan's ProxyPort; no pseudo-terminal (use
// SeatbeltCommand with a terminal).
func Command(ctx context.Context, p *Plan, argv []string) (*exec.Cmd, error) {
	c, err := SeatbeltCommand(ctx, p, argv, SeatbeltOptions{}, nil)
	if err != nil {
		return nil, err
	}
	return c.Cmd, nil
}

// SeatbeltCmd is a step started under /usr/bin/sandbox-exec. Use its Start,
// Wait and Run (not those of the embedded exec.Cmd): with a terminal they
// also relay between it and the step's own pseudo-terminal.
type SeatbeltCmd struct {
	*exec.Cmd
	Profile *SeatbeltProfile
	Home    string // the fresh HOME, inside the attempt's temp folder

	term          *os.File // the caller's terminal, when the step has a pty
	master, slave *os.File
	restore       func()
	outDone       chan struct{}
	stopWinch     func()
}

// SeatbeltCommand returns the command that runs argv under the plan on
// macOS. sandbox-exec is taken only from /usr/bin. The step gets a fresh,
// empty HOME in the attempt's temp folder (removed with it), its own
// process group (a session too, with its own pty), and on ctx's end the
// group gets SIGTERM, then SIGKILL after GraceDelay. With a pty, do not
// add Setpgid to SysProcAttr: a session leader cannot change its group.
//
// term: when it is a terminal, the step's stdin, stdout and stderr are a
// new pseudo-terminal that kusaw relays to term, so whatever the step
// pushes into its terminal stays in it. Otherwise pass nil and set the
// streams on the returned command as usual.
func SeatbeltCommand(ctx context.Context, p *Plan, argv []string, opt SeatbeltOptions, term *os.File) (*SeatbeltCmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("sandbox: no command to run")
	}
	if err := checkSystemBinary(SandboxExecPath); err != nil {
		return nil, &status.Error{Reason: status.ReasonSandboxUntrusted, Msg: err.Error(),
			Fix: "sandbox-exec ships with macOS in /usr/bin; reinstall macOS or repair the system folder's permissions"}
	}
	home, err := seatbeltHome(p)
	if err != nil {
		return nil, err
	}
	if err := p.Prepare(); err != nil {
		return nil, err
	}
	// Fresh and empty for every start: nothing a previous start left there.
	if err := os.RemoveAll(home); err != nil {
		return nil, fmt.Errorf("sandbox: clearing the fresh HOME %s: %w", home, err)
	}
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: creating the fresh HOME %s: %w", home, err)
	}
	c := &SeatbeltCmd{Home: home}
	if opt.UserTempDir == "" {
		opt.UserTempDir = userTempDir()
	}
	if term != nil && isTerminal(term) {
		master, slave, name, err := openPTY()
		if err != nil {
			return nil, fmt.Errorf("sandbox: a pseudo-terminal for the step: %w", err)
		}
		c.term, c.master, c.slave = term, master, slave
		opt.TTY = name
	}
	prof, err := p.Seatbelt(opt)
	if err != nil {
		c.closePTY()
		return nil, err
	}
	c.Profile = prof
	args := append(prof.Args(), "--")
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, SandboxExecPath, args...)
	cmd.Env = seatbeltEnv(p, home)
	cmd.Dir = p.Workdir
	if c.slave != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = c.slave, c.slave, c.slave
		// A session of its own whose controlling terminal is the new pty
		// (fd 0 in the child): the step never holds kusaw's terminal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	} else {
		// A process group of its own (the engine adds Setpgid too, which a
		// session leader could not take: so no Setsid here). The profile
		// denies /dev/tty and every other terminal, so the step cannot
		// reach kusaw's terminal and push keys into it.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = GraceDelay
	c.Cmd = cmd
	return c, nil
}

// Start starts the step and, with a pty, the relay.
func (c *SeatbeltCmd) Start() error {
	if c.master == nil {
		return c.Cmd.Start()
	}
	if ws, err := unix.IoctlGetWinsize(int(c.term.Fd()), unix.TIOCGWINSZ); err == nil {
		unix.IoctlSetWinsize(int(c.master.Fd()), unix.TIOCSWINSZ, ws)
	}
	restore, err := makeRaw(c.term)
	if err != nil {
		c.closePTY()
		return fmt.Errorf("sandbox: terminal: %w", err)
	}
	c.restore = restore
	if err := c.Cmd.Start(); err != nil {
		c.restore()
		c.closePTY()
		return err
	}
	// Only the step holds the pty's terminal side now: when it and its
	// children are gone, reads from the master end.
	c.slave.Close()
	c.slave = nil
	c.outDone = make(chan struct{})
	go func() {
		io.Copy(c.term, c.master)
		close(c.outDone)
	}()
	// Input: stops at kusaw's exit at the latest (a read on a terminal
	// cannot be interrupted portably).
	go io.Copy(c.master, c.term)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	var once sync.Once
	c.stopWinch = func() { once.Do(func() { signal.Stop(winch); close(done) }) }
	go func() {
		for {
			select {
			case <-winch:
				if ws, err := unix.IoctlGetWinsize(int(c.term.Fd()), unix.TIOCGWINSZ); err == nil {
					unix.IoctlSetWinsize(int(c.master.Fd()), unix.TIOCSWINSZ, ws)
				}
			case <-done:
				return
			}
		}
	}()
	return nil
}

// Wait waits for the step, ends what is left of its process group (macOS
// has no PID namespace to end it with), then waits for its last output
// and restores the terminal.
func (c *SeatbeltCmd) Wait() error {
	err := c.Cmd.Wait()
	KillGroup(c.Cmd)
	if c.master != nil {
		// A detached process may keep the pty open: do not wait for it.
		select {
		case <-c.outDone:
		case <-time.After(500 * time.Millisecond):
		}
		c.stopWinch()
		c.restore()
		c.master.Close()
	}
	return err
}

// Run starts the step and waits for it.
func (c *SeatbeltCmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

func (c *SeatbeltCmd) closePTY() {
	for _, f := range []*os.File{c.master, c.slave} {
		if f != nil {
			f.Close()
		}
	}
}

func init() { kernelSpelling = darwinSpelling }

var (
	userTempOnce sync.Once
	userTemp     string
)

// userTempDir is the user's DARWIN_USER_TEMP_DIR, resolved ("" if unknown).
func userTempDir() string {
	userTempOnce.Do(func() {
		out, err := exec.Command("/usr/bin/getconf", "DARWIN_USER_TEMP_DIR").Output()
		if err != nil {
			return
		}
		d := strings.TrimSpace(string(out))
		if r, err := filepath.EvalSymlinks(d); err == nil && filepath.IsAbs(r) {
			userTemp = filepath.Clean(r)
		}
	})
	return userTemp
}

// darwinSpelling asks the kernel (fcntl F_GETPATH) for the path of the
// longest existing prefix of p and puts the rest back on.
func darwinSpelling(p string) []string {
	rest := ""
	cur := p
	for cur != "/" {
		if _, err := os.Lstat(cur); err == nil {
			break
		}
		rest = "/" + filepath.Base(cur) + rest
		cur = filepath.Dir(cur)
	}
	if cur == "/" {
		return nil
	}
	fd, err := unix.Open(cur, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	if _, _, e := unix.Syscall(unix.SYS_FCNTL, uintptr(fd), uintptr(unix.F_GETPATH), uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return nil
	}
	k := string(buf[:max(0, bytes.IndexByte(buf, 0))])
	if k == "" || k+rest == p {
		return nil
	}
	return []string{k + rest}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TIOCGETA)
	return err == nil
}

// openPTY opens a new pseudo-terminal pair (posix_openpt, grantpt,
// unlockpt and ptsname, as their ioctls).
func openPTY() (master, slave *os.File, name string, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, "", err
	}
	fail := func(e error) (*os.File, *os.File, string, error) {
		unix.Close(mfd)
		return nil, nil, "", e
	}
	if err := unix.IoctlSetInt(mfd, unix.TIOCPTYGRANT, 0); err != nil {
		return fail(fmt.Errorf("grantpt: %w", err))
	}
	if err := unix.IoctlSetInt(mfd, unix.TIOCPTYUNLK, 0); err != nil {
		return fail(fmt.Errorf("unlockpt: %w", err))
	}
	buf := make([]byte, 128) // TIOCPTYGNAME fills a 128-byte buffer
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), uintptr(unix.TIOCPTYGNAME), uintptr(unsafe.Pointer(&buf[0]))); e != 0 {
		return fail(fmt.Errorf("ptsname: %w", e))
	}
	name = string(buf[:max(0, bytes.IndexByte(buf, 0))])
	if !strings.HasPrefix(name, "/dev/") {
		return fail(fmt.Errorf("ptsname returned %q", name))
	}
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("opening %s: %w", name, err))
	}
	return os.NewFile(uintptr(mfd), "/dev/ptmx"), os.NewFile(uintptr(sfd), name), name, nil
}

// makeRaw puts the terminal in raw mode (keys go to the step's pty, which
// does the line editing and signals) and returns how to restore it.
func makeRaw(f *os.File) (func(), error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TIOCGETA)
	if err != nil {
		return nil, err
	}
	t := *old
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	if err := unix.IoctlSetTermios(fd, unix.TIOCSETA, &t); err != nil {
		return nil, err
	}
	return func() { unix.IoctlSetTermios(fd, unix.TIOCSETA, old) }, nil
}

// CheckSeatbelt says whether this Mac can run the backend: a trusted
// /usr/bin/sandbox-exec that accepts a profile with every rule kind kusaw
// writes, and enforces it (a write the profile denies fails).
func CheckSeatbelt() CheckResult {
	res := CheckResult{Backend: "seatbelt", Path: SandboxExecPath}
	if v, err := unix.Sysctl("kern.osproductversion"); err == nil {
		res.Version = "macOS " + v
		if major, _, _ := strings.Cut(v, "."); len(major) < 2 || major < "14" {
			res.Notes = append(res.Notes, "kusaw's macOS backend is meant for macOS 14 and later; this is "+v)
		}
	}
	if _, err := os.Lstat(SandboxExecPath); err != nil {
		res.Reason, res.Msg, res.Fix = status.ReasonSandboxUnavailable, SandboxExecPath+" is missing",
			"sandbox-exec ships with macOS 14 and later; update macOS or set the step's sandbox to off"
		return res
	}
	if err := checkSystemBinary(SandboxExecPath); err != nil {
		res.Reason, res.Msg, res.Fix = status.ReasonSandboxUntrusted, err.Error(),
			"sandbox-exec ships with macOS in /usr/bin; repair the system folder's permissions"
		return res
	}
	fail := func(msg string) CheckResult {
		res.Reason, res.Msg = status.ReasonSandboxUnavailable, msg
		res.Fix = "report the message with what `log show --last 2m --style compact --predicate 'eventMessage CONTAINS \"" + SeatbeltDenyMessage +
			"\"'` prints (each refusal of kusaw's profile is tagged); set the step's sandbox to off meanwhile"
		return res
	}
	dir, err := os.MkdirTemp("", "kusaw-seatbelt-check-")
	if err != nil {
		return fail("a temp folder for the probe: " + err.Error())
	}
	defer os.RemoveAll(dir)
	if dir, err = realPath(dir); err != nil {
		return fail(err.Error())
	}
	plan := seatbeltProbePlan(dir)
	for _, d := range []string{"wt", "tmp", "home"} {
		os.MkdirAll(dir+"/"+d, 0o700)
	}
	os.WriteFile(dir+"/wt/.git", []byte("gitdir: x\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Both network shapes, a terminal and local binding: every rule the
	// generator can write is compiled once by this macOS.
	for _, network := range []string{NetworkAllowlist, NetworkOpen} {
		plan.Network = network
		prof, err := plan.Seatbelt(SeatbeltOptions{Ports: []int{9}, LocalBind: true, TTY: "/dev/ttys000", UserTempDir: userTempDir()})
		if err != nil {
			return fail("the probe's profile: " + err.Error())
		}
		run := func(script string) (string, error) {
			args := append(prof.Args(), "--", "/bin/sh", "-c", script)
			cmd := exec.CommandContext(ctx, SandboxExecPath, args...)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			cmd.Dir = dir + "/wt"
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			return strings.TrimSpace(out.String()), err
		}
		if out, err := run("echo ok > " + shellQuote(dir+"/wt/written")); err != nil {
			return fail("sandbox-exec refused kusaw's profile (network " + network + "): " + firstLine(out+" "+err.Error()))
		}
		if _, err := run("echo x > " + shellQuote(dir+"/wt/.git")); err == nil {
			return fail("sandbox-exec ran the probe but did not enforce the profile (a denied write succeeded)")
		}
	}
	res.Available = true
	return res
}

func realPath(p string) (string, error) {
	r := resolve(p)
	if r == "" {
		return "", fmt.Errorf("cannot resolve %s", p)
	}
	return r, nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
