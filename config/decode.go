package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// decoder walks the YAML node tree by hand so that every value keeps its
// position and every unknown key, wrong type and duplicate is reported
// instead of silently ignored.
type decoder struct {
	file     string
	findings Findings
	pos      map[string]Pos
	// fac is the factory being decoded: what later parts check against
	// what earlier parts defined (a candidate's provider).
	fac *Factory
}

func (d *decoder) add(sev Severity, code string, n *yaml.Node, path, fix, format string, args ...any) {
	f := Finding{Code: code, Severity: sev, Path: path, Message: fmt.Sprintf(format, args...), Fix: fix, File: d.file}
	if n != nil {
		f.Line, f.Column = n.Line, n.Column
	}
	d.findings = append(d.findings, f)
}

func (d *decoder) errf(code string, n *yaml.Node, path, fix, format string, args ...any) {
	d.add(SevError, code, n, path, fix, format, args...)
}

func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return "a scalar (" + strings.TrimPrefix(n.Tag, "!!") + ")"
	}
	return "something else"
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// decodeTrace, when set (by the schema's test), is told of every value the
// decoder reads: its key path, how it reads it, and for maps and enums the
// keys or words it accepts. Nil in kusaw itself.
var decodeTrace func(path string, kind nodeKind, accepted []string)

func trace(path string, kind nodeKind, accepted []string) {
	if decodeTrace != nil {
		decodeTrace(path, kind, accepted)
	}
}

// field is one key of a mapping with its value node.
type field struct {
	key   string
	keyN  *yaml.Node
	value *yaml.Node
}

// fields checks that n is a mapping, reports duplicate keys and keys not in
// allowed (nil allows any key), and returns the fields in file order.
func (d *decoder) fields(n *yaml.Node, path string, allowed []string) []field {
	if allowed != nil {
		trace(path, kindObject, allowed)
	} else {
		trace(path, kindMap, nil)
	}
	n = resolve(n)
	if n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		d.errf(ECodeType, n, path, "write "+displayPath(path)+" as a map of key: value lines", "%s must be a map, not %s", displayPath(path), kindName(n))
		return nil
	}
	seen := map[string]bool{}
	var out []field
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		key := k.Value
		if k.Kind != yaml.ScalarNode {
			d.errf(ECodeType, k, path, "use a plain string as the key", "a key under %s must be a string", displayPath(path))
			continue
		}
		kp := join(path, key)
		if seen[key] {
			d.errf(ECodeDuplicate, k, kp, "remove one of them", "%s is defined twice", kp)
			continue
		}
		seen[key] = true
		if allowed != nil && !contains(allowed, key) {
			fix := "remove it"
			if s := closest(key, allowed); s != "" {
				fix = "did you mean " + join(path, s) + "?"
			} else {
				fix = "known keys here: " + strings.Join(allowed, ", ")
			}
			d.errf(ECodeUnknownKey, k, kp, fix, "unknown key %s", kp)
			continue
		}
		d.pos[kp] = Pos{v.Line, v.Column}
		out = append(out, field{key: key, keyN: k, value: v})
	}
	return out
}

func displayPath(p string) string {
	if p == "" {
		return "the file"
	}
	return p
}

func (d *decoder) scalar(n *yaml.Node, path string) (*yaml.Node, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode {
		d.errf(ECodeType, n, path, "write a single value", "%s must be a single value, not %s", path, kindName(n))
		return nil, false
	}
	return n, true
}

func (d *decoder) str(n *yaml.Node, path string) string {
	trace(path, kindText, nil)
	s, ok := d.scalar(n, path)
	if !ok {
		return ""
	}
	if s.Tag == "!!null" {
		return ""
	}
	return s.Value
}

func (d *decoder) boolean(n *yaml.Node, path string) bool {
	trace(path, kindBool, nil)
	s, ok := d.scalar(n, path)
	if !ok {
		return false
	}
	if s.Tag != "!!bool" {
		d.errf(ECodeType, s, path, "write true or false", "%s must be true or false, not %q", path, s.Value)
		return false
	}
	b, _ := strconv.ParseBool(s.Value)
	return b
}

func (d *decoder) integer(n *yaml.Node, path string) int {
	trace(path, kindInt, nil)
	s, ok := d.scalar(n, path)
	if !ok {
		return 0
	}
	i, err := strconv.Atoi(s.Value)
	if s.Tag != "!!int" || err != nil {
		d.errf(ECodeType, s, path, "write a whole number", "%s must be a whole number, not %q", path, s.Value)
		return 0
	}
	return i
}

func (d *decoder) duration(n *yaml.Node, path string) time.Duration {
	trace(path, kindDuration, nil)
	s, ok := d.scalar(n, path)
	if !ok {
		return 0
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil || v <= 0 {
		d.errf(ECodeBadDuration, s, path, "write a positive Go duration such as 45m, 90s or 1h30m", "%s: %q is not a duration", path, s.Value)
		return 0
	}
	return v
}

func (d *decoder) size(n *yaml.Node, path string) int64 {
	trace(path, kindSize, nil)
	s, ok := d.scalar(n, path)
	if !ok {
		return 0
	}
	v, err := ParseSize(s.Value)
	if err != nil {
		d.errf(ECodeBadSize, s, path, "write a size such as 512MiB, 2GiB or 100MB", "%s: %v", path, err)
		return 0
	}
	return v
}

// strList accepts a list of scalars.
func (d *decoder) strList(n *yaml.Node, path string) ([]string, []*yaml.Node) {
	trace(path, kindList, nil)
	n = resolve(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		d.errf(ECodeType, n, path, "write a list: [a, b]", "%s must be a list, not %s", path, kindName(n))
		return nil, nil
	}
	var out []string
	var nodes []*yaml.Node
	for i, c := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		c = resolve(c)
		if c.Kind != yaml.ScalarNode || c.Tag == "!!null" {
			d.errf(ECodeType, c, ip, "write each item as a string", "%s must be a string, not %s", ip, kindName(c))
			continue
		}
		d.pos[ip] = Pos{c.Line, c.Column}
		out = append(out, c.Value)
		nodes = append(nodes, c)
	}
	return out, nodes
}

func (d *decoder) enum(n *yaml.Node, path string, allowed ...string) string {
	trace(path, kindEnum, allowed)
	s := d.str(n, path)
	if s == "" && resolve(n).Kind != yaml.ScalarNode {
		return ""
	}
	if !contains(allowed, s) {
		d.errf(ECodeBadValue, resolve(n), path, "use one of: "+strings.Join(allowed, ", "), "%s: %q is not one of %s", path, s, strings.Join(allowed, ", "))
		return ""
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// closest returns the allowed key nearest to key by edit distance, if it is
// close enough to be a typo.
func closest(key string, allowed []string) string {
	best, bestD := "", 3
	for _, a := range allowed {
		if dd := editDistance(key, a); dd < bestD {
			best, bestD = a, dd
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
