package mcpserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
)

// workflows_run's priority is the run's own, over its spec's, as `dcc-flow run --priority`:
// a run started with priority 50 waits in the resource queue with priority 50. A priority out
// of range, a fraction or a string is refused (invalid_request) and starts nothing. The waiting
// step is waiting_resources in workflows_get_status, with what it waits for.
func TestRunPriorityOverMCP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Resources: map[string]engine.ResourceConfig{"houdini": {Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	b := setupOn(t, "stdio", e)
	const sim = "name: sim\npriority: 3\nsteps: [{id: cook, tool: flow__sleep, args: {ms: 60000}, resources: {houdini: 1}}]"
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": sim}, nil)
	if isErr {
		t.Fatalf("first run: %v", out)
	}
	holder := out["workflow_id"].(string)
	// The holder's step takes the unit before the second run starts (else the second could take
	// it first, and the holder would be the one waiting).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		info, err := e.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h := info.Resources[0].Holders; len(h) == 1 && h[0].RunID == holder {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first run never took the unit: %+v", info)
		}
	}
	out, isErr = call(t, b.c, "workflows_run", map[string]any{"spec": sim, "priority": 50}, nil)
	if isErr {
		t.Fatalf("run with priority 50: %v", out)
	}
	waiter := out["workflow_id"].(string)
	var queue []engine.ResourceWaiter
	for deadline := time.Now().Add(10 * time.Second); len(queue) == 0; time.Sleep(2 * time.Millisecond) {
		info, err := e.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		queue = info.Resources[0].Queue
		if time.Now().After(deadline) {
			t.Fatalf("the run of priority 50 never queued: %+v", info)
		}
	}
	if len(queue) != 1 || queue[0].Label != waiter+"/cook" || queue[0].Priority != 50 {
		t.Fatalf("queue %+v; want %s waiting with priority 50", queue, waiter)
	}
	// workflows_get_status shows the waiting step as waiting_resources, with what it waits for.
	// (The step's record is written just after it queues.)
	var st map[string]any
	for deadline := time.Now().Add(10 * time.Second); st == nil || st["status"] != "waiting_resources"; time.Sleep(2 * time.Millisecond) {
		out, isErr = call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": waiter}, nil)
		steps, _ := out["steps"].([]any)
		if isErr || out["status"] != "running" || len(steps) != 1 {
			t.Fatalf("status of the waiting run: %v", out)
		}
		st = steps[0].(map[string]any)
		if time.Now().After(deadline) {
			t.Fatalf("the waiting step over MCP: %v", st)
		}
	}
	w, _ := st["waiting"].(map[string]any)
	if st["status"] != "waiting_resources" || w == nil || w["place"] != 1.0 || w["of"] != 1.0 ||
		w["resources"].(map[string]any)["houdini"] != 1.0 || w["since"] == nil {
		t.Fatalf("the waiting step over MCP: %v", st)
	}
	for _, bad := range []any{1001, -1001, 1.5, 1e300, -1e19, "high", true, []any{5}} {
		out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": sim, "priority": bad}, nil)
		if msg, _ := out["message"].(string); !isErr || out["code"] != "invalid_request" || !strings.Contains(msg, "priority must be") {
			t.Errorf("priority %v: isError %v, %v", bad, isErr, out)
		}
	}
	runs, err := e.Runs(ctx, engine.RunFilter{})
	if err != nil || len(runs) != 2 {
		t.Fatalf("runs %+v, %v; want only %s and %s", runs, err, holder, waiter)
	}
	for _, id := range []string{holder, waiter} {
		if err := e.Cancel(ctx, id, "done"); err != nil {
			t.Fatal(err)
		}
	}
}
