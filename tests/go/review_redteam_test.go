package gotest

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// parallelLevel is a workflow named name whose one step is a `kind: parallel` of n branches,
// each the step text branch (a sub-workflow, or a tool call).
func parallelLevel(name string, n int, branch string) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "name: %s\nsteps:\n  - id: all\n    kind: parallel\n    steps:\n", name)
	for i := range n {
		fmt.Fprintf(&sb, "      - {id: b%d, %s}\n", i, branch)
	}
	return sb.String()
}

// TestSubflowRedteamTreeParallelBoundsParallelSteps: max_tree_parallel bounds what a tree has in
// flight through `kind: parallel` steps (and DAG lists) as it does through foreach. A parallel
// step of 3 sub-workflows, each a parallel step of 20 blocking calls (60 calls asked at once),
// had all 60 in flight with max_tree_parallel 4 — a tree of parallel sub-workflows 30 wide and 3
// deep held 55,864 goroutines and 559 MB with every tree limit set low, and 100 wide would hold
// a million — now 1 + 4 more at a time: the first step in flight of each parallel list runs
// without a slot (so no list waits for another), each other one takes a slot, and the steps
// that find none start as slots free up.
func TestSubflowRedteamTreeParallelBoundsParallelSteps(t *testing.T) {
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxTreeParallel = 4 }))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "hold", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	// The calls are held until 5 are in flight at once (or the test's time is up): every step
	// the bound allows is then waiting in a call, and more would be seen.
	gate := make(chan struct{})
	var in atomic.Int32
	var opened atomic.Bool
	srv := b.serve(flowtype.LaneMain, func(flowtype.PendingCall) flowtype.ToolResult {
		if in.Add(1) >= 5 && opened.CompareAndSwap(false, true) {
			close(gate)
		}
		select {
		case <-gate:
		case <-b.ctx.Done():
		}
		in.Add(-1)
		return output(map[string]any{"ok": true})
	})
	b.register(parallelLevel("plvl1", 20, "tool: hold"))
	info := b.run(parallelLevel("plvl0", 3, "kind: workflow, workflow: plvl1"), nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("top: %s %+v", info.Status, info.Error)
	}
	if got := srv.calls.Load(); got != 60 {
		t.Fatalf("calls: %d", got)
	}
	// The top parallel's first branch runs free and its two others take 2 slots; each child's
	// first branch runs free (3) and the 2 slots left take 2 more calls: 5.
	if got := srv.maxSeen.Load(); got != 5 {
		t.Fatalf("%d calls in flight at once; max_tree_parallel 4 allows the first step of each live parallel list and 4 more: 5", got)
	}
}
