package config

import (
	"fmt"
	"strings"
)

// SecretField says whether key (a dotted path such as
// "pipelines.default.deliver.pull_request.token") names a {secret: KEY}
// field of the factory file, reading the schema: the one source of what
// is a secret reference. A path the schema does not have is an error with
// the nearest name, so a typo is not stored as a stray secret. names
// lists the names a map of the file holds ("steps", "providers", ...) so
// an unknown step or provider is named too; nil skips that check.
//
// A key whose first part is no key of the file (an inject entry's
// "secret: api.key") is not a field: ok is false and err nil.
func SecretField(key string, names func(mapPath string) []string) (ok bool, err error) {
	parts := strings.Split(key, ".")
	root := factorySchema()
	top := false
	for _, pr := range root.props {
		if pr.name == parts[0] {
			top = true
		}
	}
	if !top {
		return false, nil
	}
	n, path := root, ""
	for i, part := range parts {
		n = resolveAlt(n, part)
		switch n.kind {
		case kindObject:
			var next *schemaNode
			var props []string
			for _, pr := range n.props {
				props = append(props, pr.name)
				if pr.name == part {
					next = pr.node
				}
			}
			if next == nil {
				return false, unknownPart(key, path, part, props)
			}
			n = next
		case kindMap:
			allowed := n.values
			if allowed == nil {
				allowed = n.names
			}
			if names != nil {
				allowed = append(append([]string(nil), allowed...), names(path)...)
			}
			if len(allowed) > 0 && !contains(allowed, part) {
				return false, unknownPart(key, path, part, allowed)
			}
			n = n.elem
		default:
			return false, fmt.Errorf("%s: %s is a single value, it has no %s", key, path, strings.Join(parts[i:], "."))
		}
		path = join(path, part)
	}
	if isSecretRef(n) {
		return true, nil
	}
	if n.kind == kindOneOf {
		for _, a := range n.alts {
			if isSecretRef(a) {
				return true, nil
			}
		}
	}
	return false, fmt.Errorf("%s is not a secret reference in the factory file (%s); set it without --secret, or name a {secret: KEY} field", key, n.desc)
}

// resolveAlt picks, of a oneOf, the alternative that can hold part.
func resolveAlt(n *schemaNode, part string) *schemaNode {
	if n.kind != kindOneOf {
		return n
	}
	for _, a := range n.alts {
		if a.kind == kindMap {
			return a
		}
		if a.kind == kindObject {
			for _, pr := range a.props {
				if pr.name == part {
					return a
				}
			}
		}
	}
	return n
}

func isSecretRef(n *schemaNode) bool {
	return n.kind == kindObject && len(n.props) == 1 && n.props[0].name == "secret"
}

func unknownPart(key, path, part string, allowed []string) error {
	where := displayPath(path)
	fix := "known here: " + strings.Join(allowed, ", ")
	c := closest(part, allowed)
	for _, a := range allowed {
		if c == "" && len(part) >= 3 && strings.HasPrefix(a, part) {
			c = a // a cut-off name: "claud" for claude-code
		}
	}
	if c != "" {
		fix = "did you mean " + join(path, c) + "?"
	}
	if len(allowed) == 0 {
		fix = "check the key's spelling against docs/reference/factory.md"
	}
	return fmt.Errorf("%s: %s has no %q (%s)", key, where, part, fix)
}
