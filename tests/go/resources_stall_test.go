package gotest

import (
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A run whose only tool step waits for its resources (waiting_resources, behind another run
// holding the one unit) is not stalled however long it waits: no stall_detected. The holder,
// whose tool is stuck, is.
func TestNoStallWhileWaitingForResources(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock(), withConfig(func(c *engine.Config) {
		c.StallAfterSecs = 30
		c.Resources = map[string]engine.ResourceConfig{"houdini": {Limit: 1}}
	}))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "never_pulled"}); err != nil {
		t.Fatal(err)
	}
	const spec = "steps: [{ id: cook, tool: never_pulled, resources: { houdini: 1 } }]"
	holder := b.submit(spec, nil)
	b.waitStep(holder, "cook", run.StepRunning)
	waiter := b.submit(spec, nil)
	b.waitStep(waiter, "cook", run.StepWaitingResources)
	b.waitTimers(2) // the two runs' stall checks
	for range 20 {
		b.clk.Advance(30 * time.Second)
	}
	if got := b.eventTypes(waiter, run.EventStallDetected); len(got) != 0 {
		t.Fatalf("a run waiting for a licence is not stalled: %v", got)
	}
	if got := b.eventTypes(holder, run.EventStallDetected); len(got) != 1 {
		t.Fatalf("the stuck holder's stall events: %v; want one", got)
	}
	if st := b.status(waiter); st.Status != run.StatusRunning || st.Steps[0].Status != run.StepWaitingResources {
		t.Fatalf("the waiting run: %s, its step %s", st.Status, st.Steps[0].Status)
	}
	for _, id := range []string{waiter, holder} {
		if err := b.eng.Cancel(b.ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		b.wait(id)
	}
}
