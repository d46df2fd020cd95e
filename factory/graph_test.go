package factory

import (
	"testing"

	"github.com/kusaw/kusaw/config"
)

func TestGraphs(t *testing.T) {
	f, fs := config.Parse([]byte(`version: 1
repos: {}
notify: [{url: "https://hooks.example/secret/path", on: [run.finished]}]
pipelines:
  default: [plan, [api, web], ship]
steps:
  plan: {run: ["true"], candidates: 3, select: "judge:pick"}
  pick: {run: ["true"]}
  api: {run: ["true"], resolve: merge, attempts: 2, on_failure: fix, retry: {on: ["exit:3"]}}
  web: {run: ["true"], continue_on_failure: true}
  merge: {run: ["true"]}
  fix: {run: ["true"]}
  ship: {run: ["true"], gate: "ship it?"}
`), "/tmp/factory.yaml")
	if len(fs.Errors()) > 0 {
		t.Fatal(fs.Errors())
	}
	for _, w := range fs.Warnings() {
		if w.Code == config.WCodeUnusedStep {
			t.Errorf("a helper a shape runs counted as unused: %s", w)
		}
	}
	gs := Graphs(f)
	if len(gs) != 1 {
		t.Fatalf("graphs: %+v", gs)
	}
	g := gs[0]
	nodes := map[string]GraphNode{}
	for _, n := range g.Nodes {
		nodes[n.ID] = n
	}
	edges := map[GraphEdge]bool{}
	for _, e := range g.Edges {
		edges[e] = true
	}
	if n := nodes["plan"]; n.Candidates != 3 || n.Select != "judge:pick" || n.Item != 0 {
		t.Errorf("plan: %+v", n)
	}
	if n := nodes["api"]; n.Group != 1 || n.RetryOn != "exit:3" || n.Item != 1 {
		t.Errorf("api: %+v", n)
	}
	if n := nodes["web"]; n.Group != 1 || !n.ContinueOnFailure {
		t.Errorf("web: %+v", n)
	}
	if n := nodes["ship"]; n.Gate != "ship it?" || n.Group != 0 {
		t.Errorf("ship: %+v", n)
	}
	for _, e := range []GraphEdge{
		{"plan", "api", "next"}, {"plan", "web", "next"}, {"api", "ship", "next"}, {"web", "ship", "next"},
		{"plan", "judge:pick@plan", "judge"}, {"api", "resolve:merge@api", "resolve"},
		{"api", "fixer:fix@api", "on_failure"}, {"fixer:fix@api", "api", "retry"},
	} {
		if !edges[e] {
			t.Errorf("missing edge %+v", e)
		}
	}
	if edges[GraphEdge{"api", "web", "next"}] {
		t.Error("members of one group are linked to each other")
	}
	if len(g.Notify) != 1 || g.Notify[0] != "https://hooks.example/… on run.finished" {
		t.Errorf("notify: %v (a webhook's path is its secret)", g.Notify)
	}
}
