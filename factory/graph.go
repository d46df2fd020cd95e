package factory

import (
	"fmt"
	"strings"

	"github.com/kusaw/kusaw/config"
)

// PipelineGraph is a pipeline drawn as a graph for kusaw validate --json:
// its steps (and the helpers its shapes run: fixers, judges, resolves) as
// nodes, what runs after what as edges.
type PipelineGraph struct {
	Name   string      `json:"name"`
	Nodes  []GraphNode `json:"nodes"`
	Edges  []GraphEdge `json:"edges"`
	Notify []string    `json:"notify,omitempty"` // webhooks (scheme and host) and their events
}

// GraphNode is one step of a pipeline, or a helper one of its shapes runs.
type GraphNode struct {
	ID         string `json:"id"`   // the step id; a helper's is ROLE:STEP@OWNER
	Step       string `json:"step"` // the step it runs
	Role       string `json:"role"` // step, fixer, judge or resolve
	Item       int    `json:"item"` // position in the pipeline, from 0
	Group      int    `json:"group,omitempty"`
	Candidates int    `json:"candidates,omitempty"`
	Select     string `json:"select,omitempty"`
	Attempts   int    `json:"attempts"`
	RetryOn    string `json:"retry_on,omitempty"`
	Gate       string `json:"gate,omitempty"`
	// ContinueOnFailure: its failure neither stops its siblings nor the run.
	ContinueOnFailure bool `json:"continue_on_failure,omitempty"`
}

// GraphEdge is one "runs after" link: next (the pipeline's order),
// on_failure (a fixer between attempts), judge, resolve.
type GraphEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
	Kind string `json:"kind"`
}

// Graphs draws every pipeline of the factory, in file order.
func Graphs(f *config.Factory) []PipelineGraph {
	out := []PipelineGraph{}
	for _, name := range f.PipelineOrder {
		out = append(out, graphOf(f, f.Pipelines[name]))
	}
	return out
}

func graphOf(f *config.Factory, pl *config.Pipeline) PipelineGraph {
	g := PipelineGraph{Name: pl.Name, Nodes: []GraphNode{}, Edges: []GraphEdge{}}
	var prev []string
	group := 0
	for i, it := range pl.Steps {
		if it.Group != nil {
			group++
		}
		var cur []string
		for j, id := range it.IDs() {
			n := GraphNode{ID: id, Step: id, Role: "step", Item: i}
			if it.Group != nil {
				n.Group = group
			}
			s := f.Steps[id]
			if s != nil {
				n.Attempts, n.Candidates, n.ContinueOnFailure = s.Attempts, s.Candidates, s.ContinueOnFailure
				if s.Candidates > 0 {
					n.Select = selectName(s)
				}
				if s.Retry != nil && len(s.Retry.On) > 0 {
					n.RetryOn = retryOnList(s)
				}
				if s.Gate != nil {
					n.Gate = s.Gate.Message
				}
			}
			g.Nodes = append(g.Nodes, n)
			cur = append(cur, id)
			for _, p := range prev {
				g.Edges = append(g.Edges, GraphEdge{From: p, To: id, Kind: "next"})
			}
			if s == nil {
				continue
			}
			helper := func(role, step, kind string) {
				hid := fmt.Sprintf("%s:%s@%s", role, step, id)
				hn := GraphNode{ID: hid, Step: step, Role: role, Item: i, Group: n.Group, Attempts: 1}
				if hs := f.Steps[step]; hs != nil {
					hn.Attempts = hs.Attempts
				}
				g.Nodes = append(g.Nodes, hn)
				g.Edges = append(g.Edges, GraphEdge{From: id, To: hid, Kind: kind})
				if kind == "on_failure" {
					g.Edges = append(g.Edges, GraphEdge{From: hid, To: id, Kind: "retry"})
				}
			}
			if s.OnFailure != "" {
				helper("fixer", s.OnFailure, "on_failure")
			}
			if s.Judge != "" {
				helper("judge", s.Judge, "judge")
			}
			if s.Resolve != "" && it.Group != nil && j == 0 {
				helper("resolve", s.Resolve, "resolve")
			}
		}
		prev = cur
	}
	all := append(append([]config.Notify(nil), f.Notify...), pl.Notify...)
	for _, n := range all {
		g.Notify = append(g.Notify, safeURL(n.URL)+" on "+strings.Join(n.On, ", "))
	}
	return g
}
