package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Retention is retention: how long and how many finished runs the state
// folder keeps; serve removes the rest (and their kusaw/ branches) on its
// own, kusaw gc on demand (docs/retention.md). Zero is no bound.
type Retention struct {
	MaxAge  time.Duration
	MaxRuns int
}

// MinRetentionAge is the shortest max_age: a shorter one would remove a
// run's records while its author is still reading them.
const MinRetentionAge = time.Hour

// agePattern is what ParseAge takes, for the schema: whole days or weeks,
// or a Go duration.
const agePattern = `^([1-9][0-9]*[dw]|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$`

// ParseAge reads a retention age: a Go duration (90m, 36h) or whole days
// and weeks (30d, 2w).
func ParseAge(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not an age (write 30d, 2w, 36h or 90m)", s)
	unit := time.Duration(0)
	switch {
	case strings.HasSuffix(s, "d"):
		unit = 24 * time.Hour
	case strings.HasSuffix(s, "w"):
		unit = 7 * 24 * time.Hour
	}
	if unit != 0 {
		num := s[:len(s)-1]
		n, err := strconv.Atoi(num)
		if err != nil || n <= 0 || strconv.Itoa(n) != num || n > 100*365 {
			return 0, bad
		}
		return time.Duration(n) * unit, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, bad
	}
	return d, nil
}

func (d *decoder) retention(f *Factory, n *yaml.Node) {
	r := &Retention{}
	for _, fl := range d.fields(n, "retention", []string{"max_age", "max_runs"}) {
		p := join("retention", fl.key)
		switch fl.key {
		case "max_age":
			trace(p, kindText, nil)
			s, ok := d.scalar(fl.value, p)
			if !ok {
				continue
			}
			age, err := ParseAge(s.Value)
			if err != nil {
				d.errf(ECodeBadDuration, s, p, "write an age such as 30d, 2w or 36h", "%s: %v", p, err)
				continue
			}
			if age < MinRetentionAge {
				d.errf(ECodeRetention, s, p, "write "+MinRetentionAge.String()+" or more, such as 30d", "%s: %s would remove runs' records as soon as they end", p, s.Value)
				continue
			}
			r.MaxAge = age
		case "max_runs":
			v := d.integer(fl.value, p)
			if v < 1 && resolve(fl.value).Tag == "!!int" {
				d.errf(ECodeRetention, fl.value, p, "write 1 or more, such as 500", "%s: %d keeps no run", p, v)
				continue
			}
			r.MaxRuns = v
		}
	}
	if *r == (Retention{}) && !d.hasErrorsAt("retention") {
		d.errf(ECodeRetention, n, "retention", "write max_age (such as 30d), max_runs (such as 500), or both; or remove retention:", "retention: names no bound, so it keeps every run")
		return
	}
	f.Retention = r
}

// hasErrorsAt reports whether a finding already names path or a key below.
func (d *decoder) hasErrorsAt(path string) bool {
	for _, f := range d.findings {
		if f.Severity == SevError && (f.Path == path || strings.HasPrefix(f.Path, path+".")) {
			return true
		}
	}
	return false
}

func retentionNode() *schemaNode {
	one := 1
	age := text("remove finished runs that ended longer ago than this: whole days or weeks (30d, 2w) or a Go duration (36h); at least 1h")
	age.pattern = agePattern
	return object("what serve removes on its own, and kusaw gc by default: finished runs' records and their kusaw/ branches beyond these bounds, keeping pinned and delivered runs (docs/retention.md)",
		p("max_age", age),
		p("max_runs", integer("keep at most this many finished runs of the pipelines (pinned, delivered and unfinished runs do not count)", &one, nil)),
	)
}
