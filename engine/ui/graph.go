package ui

import (
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Graph is the step graph of a spec, for the run and workflow pages: every step of the tree
// (nested steps and on_failure steps included) and the edges between them.
type Graph struct {
	Nodes []GraphNode `json:"nodes"`
	Edges []GraphEdge `json:"edges"`
}

// GraphNode is one step of a Graph.
type GraphNode struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	Tool  string `json:"tool,omitempty"` // tool and tool_remote ("dcc/tool"); the workflow of a workflow step
	Label string `json:"label"`
	// Parent is the foreach, parallel or branch step that holds it; "" at the top.
	Parent string `json:"parent,omitempty"`
	// Layer is the length of the longest edge path that leads to it (0 for a step nothing
	// precedes): the column of a layered drawing.
	Layer     int  `json:"layer"`
	OnFailure bool `json:"on_failure,omitempty"`
}

// GraphEdge says that step To starts after step From (a dependency, the implicit order of
// siblings, or a control step and the first steps of its body).
type GraphEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// graphOf builds the graph of s. Siblings follow one another unless the step has depends_on
// (its edges come from those steps instead) or they are the branches of a parallel step (which
// start together); a control step leads to the steps of its body that nothing else in it
// precedes; on_failure steps follow one another and are marked.
func graphOf(s *spec.Spec) Graph {
	g := Graph{Nodes: []GraphNode{}, Edges: []GraphEdge{}}
	var walk func(list []*spec.Step, parent *spec.Step, onFailure bool)
	walk = func(list []*spec.Step, parent *spec.Step, onFailure bool) {
		chain := parent == nil || parent.Kind != spec.KindParallel
		for i, st := range list {
			n := GraphNode{ID: st.ID, Kind: string(st.Kind), Label: st.ID, OnFailure: onFailure}
			switch st.Kind {
			case spec.KindToolRemote:
				n.Tool = st.DCC + "/" + st.Tool
			case spec.KindWorkflow:
				n.Tool = st.Workflow
			default:
				n.Tool = st.Tool
			}
			if parent != nil {
				n.Parent = parent.ID
			}
			g.Nodes = append(g.Nodes, n)
			incoming := false
			switch {
			case st.HasDependsOn:
				for _, d := range st.DependsOn {
					g.Edges = append(g.Edges, GraphEdge{From: d, To: st.ID})
					incoming = true
				}
			case chain && i > 0:
				g.Edges = append(g.Edges, GraphEdge{From: list[i-1].ID, To: st.ID})
				incoming = true
			}
			if !incoming && parent != nil {
				g.Edges = append(g.Edges, GraphEdge{From: parent.ID, To: st.ID})
			}
			for _, body := range st.Children() {
				walk(body, st, onFailure)
			}
		}
	}
	walk(s.Steps, nil, false)
	walk(s.OnFailure, nil, true)
	layer(&g)
	return g
}

// layer sets each node's Layer to the longest path reaching it. Edges whose ends are unknown
// are ignored; a cycle (a spec never validates with one) leaves its nodes at the layer reached.
func layer(g *Graph) {
	index := make(map[string]int, len(g.Nodes))
	for i, n := range g.Nodes {
		index[n.ID] = i
	}
	in := make([]int, len(g.Nodes))
	out := make([][]int, len(g.Nodes))
	for _, e := range g.Edges {
		f, ok1 := index[e.From]
		t, ok2 := index[e.To]
		if !ok1 || !ok2 {
			continue
		}
		out[f] = append(out[f], t)
		in[t]++
	}
	queue := make([]int, 0, len(g.Nodes))
	for i := range g.Nodes {
		if in[i] == 0 {
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		for _, t := range out[i] {
			if l := g.Nodes[i].Layer + 1; l > g.Nodes[t].Layer {
				g.Nodes[t].Layer = l
			}
			if in[t]--; in[t] == 0 {
				queue = append(queue, t)
			}
		}
	}
}
