package config

import (
	"fmt"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Limits bound what an attempt (on a step) or a whole run (on a pipeline)
// may use. A zero field is no limit.
type Limits struct {
	CostUSD  float64       // USD, from the provider's reported cost
	Tokens   int64         // every token the provider counted (input, output, cache)
	Turns    int           // agent turns (API round trips)
	Duration time.Duration // wall time
}

// Empty reports whether no limit is set.
func (l *Limits) Empty() bool {
	return l == nil || l.CostUSD == 0 && l.Tokens == 0 && l.Turns == 0 && l.Duration == 0
}

// LimitKeys are the keys of a limits: map.
var LimitKeys = []string{"cost_usd", "tokens", "turns", "duration"}

// DefaultExitGrace is how long an agent may take to exit by itself after
// its result event (providers.<name>.exit_grace).
const DefaultExitGrace = 5 * time.Second

// limits decodes {cost_usd, tokens, turns, duration}; nil when empty.
func (d *decoder) limits(n *yaml.Node, path string) *Limits {
	l := &Limits{}
	for _, fl := range d.fields(n, path, LimitKeys) {
		kp := join(path, fl.key)
		switch fl.key {
		case "cost_usd":
			trace(kp, kindNumber, nil)
			s, ok := d.scalar(fl.value, kp)
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(s.Value, 64)
			if (s.Tag != "!!float" && s.Tag != "!!int") || err != nil || v <= 0 {
				d.errf(ECodeBadValue, s, kp, "write a positive amount in USD such as 2.50", "%s must be a positive amount in USD, not %q", kp, s.Value)
				continue
			}
			l.CostUSD = v
		case "tokens", "turns":
			v := d.integer(fl.value, kp)
			if v <= 0 {
				if s, ok := d.scalar(fl.value, kp); ok && s.Tag == "!!int" {
					d.errf(ECodeBadValue, s, kp, "write a positive whole number", "%s must be above 0", kp)
				}
				continue
			}
			if fl.key == "tokens" {
				l.Tokens = int64(v)
			} else {
				l.Turns = v
			}
		case "duration":
			l.Duration = d.duration(fl.value, kp)
		}
	}
	if l.Empty() {
		return nil
	}
	return l
}

// String names the limits set, for messages: "cost_usd 2.5, turns 30".
func (l *Limits) String() string {
	if l.Empty() {
		return "none"
	}
	var s string
	add := func(k, v string) {
		if s != "" {
			s += ", "
		}
		s += k + " " + v
	}
	if l.CostUSD > 0 {
		add("cost_usd", strconv.FormatFloat(l.CostUSD, 'f', -1, 64))
	}
	if l.Tokens > 0 {
		add("tokens", fmt.Sprint(l.Tokens))
	}
	if l.Turns > 0 {
		add("turns", fmt.Sprint(l.Turns))
	}
	if l.Duration > 0 {
		add("duration", l.Duration.String())
	}
	return s
}
