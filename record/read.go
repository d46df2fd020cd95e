package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/kusaw/kusaw/status"
)

// RunExitCode is kusaw run's exit status for a run, decided from its
// records alone (atts: every attempt, the helpers' too), so a run executed
// in-process, followed through serve, or with attempts on cluster workers
// exits alike. cmd/kusaw's exitCode calls it for a finished run.
func RunExitCode(rec *RunRecord, atts []*AttemptRecord) status.ExitCode {
	switch rec.State {
	case status.RunSucceeded:
		return status.ExitOK
	case status.RunCanceled, status.RunInterrupted:
		return status.ExitInterrupted
	case status.RunQueued, status.RunRunning:
		return status.ExitOK
	}
	for _, a := range atts {
		if a.Outcome == status.OutcomeRefused && IsSandboxReason(a.Reason) {
			return status.ExitSandboxUnavailable
		}
	}
	return status.ExitRunFailed
}

// AttemptExitCode is kusaw sandbox exec's exit status for its one
// attempt: the command's own status, 128+n when signal n ended it, 4 when
// the attempt was refused (the sandbox cannot run, or its plan or a
// secret was refused), 130 when it was canceled, 1 for any other failure.
func AttemptExitCode(a *AttemptRecord) status.ExitCode {
	if a.Outcome == status.OutcomeRefused {
		return status.ExitSandboxUnavailable
	}
	for _, p := range a.Processes {
		if p.Exit != nil && *p.Exit != 0 {
			return status.ExitCode(*p.Exit)
		}
		if p.Signal != "" {
			return status.ExitCode(128 + signalNumber(p.Signal))
		}
	}
	switch a.Outcome {
	case status.OutcomePassed:
		return status.ExitOK
	case status.OutcomeCanceled:
		return status.ExitInterrupted
	}
	return status.ExitRunFailed
}

// signalNumber turns a recorded signal (syscall.Signal's String, such as
// "killed") back into its number.
func signalNumber(name string) int {
	for i := 1; i < 65; i++ {
		if syscall.Signal(i).String() == name {
			return i
		}
	}
	return 1
}

// logPath accepts the run's own log files only: events.jsonl, and an
// attempt's events, egress, setup, stdout and stderr logs.
var logPath = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(events\.jsonl|steps/[^/]+/[0-9]+/(events\.jsonl|egress\.log|setup\.log|std(out|err)(-[^/]+)?\.log))$`)
})

// ValidLogPath reports whether p names a log the API serves.
func ValidLogPath(p string) bool {
	if !logPath().MatchString(p) || path.Clean(p) != p {
		return false
	}
	segs := strings.Split(p, "/")
	for _, seg := range segs {
		if seg == ".." || seg == "." {
			return false
		}
	}
	return len(segs) == 1 || ValidName(segs[1])
}

// ErrBadLogPath is returned for a log path outside the run's logs.
var ErrBadLogPath = errors.New("not a log of the run")

// HostEgress is one host of an attempt's egress.
type HostEgress struct {
	Host        string `json:"host"`
	Connections int    `json:"connections"`
	Refusals    int    `json:"refusals"`
	BytesUp     int64  `json:"bytes_up"`
	BytesDown   int64  `json:"bytes_down"`
}

// EgressReport is GET .../attempts/{step}/{n}/egress.
type EgressReport struct {
	Source string       `json:"source"` // "summary" (egress.summary), "log" (egress.log) or "none"
	Hosts  []HostEgress `json:"hosts"`
}

// AttemptEgress reads an attempt's egress per host: from its egress.summary
// event when it has one, else by adding up egress.log.
func AttemptEgress(dir string) EgressReport {
	rep := EgressReport{Source: "none", Hosts: []HostEgress{}}
	if f, err := os.Open(filepath.Join(dir, EventsFile)); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if !bytes.Contains(sc.Bytes(), []byte(EvEgressSummary)) {
				continue
			}
			var ev Event
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Type == EvEgressSummary {
				if hs := hostsFrom(ev.Data); hs != nil {
					rep = EgressReport{Source: "summary", Hosts: hs}
				}
			}
		}
		f.Close()
		if rep.Source == "summary" {
			return rep
		}
	}
	f, err := os.Open(filepath.Join(dir, EgressLogFile))
	if err != nil {
		return rep
	}
	defer f.Close()
	by := map[string]*HostEgress{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		host, _ := field(m, "host").(string)
		if host == "" {
			continue
		}
		h := by[host]
		if h == nil {
			h = &HostEgress{Host: host}
			by[host] = h
		}
		switch strings.ToLower(fmt.Sprint(field(m, "decision"))) {
		case "allow":
			h.Connections++
		case "refuse", "close":
			h.Refusals++
		}
		h.BytesUp += num(field(m, "bytes_up"))
		h.BytesDown += num(field(m, "bytes_down"))
	}
	rep.Source = "log"
	for _, h := range by {
		rep.Hosts = append(rep.Hosts, *h)
	}
	sort.Slice(rep.Hosts, func(i, j int) bool { return rep.Hosts[i].Host < rep.Hosts[j].Host })
	return rep
}

// hostsFrom reads the per-host list of an egress.summary event, whatever
// the case of its keys.
func hostsFrom(d map[string]any) []HostEgress {
	list, _ := field(d, "hosts").([]any)
	if list == nil {
		return nil
	}
	out := []HostEgress{}
	for _, it := range list {
		m, _ := it.(map[string]any)
		if m == nil {
			continue
		}
		host, _ := field(m, "host").(string)
		out = append(out, HostEgress{Host: host, Connections: int(num(field(m, "connections"))), Refusals: int(num(field(m, "refusals"))),
			BytesUp: num(field(m, "bytes_up")), BytesDown: num(field(m, "bytes_down"))})
	}
	return out
}

// field looks a key up ignoring case and underscores: bytes_up, BytesUp.
func field(m map[string]any, key string) any {
	norm := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	k := norm(key)
	for mk, v := range m {
		if norm(mk) == k {
			return v
		}
	}
	return nil
}

func num(v any) int64 {
	n, _ := number(v)
	return n
}

// IsSandboxReason reports the refusals that mean "this machine cannot run
// the backend" (exit 4); a missing token or a refused plan is the
// factory's to fix and fails the run like any step (exit 1).
func IsSandboxReason(r status.Reason) bool {
	switch r {
	case status.ReasonSandboxUnavailable, status.ReasonSandboxUntrusted, status.ReasonSandboxNoUserNS:
		return true
	}
	return false
}
