package mcpserver_test

import (
	"context"
	"testing"
	"time"
)

// workflows_pause holds a run waiting at its approval: answered while paused, the step after it
// does not start until workflows_unpause.
func TestPauseAndUnpauseOverMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"workflow": "gated", "inputs": map[string]any{"shot": "sh020"}}, nil)
	if isErr {
		t.Fatalf("run: %v", out)
	}
	id := out["workflow_id"].(string)
	waitStatus(t, b.e, id, "waiting")
	out, isErr = call(t, b.c, "workflows_pause", map[string]any{"workflow_id": id, "reason": "farm full", "by": "wrangler"}, nil)
	if isErr || out["status"] != "paused" || out["terminal"] != false {
		t.Fatalf("pause: %v", out)
	}
	if out, isErr = call(t, b.c, "workflows_pause", map[string]any{"workflow_id": id}, nil); isErr || out["status"] != "paused" {
		t.Fatalf("pausing twice: %v", out)
	}
	if out, isErr = call(t, b.c, "workflows_approve", map[string]any{"workflow_id": id, "step": "human_gate", "approved": true}, nil); isErr {
		t.Fatalf("approving a paused run: %v", out)
	}
	time.Sleep(100 * time.Millisecond)
	if st, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": id}, nil); st["status"] != "paused" {
		t.Fatalf("after the approval of a paused run: %v", st)
	}
	for _, s := range b.steps(t, id) {
		if s == "push" {
			t.Fatal("push started while the run was paused")
		}
	}
	out, isErr = call(t, b.c, "workflows_unpause", map[string]any{"workflow_id": id, "reason": "farm free"}, nil)
	if isErr || out["status"] == "paused" {
		t.Fatalf("unpause: %v", out)
	}
	info, err := b.e.Wait(context.Background(), id, 10*time.Second)
	if err != nil || info.Status != "completed" {
		t.Fatalf("after unpause: %v %+v", err, info)
	}
	if out, isErr = call(t, b.c, "workflows_pause", map[string]any{"workflow_id": id}, nil); !isErr || out["code"] != "invalid_state" {
		t.Fatalf("pausing a completed run: %v", out)
	}
}

// steps lists the keys of the run's step instances.
func (b *bundle) steps(t *testing.T, id string) []string {
	t.Helper()
	st, err := b.e.Steps(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(st))
	for i, s := range st {
		keys[i] = s.Key
	}
	return keys
}
