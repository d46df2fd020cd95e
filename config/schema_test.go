package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/kusaw/kusaw/internal/generated"
)

// TestSchemaPageFresh keeps docs/reference/factory.schema.json equal to
// what kusaw schema prints (make docs rewrites it).
func TestSchemaPageFresh(t *testing.T) {
	generated.CheckPage(t, "../docs/reference/factory.schema.json", string(JSONSchema()), *update)
}

// TestSchemaMatchesDecoder decodes sample files built from the schema,
// with every value the decoder reads traced, and checks both ways: each
// map the decoder reads accepts exactly the keys the schema lists there
// (a key added to the decoder alone fails here, named), each value is read
// as the schema's kind says, and every part of the schema was read.
func TestSchemaMatchesDecoder(t *testing.T) {
	root := factorySchema()
	type read struct {
		path     string
		kind     nodeKind
		accepted []string
	}
	var reads []read
	decodeTrace = func(path string, kind nodeKind, accepted []string) {
		reads = append(reads, read{path, kind, slices.Clone(accepted)})
	}
	defer func() { decodeTrace = nil }()
	for choice := 0; choice < 2; choice++ {
		data, err := yaml.Marshal(sample(root, choice))
		if err != nil {
			t.Fatal(err)
		}
		Parse(data, filepath.Join(t.TempDir(), "factory.yaml"))
	}
	covered := map[*schemaNode]bool{}
	for _, r := range reads {
		cands, err := schemaAt(root, r.path)
		if err != nil {
			t.Errorf("%s: the decoder reads it, but %v; add it to config/schema.go", r.path, err)
			continue
		}
		var problems []string
		matched := false
		for _, c := range cands {
			if ok, why := matches(c, r.kind, r.accepted); ok {
				covered[c] = true
				matched = true
			} else if why != "" {
				problems = append(problems, why)
			}
		}
		if !matched {
			t.Errorf("%s: the decoder reads it as %s %v, the schema says otherwise: %s", r.path, r.kind, r.accepted, strings.Join(problems, "; "))
		}
	}
	var walk func(n *schemaNode, path string)
	walk = func(n *schemaNode, path string) {
		switch n.kind {
		case kindOneOf:
			for _, a := range n.alts {
				walk(a, path)
			}
			return
		case kindArray:
			walk(n.elem, path+"[]")
			return
		case kindObject:
			for _, pr := range n.props {
				walk(pr.node, join(path, pr.name))
			}
		case kindMap:
			walk(n.elem, path+".*")
		}
		if !n.inline && !covered[n] {
			t.Errorf("schema node %s (%s) was never read by the decoder: remove it from config/schema.go, or add it to sample()", displayPath(path), n.kind)
		}
	}
	walk(root, "")
}

// matches says whether a schema node is what the decoder read.
func matches(n *schemaNode, kind nodeKind, accepted []string) (bool, string) {
	switch kind {
	case kindObject:
		if n.kind != kindObject {
			return false, ""
		}
		var keys []string
		for _, pr := range n.props {
			keys = append(keys, pr.name)
		}
		var missing, extra []string
		for _, k := range accepted {
			if !slices.Contains(keys, k) {
				missing = append(missing, k)
			}
		}
		for _, k := range keys {
			if !slices.Contains(accepted, k) {
				extra = append(extra, k)
			}
		}
		if len(missing)+len(extra) > 0 {
			return false, fmt.Sprintf("keys the decoder accepts but the schema lacks: %v; keys the schema has but the decoder refuses: %v", missing, extra)
		}
		return true, ""
	case kindText:
		return n.kind == kindText || n.kind == kindEnum, ""
	case kindEnum:
		if n.kind != kindEnum {
			return false, ""
		}
		a, b := slices.Clone(accepted), slices.Clone(n.values)
		sort.Strings(a)
		sort.Strings(b)
		if !slices.Equal(a, b) {
			return false, fmt.Sprintf("words %v in the schema, %v in the decoder", n.values, accepted)
		}
		return true, ""
	}
	return n.kind == kind, ""
}

var segRE = regexp.MustCompile(`^([^.\[]+)|^\[(\d+)\]|^\.([^.\[]+)`)

// schemaAt returns the schema nodes a concrete key path
// (steps.a.sandbox.egress.inject[0].host) can stand for.
func schemaAt(root *schemaNode, path string) ([]*schemaNode, error) {
	cur := expand(root)
	rest := path
	for rest != "" {
		m := segRE.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("cannot read the path at %q", rest)
		}
		rest = rest[len(m[0]):]
		var next []*schemaNode
		if m[2] != "" {
			for _, n := range cur {
				if n.kind == kindArray || n.kind == kindList {
					if n.elem != nil {
						next = append(next, expand(n.elem)...)
					}
				}
			}
		} else {
			key := m[1] + m[3]
			for _, n := range cur {
				switch n.kind {
				case kindObject:
					for _, pr := range n.props {
						if pr.name == key {
							next = append(next, expand(pr.node)...)
						}
					}
				case kindMap:
					next = append(next, expand(n.elem)...)
				}
			}
			if len(next) == 0 {
				return nil, fmt.Errorf("the schema has no key %q there", key)
			}
		}
		cur = next
	}
	if len(cur) == 0 {
		return nil, fmt.Errorf("the schema has nothing there")
	}
	return cur, nil
}

func expand(n *schemaNode) []*schemaNode {
	if n.kind != kindOneOf {
		return []*schemaNode{n}
	}
	var out []*schemaNode
	for _, a := range n.alts {
		out = append(out, expand(a)...)
	}
	return out
}

// sample builds a document with every key of the schema; choice picks the
// first or the last shape of each oneOf, and maps and arrays hold one
// entry of each, so two samples reach every shape.
func sample(n *schemaNode, choice int) any {
	switch n.kind {
	case kindObject:
		m := map[string]any{}
		for _, pr := range n.props {
			m[pr.name] = sample(pr.node, choice)
		}
		return m
	case kindMap:
		keys := n.values
		if keys == nil {
			keys = []string{"a", "b"}
		}
		m := map[string]any{}
		for i, k := range keys {
			m[k] = sample(n.elem, (choice+i)%2)
		}
		return m
	case kindText:
		return "a"
	case kindBool:
		return true
	case kindNumber:
		return 1.5
	case kindInt:
		switch {
		case n.constInt != nil:
			return *n.constInt
		case n.min != nil:
			return *n.min
		}
		return 1
	case kindDuration:
		return "1m"
	case kindSize:
		return "1MiB"
	case kindEnum:
		return n.values[choice%len(n.values)]
	case kindList:
		if n.values != nil {
			return []any{n.values[0]}
		}
		return []any{"a"}
	case kindArray:
		return []any{sample(n.elem, choice), sample(n.elem, 1-choice)}
	case kindOneOf:
		if choice == 0 {
			return sample(n.alts[0], choice)
		}
		return sample(n.alts[len(n.alts)-1], choice)
	}
	panic("sample: kind " + string(n.kind))
}

// compileSchema compiles the committed schema with an independent draft
// 2020-12 validator, which also checks it against the metaschema.
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("factory.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("factory.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// instance turns YAML into what a JSON Schema validator reads.
func instance(data []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

var yamlBlockRE = regexp.MustCompile("(?ms)^```yaml\n(.*?)^```")

// TestSchemaValidatesExamples: every example factory in examples/ and every
// YAML example in docs/ and the README is valid under the schema, as
// kusaw validate finds it. A docs snippet without version or pipelines is
// a part of a file: it is checked with those two added.
func TestSchemaValidatesExamples(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples")
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := instance(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if err := s.Validate(inst); err != nil {
			t.Errorf("%s is not valid under the schema: %v", f, err)
		}
		n++
	}
	docs, _ := filepath.Glob("../docs/*.md")
	docs = append(docs, "../README.md")
	for _, f := range docs {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range yamlBlockRE.FindAllSubmatch(data, -1) {
			block := m[1]
			var top map[string]any
			if err := yaml.Unmarshal(block, &top); err != nil {
				t.Errorf("%s, yaml block %d: not YAML: %v", f, i+1, err)
				continue
			}
			if _, ok := top["version"]; !ok {
				top["version"] = 1
			}
			if _, ok := top["pipelines"]; !ok {
				top["pipelines"] = map[string]any{"default": []any{"a"}}
			}
			full, _ := yaml.Marshal(top)
			inst, err := instance(full)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(inst); err != nil {
				t.Errorf("%s, yaml block %d is not valid under the schema: %v\n%s", f, i+1, err, block)
			}
			n++
		}
	}
	t.Logf("%d examples valid", n)
}

// beyondSchema are the broken files whose error only kusaw validate can
// find (it needs the file system, git, other keys or the YAML parser);
// the schema must accept them, so this list stays honest: when the schema
// learns to catch one, move it out.
var beyondSchema = map[string]string{
	"retention_no_bound":           "retention: with neither key: an object's minimum the schema writer does not express",
	"retention_too_short":          "a max_age under an hour: a rule on a duration's value",
	"agent_argv_no_prompt":         "argv without {prompt} or {prompt_file}: a rule inside a list's texts",
	"agent_builtin_name":           "an agent block under a built-in provider's name: a rule across keys",
	"agent_inject_no_env":          "agent inject without key_env and base_url_env: a rule across keys",
	"agent_key_in_env":             "agent env setting the key_env variable: a rule across keys",
	"agent_login_folder_ssh":       "a login folder on kusaw's list of credential paths: a rule inside a text",
	"agent_no_result":              "format jsonl without a result pointer: a rule across keys (the default format)",
	"agent_unknown_placeholder":    "a {placeholder} argv does not know: a rule inside a text",
	"unknown_provider":             "a step's provider that is neither built in nor described under providers.NAME.agent: a reference",
	"candidates_unknown_provider":  "a candidate's provider that is neither built in nor described under providers.NAME.agent: a reference",
	"trigger_bad_field":            "a template naming a field no event has: a rule inside a text",
	"trigger_bad_schedule":         "a schedule that is not cron: a rule inside a text",
	"trigger_gitlab_no_allow":      "a GitLab trigger without allow: a rule across keys",
	"trigger_no_webhook_secret":    "a trigger on a forge without webhook_secret: a rule across keys",
	"trigger_unknown_pipeline":     "a trigger naming a pipeline that pipelines lacks: a reference",
	"gate_candidates":              "a gate with candidates: a rule across keys",
	"candidates_providers_command": "candidates naming providers on a command step: a rule across keys",
	"gate_in_group":                "a gate on a group's member: a rule across the pipeline and the step",
	"gate_per_repo":                "a gate with per_repo: a rule across keys",
	"group_step_twice":             "a step in two groups of one pipeline: a rule across list items",
	"group_unknown_step":           "a group naming a step that steps lacks: a reference",
	"judge_missing":                "select: judge:STEP naming a step that steps lacks: a reference",
	"on_failure_self":              "on_failure naming its own step: a reference",
	"resolve_not_first":            "resolve off a group's first step: a rule across the pipeline and the step",
	"select_without_candidates":    "select needs candidates: a rule across keys",
	"deliver_pr_without_push":      "a pull request needs push: a rule across keys",
	"cache_without_env":            "env is required only for a cache that is not a preset: a rule on the key's name",
	"include_outside":              "a glob leaving the repository is found by cleaning its path",
	"sparse_outside":               "a folder leaving the repository is found by cleaning its path",
	"sparse_empty":                 "an empty list is refused by the rule, not the schema (a null one too)",
	"write_layer_unsandboxed":      "overlay needs the effective sandbox mode of the repo's attempts: a rule across keys",
	"write_layer_sparse":           "overlay with sparse: a rule across keys",
	"agent_no_prompt":              "an agent step needs one of prompt and prompt_file: a rule across keys",
	"allow_write_etc":              "which folders are too broad is decided on the resolved path",
	"allow_write_root":             "which folders are too broad is decided on the resolved path",
	"bad_cidr":                     "a CIDR's prefix length is checked by parsing it",
	"bad_resolver":                 "host:port is checked by parsing it",
	"duplicate_step":               "the YAML parser refuses duplicate keys before any schema",
	"host_bare_star":               "host patterns are parsed with the public-suffix list",
	"host_ip_literal":              "host patterns are parsed with the public-suffix list",
	"host_metadata":                "host patterns are parsed with the public-suffix list",
	"host_public_suffix":           "host patterns are parsed with the public-suffix list",
	"local_range_too_wide":         "the size of a port range is checked by parsing the entry",
	"inject_without_allowlist":     "inject needs the effective network of the step: a rule across keys",
	"repo_not_git":                 "needs the file system",
	"repo_path_missing":            "needs the file system",
	"requires_network_open":        "needs the effective network: a rule across keys",
	"requires_network_audit":       "needs the effective network: a rule across keys",
	"requires_sandbox_off":         "needs the effective mode: a rule across keys",
	"two_kinds":                    "one kind of step: a rule across keys",
	"unknown_repo_ref":             "a reference to another key",
	"unknown_step_ref":             "a reference to another key",
	"pipeline_group_unknown_step":  "a reference to another key",
	"yaml_syntax":                  "not YAML at all",
	"cluster_listen_and_url":       "listen and nats_url exclude each other: a rule across keys",
	"cluster_lost_after":           "a minimum duration is checked by parsing it",
	"cluster_nats_no_account":      "nats_url needs account: a rule across keys",
	"cluster_nats_no_signing_key":  "nats_url needs signing_key: a rule across keys",
	"cluster_account_without_url":  "account needs nats_url: a rule across keys",
	"cluster_ca_missing":           "needs the file system",
	"cluster_bad_nats_url_list":    "each URL of the comma-separated list is checked by parsing it",
}

// TestSchemaRejectsBrokenFiles: every broken file in testdata/invalid is
// refused by the schema, except those in beyondSchema, which it accepts.
func TestSchemaRejectsBrokenFiles(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 20 {
		t.Fatalf("only %d broken files", len(files))
	}
	rejected := 0
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		why, beyond := beyondSchema[name]
		inst, err := instance(data)
		if err != nil {
			if !beyond {
				t.Errorf("%s: not readable as YAML (%v): list it in beyondSchema", name, err)
			}
			continue
		}
		verr := s.Validate(inst)
		switch {
		case beyond && verr != nil:
			t.Errorf("%s: the schema now refuses it (%v); take it out of beyondSchema (%s)", name, verr, why)
		case !beyond && verr == nil:
			t.Errorf("%s: the schema accepts a broken file; make the schema refuse it, or list it in beyondSchema with the reason", name)
		case !beyond:
			rejected++
		}
	}
	t.Logf("%d broken files refused by the schema, %d beyond it", rejected, len(beyondSchema))
}

// TestSchemaDescriptions: every key in the schema says what it is.
func TestSchemaDescriptions(t *testing.T) {
	var walk func(n *schemaNode, path string)
	walk = func(n *schemaNode, path string) {
		switch n.kind {
		case kindObject:
			for _, pr := range n.props {
				if pr.node.desc == "" {
					t.Errorf("%s has no description", join(path, pr.name))
				}
				walk(pr.node, join(path, pr.name))
			}
		case kindMap:
			walk(n.elem, path+".*")
		case kindArray:
			walk(n.elem, path+"[]")
		case kindOneOf:
			for i, a := range n.alts {
				walk(a, path+"|"+strconv.Itoa(i))
			}
		}
	}
	walk(factorySchema(), "")
}
