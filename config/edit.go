package config

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Edit is a factory file opened for changes that keep its comments and key
// order (kusaw config set).
type Edit struct {
	path string
	doc  yaml.Node
	mode os.FileMode
}

// OpenEdit reads a factory file for editing.
func OpenEdit(path string) (*Edit, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &LoadError{fmt.Sprintf("cannot read %s: %v", path, err)}
	}
	e := &Edit{path: path, mode: 0o644}
	if st, err := os.Stat(path); err == nil {
		e.mode = st.Mode().Perm()
	}
	if err := yaml.Unmarshal(data, &e.doc); err != nil {
		return nil, &LoadError{fmt.Sprintf("%s is not valid YAML (%s); fix it by hand first", path, yamlErrMsg(err))}
	}
	if len(e.doc.Content) == 0 {
		e.doc.Kind = yaml.DocumentNode
		e.doc.Content = []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}
	}
	return e, nil
}

// ParseValue reads a command-line value as YAML, so "45m", "true", "[a, b]"
// and "{secret: k}" mean what they would in the file.
func ParseValue(s string) (*yaml.Node, error) {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(s), &n); err != nil || len(n.Content) == 0 {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}, nil
	}
	v := n.Content[0]
	v.Style &^= yaml.LiteralStyle | yaml.FoldedStyle
	if v.Kind != yaml.ScalarNode {
		v.Style = yaml.FlowStyle
	}
	return v, nil
}

// SecretRefNode is the value written in the file for a stored secret.
func SecretRefNode(key string) *yaml.Node {
	return &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Style: yaml.FlowStyle, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: "secret"},
		{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
	}}
}

// find walks a dotted key path. Ids may contain dots, so at each level the
// longest run of segments that names an existing key wins. It returns the
// mapping that holds the last key, that key's name, and the value node (nil
// when the key does not exist yet). With create, missing maps are made.
func (e *Edit) find(key string, create bool) (parent *yaml.Node, last string, value *yaml.Node, err error) {
	segs := strings.Split(key, ".")
	for _, s := range segs {
		if s == "" {
			return nil, "", nil, fmt.Errorf("%q is not a key path (write it like steps.test.timeout)", key)
		}
	}
	cur := e.doc.Content[0]
	for i := 0; i < len(segs); {
		if cur.Kind != yaml.MappingNode {
			return nil, "", nil, fmt.Errorf("%s is not a map, so it has no key %s", strings.Join(segs[:i], "."), segs[i])
		}
		matched := 0
		var next *yaml.Node
		for j := len(segs); j > i; j-- {
			name := strings.Join(segs[i:j], ".")
			if v := mapGet(cur, name); v != nil {
				matched, next = j-i, v
				break
			}
		}
		if matched == 0 {
			// The rest is new: the next segment is one key.
			if i == len(segs)-1 {
				return cur, segs[i], nil, nil
			}
			if !create {
				return nil, "", nil, fmt.Errorf("%s is not set", key)
			}
			m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			mapSet(cur, segs[i], m)
			cur = m
			i++
			continue
		}
		if i+matched == len(segs) {
			return cur, strings.Join(segs[i:], "."), next, nil
		}
		cur = resolve(next)
		if cur.Kind == yaml.ScalarNode && cur.Tag == "!!null" && create {
			cur.Kind, cur.Tag, cur.Value = yaml.MappingNode, "!!map", ""
		}
		i += matched
	}
	return nil, "", nil, fmt.Errorf("%q is not a key path", key)
}

func mapGet(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func mapSet(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			old := m.Content[i+1]
			// Keep the comments that stood on the old value.
			v.LineComment, v.HeadComment, v.FootComment = old.LineComment, old.HeadComment, old.FootComment
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

// Set puts value at the key path, creating maps on the way.
func (e *Edit) Set(key string, value *yaml.Node) error {
	parent, last, _, err := e.find(key, true)
	if err != nil {
		return err
	}
	mapSet(parent, last, value)
	return nil
}

// Get returns the value node at a key path.
func (e *Edit) Get(key string) (*yaml.Node, error) {
	_, _, v, err := e.find(key, false)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("%s is not set", key)
	}
	return resolve(v), nil
}

// Bytes renders the edited file.
func (e *Edit) Bytes() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&e.doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Save checks the edited file and writes it atomically. A change that makes
// the key it touched invalid is refused, with the finding.
func (e *Edit) Save(changedKey string) error {
	data, err := e.Bytes()
	if err != nil {
		return err
	}
	_, fs := Parse(data, e.path)
	for _, f := range fs.Errors() {
		if f.Path == changedKey || strings.HasPrefix(f.Path, changedKey+".") || strings.HasPrefix(f.Path, changedKey+"[") || f.Code == ECodeSyntax {
			f.File = e.path
			return fmt.Errorf("not saved: %s: %s (fix: %s)", f.Code, f.Message, f.Fix)
		}
	}
	return WriteFileAtomic(e.path, data, e.mode)
}

// WriteFileAtomic writes data to a temporary file beside path and renames it
// over path, so a reader never sees half a file.
func WriteFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir, base := splitDir(path)
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func splitDir(p string) (string, string) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ".", p
	}
	return p[:i+1], p[i+1:]
}

// NodeString renders a value node for kusaw config get: a secret reference
// prints as <secret>, never its key's value.
func NodeString(n *yaml.Node) string {
	n = resolve(n)
	if n.Kind == yaml.MappingNode && mapGet(n, "secret") != nil && len(n.Content) == 2 {
		return "<secret>"
	}
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	c := *n
	c.Style = yaml.FlowStyle
	out, err := yaml.Marshal(&c)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
