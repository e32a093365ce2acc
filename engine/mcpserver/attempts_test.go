package mcpserver_test

import (
	"testing"
	"time"
)

// TestStatusHasAttemptsAndResumes: workflows_get_status lists each tool step's attempts (their
// rendered args, the secret redacted, and errors) and, once the run was resumed over MCP, its
// resume history (by "mcp", the steps forced).
func TestStatusHasAttemptsAndResumes(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"wait_secs": 10,
		"spec": `{"name": "flaky", "steps": [{"id": "push", "tool": "flow__fail", "args": {"times": 1, "kind": "transient", "password": "hunter2"},
			"retry": {"max_attempts": 2, "initial_delay_ms": 1}}]}`}, nil)
	if isErr {
		t.Fatalf("run: %v", out)
	}
	id := out["workflow_id"].(string)
	st, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": id}, nil)
	step := st["steps"].([]any)[0].(map[string]any)
	atts, _ := step["attempt_history"].([]any)
	if len(atts) != 2 || step["args"].(map[string]any)["password"] != "[redacted]" {
		t.Fatalf("step: %v", step)
	}
	if first := atts[0].(map[string]any); first["status"] != "failed" || first["error"].(map[string]any)["kind"] != "transient" {
		t.Fatalf("first attempt: %v", first)
	}
	if _, has := st["resumes"]; has {
		t.Fatalf("a run never resumed has no resumes: %v", st)
	}
	if res, isErr := call(t, b.c, "workflows_resume", map[string]any{"workflow_id": id, "force_steps": []string{"push"}}, nil); isErr {
		t.Fatalf("resume: %v", res)
	}
	if _, err := b.e.Wait(t.Context(), id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ = call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": id}, nil)
	rs, _ := st["resumes"].([]any)
	if len(rs) != 1 || rs[0].(map[string]any)["by"] != "mcp" || len(rs[0].(map[string]any)["forced"].([]any)) != 1 {
		t.Fatalf("resumes: %v", st["resumes"])
	}
	if atts := st["steps"].([]any)[0].(map[string]any)["attempt_history"].([]any); len(atts) != 4 {
		t.Fatalf("attempts after the resume: %v", atts)
	}
}
