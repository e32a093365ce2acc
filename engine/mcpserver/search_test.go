package mcpserver_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSearchRuns: workflows_search finds runs by input value, tool, error kind and error text,
// pages with next_cursor, and a bad filter is an invalid_input error naming the valid values.
func TestSearchRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	var ids []string
	for _, shot := range []string{"sh010", "sh020", "sh010"} {
		out, isErr := call(t, b.c, "workflows_run", map[string]any{"wait_secs": 10, "inputs": map[string]any{"shot": shot},
			"spec": `{"name": "flaky", "inputs": {"shot": {"type": "string"}}, "steps": [{"id": "push", "tool": "flow__fail",
				"args": {"times": 1, "kind": "transient", "shot": "{{inputs.shot}}"}, "retry": {"max_attempts": 2, "initial_delay_ms": 1}}]}`}, nil)
		if isErr {
			t.Fatalf("run: %v", out)
		}
		ids = append(ids, out["workflow_id"].(string))
	}
	found := func(args map[string]any) (string, string) {
		t.Helper()
		out, isErr := call(t, b.c, "workflows_search", args, nil)
		if isErr {
			t.Fatalf("workflows_search(%v): %v", args, out)
		}
		var got []string
		for _, r := range out["runs"].([]any) {
			got = append(got, r.(map[string]any)["workflow_id"].(string))
		}
		return strings.Join(got, " "), out["next_cursor"].(string)
	}
	if got, _ := found(map[string]any{"inputs": map[string]any{"shot": "sh010"}}); got != ids[2]+" "+ids[0] {
		t.Errorf("shot=sh010: %q, want %s %s", got, ids[2], ids[0])
	}
	if got, _ := found(map[string]any{"tool": "flow__fail", "error_kind": "transient", "error_text": "FAILURE 1"}); got != ids[2]+" "+ids[1]+" "+ids[0] {
		t.Errorf("tool, kind and text: %q", got)
	}
	got, next := found(map[string]any{"limit": 2})
	if got != ids[2]+" "+ids[1] || next == "" {
		t.Fatalf("page 1: %q, cursor %q", got, next)
	}
	if got, next := found(map[string]any{"limit": 2, "cursor": next}); got != ids[0] || next != "" {
		t.Errorf("page 2: %q, cursor %q", got, next)
	}
	for args, want := range map[string]string{
		`{"error_kind": "timout"}`:  "timeout, transient",
		`{"step_status": ["done"]}`: "completed, failed",
		`{"since": "yesterday"}`:    "RFC 3339",
		`{"cursor": "nope"}`:        "next_cursor",
	} {
		var a map[string]any
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			t.Fatal(err)
		}
		out, isErr := call(t, b.c, "workflows_search", a, nil)
		if !isErr || out["code"] != "invalid_request" || !strings.Contains(out["message"].(string), want) {
			t.Errorf("workflows_search(%s) = %v; want invalid_request naming %q", args, out, want)
		}
	}
}
