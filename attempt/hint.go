package attempt

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"

	"github.com/kusaw/kusaw/egress"
	"github.com/kusaw/kusaw/record"
	"github.com/kusaw/kusaw/status"
)

// What a failed attempt's fix can say beyond its reason's default: the
// host the proxy refused (when a refusal is what the step tripped on most
// likely) or the cache a tool could not create in the sandbox's read-only
// home. Both are told from what the attempt itself recorded.

// cacheErrors are the messages of tools that found no writable home for
// their cache, by the cache preset that fixes them; compiled on first use,
// not at every start of kusaw.
var cacheErrors = sync.OnceValue(func() []cacheError {
	return []cacheError{
		{"go", "go's module and build caches", regexp.MustCompile(`(?i)could not create module cache|failed to initialize build cache|GOCACHE is not defined|mkdir \S*/go(/pkg/mod)?: read-only file system`)},
		{"npm", "npm's cache", regexp.MustCompile(`(?i)(ENOENT|EROFS|EACCES)[^\n]*mkdir '[^'\n]*/\.npm|\.npm[^\n]*read-only file system`)},
		{"pip", "pip's cache", regexp.MustCompile(`(?i)read-only file system:? '[^'\n]*/\.cache/pip`)},
		{"cargo", "cargo's registry", regexp.MustCompile(`(?i)(failed to create directory|read-only file system)[^\n]*/\.cargo|/\.cargo[^\n]*read-only file system`)},
	}
})

type cacheError struct {
	preset string
	what   string
	re     *regexp.Regexp
}

// hintTail is how much of the end of a stderr.log the hint reads.
const hintTail = 64 << 10

// refusedHost is the first connection the proxy refused because no
// allowlist entry named it.
type refusedHost struct {
	host string
	port int
	// local: a loopback port (localhost:PORT entries).
	local bool
}

// notAllowed reports whether d was refused for want of an allow entry.
func notAllowed(d egress.Decision) bool {
	switch d.Reason {
	case egress.ReasonNotAllowed, egress.ReasonPortNotAllowed, egress.ReasonLocalPort:
		return true
	}
	return false
}

// hintedFix is the fix a failed attempt's record gets: a refused host's
// allow entry, a missing cache, else the reason's own fix with the run,
// step and attempt filled in.
func (a *Attempt) hintedFix(r status.Reason) string {
	fill := status.Fill(r.Info().Fix, map[string]string{"RUN": a.spec.Run, "STEP": a.stepRef(), "PROVIDER": a.step.Provider})
	if !hintable(r) {
		return fill
	}
	if h := a.firstRefused(); h != nil {
		entry := h.host
		if h.local {
			entry = "localhost:" + strconv.Itoa(h.port)
		} else if h.port != 443 {
			entry = h.host + ":" + strconv.Itoa(h.port)
		}
		return fmt.Sprintf("the egress proxy refused %s:%d; if the step needs it, add %s to steps.%s.sandbox.egress.allow (kusaw egress check %s --step %s explains the decision)",
			h.host, h.port, entry, a.step.ID, entry, a.step.ID)
	}
	if c := a.missingCache(); c != "" {
		return c
	}
	return fill
}

// stepRef is what kusaw logs needs after --step: the step, and the
// attempt when it is not the first.
func (a *Attempt) stepRef() string {
	if a.n > 1 {
		return a.step.ID + " --attempt " + strconv.Itoa(a.n)
	}
	return a.step.ID
}

// hintable: reasons where what the process printed or tried explains the
// failure (not kusaw's own refusals, limits or cancels).
func hintable(r status.Reason) bool {
	switch r {
	case status.ReasonStepExitNonzero, status.ReasonProviderError, status.ReasonProviderNoResult, status.ReasonProviderExitLied:
		return true
	}
	return false
}

func (a *Attempt) firstRefused() *refusedHost {
	o := a.egress
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first
}

// missingCache reads the end of each process's stderr.log for a tool that
// could not create its cache, and names the cache preset that gives it one
// (unless the step has that cache already).
func (a *Attempt) missingCache() string {
	have := map[string]bool{}
	for _, c := range a.f.StepCaches(a.step) {
		have[c.Name] = true
	}
	names := []string{}
	for _, p := range a.rec.Processes {
		if p.Stderr != "" {
			names = append(names, p.Stderr)
		}
	}
	if len(names) == 0 {
		names = append(names, record.StderrFile)
	}
	for _, n := range names {
		tail := readTail(filepath.Join(a.dir, n), hintTail)
		for _, ce := range cacheErrors() {
			if have[ce.preset] || !ce.re.Match(tail) {
				continue
			}
			return fmt.Sprintf("the sandbox's home is read-only, so %s could not be created: add caches: [%s] to factory.yaml (or to steps.%s) and run again (kusaw logs %s --step %s shows the error)",
				ce.what, ce.preset, a.step.ID, a.spec.Run, a.stepRef())
		}
	}
	return ""
}

// readTail is the last n bytes of a file (nil when it cannot be read).
func readTail(path string, n int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		if _, err := f.Seek(fi.Size()-n, io.SeekStart); err != nil {
			return nil
		}
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return b
}
