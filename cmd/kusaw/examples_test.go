package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestValidateExamples runs kusaw validate --json on every file in
// examples/ and checks the object's shape (docs/cli.md).
func TestValidateExamples(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no example factory files")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Setenv("KUSAW_SECRETS_DIR", t.TempDir())
			var out, errb bytes.Buffer
			code := run([]string{"validate", "--json", "-f", file}, nil, &out, &errb)
			if code != 0 {
				t.Fatalf("exit %d: %s%s", code, out.String(), errb.String())
			}
			var r struct {
				OK       *bool            `json:"ok"`
				Errors   []map[string]any `json:"errors"`
				Warnings []map[string]any `json:"warnings"`
				Steps    []struct {
					ID, Kind, Mode, ModeOrigin, Network string
					Allowlist                           []struct{ Host, Origin string }
					Inject                              []string
				} `json:"steps"`
				Sandbox *struct {
					Backend   string `json:"backend"`
					Available *bool  `json:"available"`
				} `json:"sandbox"`
				Pipelines []struct {
					Name  string
					Nodes []struct{ ID, Step, Role string }
					Edges []struct{ From, To, Kind string }
				} `json:"pipelines"`
			}
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("not one JSON object: %v\n%s", err, out.String())
			}
			if r.OK == nil || !*r.OK || r.Errors == nil || r.Warnings == nil || len(r.Steps) == 0 {
				t.Fatalf("shape wrong: %s", out.String())
			}
			if len(r.Pipelines) == 0 || r.Pipelines[0].Name == "" || len(r.Pipelines[0].Nodes) == 0 {
				t.Fatalf("no pipeline graph: %s", out.String())
			}
			for _, w := range r.Warnings {
				for _, k := range []string{"code", "path", "line", "column", "message", "fix"} {
					if _, ok := w[k]; !ok {
						t.Errorf("warning lacks %s: %v", k, w)
					}
				}
			}
			sandboxed := false
			for _, s := range r.Steps {
				if s.ID == "" || s.Kind == "" || s.Mode == "" || s.Network == "" {
					t.Errorf("step lacks fields: %+v", s)
				}
				if s.Mode == "required" {
					sandboxed = true
				}
			}
			if sandboxed && (r.Sandbox == nil || r.Sandbox.Backend == "" || r.Sandbox.Available == nil) {
				t.Errorf("a sandboxed step needs the sandbox object: %s", out.String())
			}
		})
	}
}
