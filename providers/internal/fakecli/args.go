package fakecli

import (
	"fmt"
	"strings"
)

// Kind is how an option takes values, as in commander.js (both real CLIs
// are Node programs that parse argv with it).
type Kind int

const (
	Bool     Kind = iota
	Value         // exactly one value
	Optional      // a value when the next word is not an option
	Variadic      // values until the next option
)

// Spec maps option spellings (-p, --print) to a canonical name and kind.
type Spec map[string]struct {
	Name string
	Kind Kind
}

// Parsed is a parsed command line.
type Parsed struct {
	Flags map[string][]string // canonical name -> values ("" for booleans)
	Args  []string            // positional words
}

// Has reports whether an option was given.
func (p Parsed) Has(name string) bool { _, ok := p.Flags[name]; return ok }

// Get returns an option's last value.
func (p Parsed) Get(name string) string {
	v := p.Flags[name]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

// Parse parses argv like commander does and rejects unknown options with
// commander's message.
func Parse(spec Spec, argv []string) (Parsed, error) {
	p := Parsed{Flags: map[string][]string{}}
	for i := 0; i < len(argv); i++ {
		a := argv[i]
		if a == "--" {
			p.Args = append(p.Args, argv[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			p.Args = append(p.Args, a)
			continue
		}
		name, val, hasVal := strings.Cut(a, "=")
		if !strings.HasPrefix(a, "--") {
			hasVal = false
			name = a
		}
		o, ok := spec[name]
		if !ok {
			return p, fmt.Errorf("error: unknown option '%s'", name)
		}
		switch o.Kind {
		case Bool:
			if hasVal {
				return p, fmt.Errorf("error: option '%s' does not take a value", name)
			}
			p.Flags[o.Name] = append(p.Flags[o.Name], "")
		case Value:
			if !hasVal {
				if i+1 >= len(argv) || (strings.HasPrefix(argv[i+1], "-") && argv[i+1] != "-") {
					return p, fmt.Errorf("error: option '%s <value>' argument missing", name)
				}
				i++
				val = argv[i]
			}
			p.Flags[o.Name] = append(p.Flags[o.Name], val)
		case Optional:
			if !hasVal && i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				i++
				val = argv[i]
			}
			p.Flags[o.Name] = append(p.Flags[o.Name], val)
		case Variadic:
			if hasVal {
				p.Flags[o.Name] = append(p.Flags[o.Name], val)
				continue
			}
			n := 0
			for i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "-") {
				i++
				n++
				p.Flags[o.Name] = append(p.Flags[o.Name], argv[i])
			}
			if n == 0 {
				return p, fmt.Errorf("error: option '%s <values...>' argument missing", name)
			}
		}
	}
	return p, nil
}
