package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/kusaw/kusaw/status"
)

// trustedDirs are the only places bwrap is taken from; PATH is never used,
// so a writable folder early in PATH cannot swap the sandbox for a fake.
var trustedDirs = []string{"/usr/bin", "/usr/local/bin", "/bin"}

// FindBwrap returns the path of a trusted bwrap: a regular file owned by
// root and writable by nobody else, in a root-owned folder writable by
// nobody else.
func FindBwrap() (string, error) {
	var why []string
	for _, d := range trustedDirs {
		p := filepath.Join(d, "bwrap")
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := trusted(p, trustedDirs); err != nil {
			why = append(why, err.Error())
			continue
		}
		return p, nil
	}
	if len(why) > 0 {
		return "", &status.Error{Reason: status.ReasonSandboxUntrusted, Msg: strings.Join(why, "; "), Fix: status.ReasonSandboxUntrusted.Info().Fix}
	}
	return "", &status.Error{Reason: status.ReasonSandboxUnavailable,
		Msg: "bubblewrap (bwrap) is not installed in /usr/bin, /usr/local/bin or /bin",
		Fix: "install bubblewrap from the system's packages (apt-get install bubblewrap, dnf install bubblewrap)"}
}

// trusted checks a binary and its folder for ownership and permissions.
func trusted(p string, allowed []string) error {
	check := func(path, what string, wantDir, stickyOK bool) error {
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return fmt.Errorf("%s %s: %v", what, path, err)
		}
		mode := st.Mode & unix.S_IFMT
		if wantDir && mode != unix.S_IFDIR {
			return fmt.Errorf("%s %s is not a folder", what, path)
		}
		if !wantDir && mode != unix.S_IFREG {
			return fmt.Errorf("%s %s is not a regular file (a link or something else)", what, path)
		}
		if st.Uid != 0 {
			return fmt.Errorf("%s %s is owned by uid %d, not root", what, path, st.Uid)
		}
		// A sticky world-writable folder above (/tmp) is fine: nobody else
		// can rename or remove the root-owned folder below it.
		if st.Mode&0o022 != 0 && !(stickyOK && st.Mode&unix.S_ISVTX != 0) {
			return fmt.Errorf("%s %s is writable by group or others (mode %o)", what, path, st.Mode&0o7777)
		}
		return nil
	}
	// The folder may itself be a link (/bin -> usr/bin on merged-/usr
	// systems): check the folder it resolves to, which must be trusted too.
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if err != nil {
		return err
	}
	ok := false
	for _, a := range allowed {
		ok = ok || dir == a
	}
	if !ok {
		return fmt.Errorf("%s resolves to %s, not a system folder", filepath.Dir(p), dir)
	}
	// The folder and every folder above it: whoever can write one of them
	// can swap the binary.
	for d := dir; ; d = filepath.Dir(d) {
		if err := check(d, "folder", true, d != dir); err != nil {
			return err
		}
		if d == "/" || d == filepath.Dir(d) {
			break
		}
	}
	return check(filepath.Join(dir, filepath.Base(p)), "bwrap", false, false)
}

// DataFD is the first descriptor bwrap reads an empty file from: each
// empty-file mount (a missing protected file) is --ro-bind-data with the
// next descriptor from DataFD on, in mount order, so bwrap makes the empty
// read-only file in its own memory and nothing is created on the host for
// it. Command passes them (fd 3 is the environment's --args file).
const DataFD = 4

// Args returns bwrap's arguments for the plan, without the bwrap path and
// without the command: [flags...] "--". The environment is not in it (see
// Command), and the empty-file mounts read descriptors DataFD, DataFD+1, ...
func (p *Plan) Args() []string {
	// --unshare-user (not only --unshare-all's "try") so that
	// --disable-userns can forbid nested user namespaces: a step cannot
	// regain capabilities in a namespace of its own.
	a := []string{"--unshare-all", "--unshare-user", "--disable-userns"}
	if p.Network == NetworkOpen {
		a = append(a, "--share-net")
	}
	a = append(a, "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv")
	fd := DataFD
	for _, m := range p.Mounts {
		switch m.Op {
		case "ro-bind":
			a = append(a, "--ro-bind", m.Src, m.Dst)
		case "empty-file":
			a = append(a, "--perms", "0444", "--ro-bind-data", strconv.Itoa(fd), m.Dst)
			fd++
		case "bind":
			a = append(a, "--bind", m.Src, m.Dst)
		case "symlink":
			a = append(a, "--symlink", m.Src, m.Dst)
		case "tmpfs":
			a = append(a, "--tmpfs", m.Dst)
		case "tmpfs-rw":
			if m.Size > 0 {
				a = append(a, "--size", strconv.FormatInt(m.Size, 10))
			}
			a = append(a, "--perms", "0700", "--tmpfs", m.Dst)
		case "dir":
			a = append(a, "--perms", "0700", "--dir", m.Dst)
		case "dev":
			a = append(a, "--dev", m.Dst)
		case "proc":
			a = append(a, "--proc", m.Dst)
		case "remount-ro":
			a = append(a, "--remount-ro", m.Dst)
		}
	}
	a = append(a, "--chdir", p.Workdir)
	return a
}

// dataFiles counts the empty-file mounts (the descriptors Args refers to).
func (p *Plan) dataFiles() int {
	n := 0
	for _, m := range p.Mounts {
		if m.Op == "empty-file" {
			n++
		}
	}
	return n
}

// envArgs are the --setenv pairs of the plan's environment.
func (p *Plan) envArgs() []string {
	var a []string
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	return a
}

// Prepare creates what the backend needs on disk before a start: the
// attempt's login copies and the temp subfolders (unless the temp folder is
// private to the sandbox, where bwrap makes them).
func (p *Plan) Prepare() error {
	if p.EmptyFile != "" && p.usesEmptyFile() {
		if fi, err := os.Lstat(p.EmptyFile); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
			_ = os.Remove(p.EmptyFile)
			f, err := os.OpenFile(p.EmptyFile, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
			if err != nil {
				return fmt.Errorf("sandbox: creating %s: %w", p.EmptyFile, err)
			}
			f.Close()
		}
	}
	// The attempt's own copies of the agent's login folders.
	if err := p.prepareLogin(); err != nil {
		return err
	}
	if err := p.writeGitExcludes(); err != nil {
		return err
	}
	for _, d := range p.mkdirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("sandbox: creating %s: %w", d, err)
		}
	}
	return nil
}

func (p *Plan) usesEmptyFile() bool { return p.dataFiles() > 0 }

var (
	versionMu    sync.Mutex
	versionCache = map[string][2]int{}
)

// bwrapVersion returns bwrap's major and minor version (0, 0 if unknown),
// asked once per binary path.
func bwrapVersion(bw string) (int, int) {
	versionMu.Lock()
	defer versionMu.Unlock()
	if v, ok := versionCache[bw]; ok {
		return v[0], v[1]
	}
	var v [2]int
	if out, err := exec.Command(bw, "--version").Output(); err == nil {
		s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "bubblewrap"))
		parts := strings.Split(s, ".")
		if len(parts) >= 2 {
			v[0], _ = strconv.Atoi(parts[0])
			v[1], _ = strconv.Atoi(parts[1])
		}
	}
	versionCache[bw] = v
	return v[0], v[1]
}

// withoutPerms drops the --perms OCTAL pairs for a bwrap older than 0.5
// (its folders and files then get bwrap's default modes).
func withoutPerms(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if args[i] == "--perms" && i+1 < len(args) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// permsSupported: --perms appeared in bubblewrap 0.5.
func permsSupported(bw string) bool {
	maj, min := bwrapVersion(bw)
	return maj > 0 || min >= 5
}

// disableUsernsSupported: --disable-userns appeared in bubblewrap 0.8.
func disableUsernsSupported(bw string) bool {
	maj, min := bwrapVersion(bw)
	return maj > 0 || min >= 8
}
