package mcpserver_test

import (
	"testing"
	"time"
)

// TestStatusListsChildRuns: workflows_get_status of a run whose workflow step ran a child lists
// the child (children: run id, step key, name, status) and the step's child_run_id; the
// child's status names its parent.
func TestStatusListsChildRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"wait_secs": 0,
		"spec": `{"name": "outer", "steps": [{"id": "sub", "kind": "workflow", "workflow": "gated", "inputs": {"shot": "sh010"}}]}`}, nil)
	if isErr {
		t.Fatalf("run: %v", out)
	}
	id := out["workflow_id"].(string)
	var child string
	for deadline := time.Now().Add(10 * time.Second); child == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		st, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": id}, nil)
		if kids, ok := st["children"].([]any); ok && len(kids) == 1 {
			k := kids[0].(map[string]any)
			if k["step_key"] != "sub" || k["name"] != "gated" {
				t.Fatalf("children: %v", kids)
			}
			child = k["run_id"].(string)
			steps := st["steps"].([]any)
			if s := steps[0].(map[string]any); s["child_run_id"] != child || s["kind"] != "workflow" {
				t.Fatalf("steps: %v", steps)
			}
		}
	}
	if child == "" {
		t.Fatal("the parent's status never listed its child run")
	}
	cs, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": child}, nil)
	if cs["parent_workflow_id"] != id || cs["parent_step_key"] != "sub" {
		t.Fatalf("child status: %v", cs)
	}
	// The parent lists the child as soon as it is stored, before the child reaches its gate:
	// approving earlier is refused (the step is not waiting for an approval yet).
	waitStatus(t, b.e, child, "waiting")
	if res, isErr := call(t, b.c, "workflows_approve", map[string]any{"workflow_id": child, "step": "human_gate", "approved": true}, nil); isErr {
		t.Fatalf("approve the child's gate: %v", res)
	}
	out, _ = call(t, b.c, "workflows_run", map[string]any{"wait_secs": 0, "workflow": "gated", "inputs": map[string]any{"shot": "x"}}, nil)
	st, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": out["workflow_id"]}, nil)
	if _, has := st["children"]; has {
		t.Fatalf("a run without workflow steps has no children field: %v", st)
	}
	_, _ = call(t, b.c, "workflows_cancel", map[string]any{"workflow_id": out["workflow_id"]}, nil)
	if _, err := b.e.Wait(t.Context(), id, 0); err != nil {
		t.Fatal(err)
	}
}
