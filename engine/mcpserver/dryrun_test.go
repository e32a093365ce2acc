package mcpserver_test

import (
	"context"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
)

// TestDryRunOverMCP: workflows_run with dry_run answers with the steps and their rendered args,
// records no run, and refuses approvals that are not booleans.
func TestDryRunOverMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"workflow": "gated", "inputs": map[string]any{"shot": "sh010"},
		"dry_run": true, "fixtures": map[string]any{"flow__echo": "from fixture"}}, nil)
	if isErr || out["status"] != "completed" {
		t.Fatalf("dry run: %v", out)
	}
	steps := out["steps"].([]any)
	first, gate := steps[0].(map[string]any), steps[1].(map[string]any)
	if first["key"] != "prep" || first["args"].(map[string]any)["value"] != "sh010" || first["output"] != "from fixture" ||
		first["output_from"] != "tool" || gate["approved"] != true || gate["prompt"] != "push sh010?" {
		t.Errorf("steps %v", steps)
	}
	if runs, err := b.e.Runs(context.Background(), engine.RunFilter{}); err != nil || len(runs) != 0 {
		t.Errorf("runs after a dry run: %v %v", runs, err)
	}
	out, isErr = call(t, b.c, "workflows_run", map[string]any{"workflow": "gated", "inputs": map[string]any{"shot": "sh010"},
		"dry_run": true, "approvals": map[string]any{"human_gate": "no"}}, nil)
	if !isErr || out["code"] != "invalid_request" {
		t.Errorf("approvals of a string: %v", out)
	}
}
