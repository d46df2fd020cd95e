package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kusaw/kusaw/status"
)

// checkCacheTTL bounds how long a passed check is trusted without probing.
const checkCacheTTL = 12 * time.Hour

// CachedCheck is Check, remembered on disk for a while when it passed, so
// a short command (kusaw sandbox exec -- true) does not pay for starting
// bwrap twice. The cache is keyed by everything that decides the answer:
// the backend binary (path, size, mtime), the user, the kernel boot, and
// the user-namespace switches. A failed check is never cached. If the
// machine changed anyway, the real start fails and nothing runs outside
// the sandbox: the cache can cost a clear reason, never the protection.
func CachedCheck() CheckResult {
	key := checkCacheKey()
	path := checkCachePath()
	if key != "" && path != "" {
		if b, err := os.ReadFile(path); err == nil {
			if r, ok := decodeCheckCache(b, key, time.Now()); ok {
				rememberVersion(r.Path, r.Version)
				return r
			}
		}
	}
	res := Check()
	if res.Available && key != "" && path != "" {
		b := encodeCheckCache(key, time.Now(), res)
		if os.MkdirAll(filepath.Dir(path), 0o700) == nil {
			tmp := path + fmt.Sprintf(".%d", os.Getpid())
			if os.WriteFile(tmp, b, 0o600) == nil {
				_ = os.Rename(tmp, path)
			}
		}
	}
	return res
}

// CheckCacheFile is where CachedCheck remembers a passed check: "" for the
// user cache folder, "off" to check every time (kusaw's probe_cache
// setting).
var CheckCacheFile string

func checkCachePath() string { return CacheFile(CheckCacheFile, "sandbox-check") }

// checkCacheKey hashes what a check's answer depends on; "" when any of it
// cannot be read (then nothing is cached).
func checkCacheKey() string {
	h := sha256.New()
	fmt.Fprintf(h, "uid=%d\n", os.Getuid())
	for _, bin := range []string{"/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap", "/usr/bin/sandbox-exec"} {
		if st, err := os.Stat(bin); err == nil {
			fmt.Fprintf(h, "%s %d %d %v\n", bin, st.Size(), st.ModTime().UnixNano(), st.Mode())
		}
	}
	boot := bootID()
	if boot == "" {
		// Not Linux (or no procfs): key on the binary alone for a shorter
		// while is not worth the risk; do not cache.
		if _, serr := os.Stat("/usr/bin/sandbox-exec"); serr != nil {
			return ""
		}
	}
	fmt.Fprintf(h, "boot=%s\n", boot)
	for _, f := range []string{"/proc/sys/user/max_user_namespaces", "/proc/sys/kernel/unprivileged_userns_clone",
		"/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "/proc/sys/user/max_net_namespaces"} {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%s=%s\n", f, strings.TrimSpace(string(b)))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// bootID is this boot's id, read once per process: the remembered check
// and the remembered walk of /etc are used only in the boot they were
// made in; "" when it cannot be read.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if id := strings.TrimSpace(string(b)); err == nil && len(id) == 36 {
		return id
	}
	return ""
})

// rememberVersion primes the per-process version cache from a cached check,
// so Command does not start bwrap --version once more.
func rememberVersion(path, version string) {
	parts := strings.Split(version, ".")
	if path == "" || len(parts) < 2 {
		return
	}
	var v [2]int
	if _, err := fmt.Sscan(parts[0], &v[0]); err != nil {
		return
	}
	if _, err := fmt.Sscan(parts[1], &v[1]); err != nil {
		return
	}
	versionMu.Lock()
	if _, ok := versionCache[path]; !ok {
		versionCache[path] = v
	}
	versionMu.Unlock()
}

// The remembered check is a few lines of "name value", each value quoted
// as Go quotes a string: read without encoding/json, whose first use cost
// kusaw sandbox exec 0.3-0.5 ms at every start (docs/benchmarks.md, "Lean
// start, seventh pass (issue 25)").
const checkCacheHeader = "kusaw sandbox check 1"

func encodeCheckCache(key string, at time.Time, r CheckResult) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nkey %q\nat %q\nbackend %q\npath %q\nversion %q\navailable %t\nreason %q\nmessage %q\nfix %q\n",
		checkCacheHeader, key, at.UTC().Format(time.RFC3339Nano), r.Backend, r.Path, r.Version, r.Available, string(r.Reason), r.Msg, r.Fix)
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note %q\n", n)
	}
	return []byte(b.String())
}

// decodeCheckCache returns the remembered result when b is one, for key,
// from less than checkCacheTTL before now, and available; anything else
// is not taken.
func decodeCheckCache(b []byte, key string, now time.Time) (CheckResult, bool) {
	lines := strings.Split(string(b), "\n")
	if len(lines) < 2 || lines[0] != checkCacheHeader || lines[len(lines)-1] != "" {
		return CheckResult{}, false
	}
	var r CheckResult
	seen := map[string]bool{}
	for _, l := range lines[1 : len(lines)-1] {
		name, q, _ := strings.Cut(l, " ")
		if name == "available" {
			if q != "true" {
				return CheckResult{}, false
			}
			r.Available = true
			seen[name] = true
			continue
		}
		v, err := strconv.Unquote(q)
		if err != nil || seen[name] && name != "note" {
			return CheckResult{}, false
		}
		seen[name] = true
		switch name {
		case "key":
			if v != key {
				return CheckResult{}, false
			}
		case "at":
			at, err := time.Parse(time.RFC3339Nano, v)
			if err != nil || now.Sub(at) >= checkCacheTTL {
				return CheckResult{}, false
			}
		case "backend":
			r.Backend = v
		case "path":
			r.Path = v
		case "version":
			r.Version = v
		case "reason":
			r.Reason = status.Reason(v)
		case "message":
			r.Msg = v
		case "fix":
			r.Fix = v
		case "note":
			r.Notes = append(r.Notes, v)
		default:
			return CheckResult{}, false
		}
	}
	if !seen["key"] || !seen["at"] || !r.Available {
		return CheckResult{}, false
	}
	return r, true
}
