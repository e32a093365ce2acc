package gotest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// binaryTree returns a complete binary tree of the given depth: 2^depth - 1 objects.
func binaryTree(depth int) any {
	if depth == 1 {
		return map[string]any{"leaf": true}
	}
	return map[string]any{"l": binaryTree(depth - 1), "r": binaryTree(depth - 1)}
}

// failedStep checks that a run failed at step key with kind limit_exceeded and a message holding
// every part of want, and returns the message.
func failedStep(t *testing.T, b *testBundle, info *engine.RunInfo, key string, want ...string) string {
	t.Helper()
	if info.Status != run.StatusFailed {
		t.Fatalf("status %s, want failed", info.Status)
	}
	st := b.steps(info.ID)[key]
	if st.Status != run.StepFailed || st.Error == nil || st.Error.Kind != "limit_exceeded" {
		t.Fatalf("step %s: %+v %+v, want failed with kind limit_exceeded", key, st, st.Error)
	}
	for _, w := range want {
		if !strings.Contains(st.Error.Message, w) {
			t.Errorf("step %s message %q lacks %q", key, st.Error.Message, w)
		}
	}
	return st.Error.Message
}

// stillWorks runs a small foreach on b's engine.
func stillWorks(t *testing.T, b *testBundle) {
	t.Helper()
	info := b.run(`
steps:
  - { id: list, tool: flow__echo, args: { files: [a, b] } }
  - { id: each, kind: foreach, items: "$.list.files", steps: [{ id: s, tool: flow__echo, args: { f: "{{item}}" } }] }
`, nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("the engine no longer runs workflows: %s %+v", info.Status, info.Error)
	}
}

// TestRedteamChainedDescendantJSONPathFailsTheStep: chained "..*" over a tool's output grew
// past 7.8 GB (six over a 4,095-node tree; three over a 511-deep chain took 71 s). Now the
// foreach or branch fails with kind limit_exceeded in well under a second, the message names
// the step, the path, the limit and the config key, and the engine goes on.
func TestRedteamChainedDescendantJSONPathFailsTheStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "scene__tree"}); err != nil {
		t.Fatal(err)
	}
	var chain any = []any{1.0}
	for range 511 {
		chain = []any{chain}
	}
	b.serve(flowtype.LaneMain, func(flowtype.PendingCall) flowtype.ToolResult {
		return output(map[string]any{"tree": binaryTree(12), "chain": chain})
	})
	start := time.Now()
	info := b.run(`
steps:
  - { id: scene, tool: scene__tree }
  - id: each
    kind: foreach
    items: "$.scene.tree..*..*..*..*..*..*"
    steps: [{ id: s, tool: flow__echo }]
`, nil)
	failedStep(t, b, info, "each", "foreach each", `"$.scene.tree..*..*..*..*..*..*"`, "more than 1,000,000 nodes",
		"jsonpath_max_results", "up to 100,000,000")
	info = b.run(`
steps:
  - { id: scene, tool: scene__tree }
  - id: pick
    kind: branch
    on: "$.scene.chain..*..*..*"
    then: [{ id: yes, tool: flow__echo }]
    else: [{ id: no, tool: flow__echo }]
`, nil)
	failedStep(t, b, info, "pick", "branch pick", "`on`", "jsonpath_max_results")
	if steps := b.steps(info.ID); steps["yes"].Status != run.StepSkipped || steps["no"].Status != run.StepSkipped {
		t.Errorf("the branch's lists: %+v %+v, want skipped", steps["yes"], steps["no"])
	}
	// The limit, not time, stops the evaluations (the failures above name it); the bound only
	// catches one that runs on: unbounded, the chain alone took 71 s. Measured: about 1 s, 4.4 s
	// with the race detector beside the rest of the suite.
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("took %v", took)
	}
	stillWorks(t, b)
}

// TestRedteamJSONPathLimitsAreConfigurable: the engine config lowers (or raises) both limits.
func TestRedteamJSONPathLimitsAreConfigurable(t *testing.T) {
	t.Parallel()
	b := setup(t, withConfig(func(c *engine.Config) { c.JSONPathMaxResults, c.JSONPathMaxWork = 10, 1000 }))
	spec := `
inputs: { files: { type: array } }
steps:
  - { id: each, kind: foreach, items: "$.files[*]", steps: [{ id: s, tool: flow__echo }] }
`
	if info := b.run(spec, map[string]any{"files": numbers(10)}); info.Status != run.StatusCompleted {
		t.Fatalf("10 nodes within jsonpath_max_results 10: %s %+v", info.Status, info.Error)
	}
	failedStep(t, b, b.run(spec, map[string]any{"files": numbers(11)}), "each", "more than 10 nodes", "raise jsonpath_max_results")
	failedStep(t, b, b.run(`
inputs: { files: { type: array } }
steps:
  - { id: each, kind: foreach, items: "$.files[?@ > 5000]", steps: [{ id: s, tool: flow__echo }] }
`, map[string]any{"files": numbers(2000)}), "each", "more than 1,000 units of work", "jsonpath_max_work", "up to 1,000,000,000")
	stillWorks(t, b)
}

// TestRedteamForeachItemCap: a foreach of 1,000,000 items was accepted and took 3.6 GB. Past
// max_foreach_items (100,000 by default, the size of make bench's foreach) the foreach fails
// before any iteration, with the count, the limit, a memory estimate and the config key.
func TestRedteamForeachItemCap(t *testing.T) {
	t.Parallel()
	spec := `
inputs: { items: { type: array } }
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 8
    steps:
      - { id: s, tool: flow__echo, args: { v: "{{item}}" } }
      - { id: t, tool: flow__echo }
`
	b := setup(t)
	start := time.Now()
	info := b.run(spec, map[string]any{"items": numbers(100_001)})
	failedStep(t, b, info, "each", "foreach each", "100,001 items", "limit of 100,000", "max_foreach_items",
		"about 1.5 KB per item and body step", "about 293 MB", "up to 10,000,000")
	if n := len(b.steps(info.ID)); n != 1 {
		t.Errorf("%d step instances, want only the foreach", n)
	}
	// No iteration ran (above); the bound only catches a check that comes after expanding the
	// items. Measured: 1.4 s with the race detector beside the rest of the suite.
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("took %v", took)
	}
	stillWorks(t, b)

	b = setup(t, withConfig(func(c *engine.Config) { c.MaxForeachItems = 3 }))
	if info := b.run(spec, map[string]any{"items": numbers(3)}); info.Status != run.StatusCompleted {
		t.Fatalf("3 items within max_foreach_items 3: %s %+v", info.Status, info.Error)
	}
	failedStep(t, b, b.run(spec, map[string]any{"items": numbers(4)}), "each", "4 items, more than the limit of 3")
}

// TestRedteamLimitConfigRange: the limits' config keys take 0 (the default) or 1 to their ceiling.
func TestRedteamLimitConfigRange(t *testing.T) {
	t.Parallel()
	for _, cfg := range []engine.Config{{MaxForeachItems: -1}, {MaxForeachItems: 10_000_001}, {JSONPathMaxResults: -5},
		{JSONPathMaxResults: 100_000_001}, {JSONPathMaxWork: 1_000_000_001}} {
		_, err := engine.Open(t.Context(), cfg)
		if run.CodeOf(err) != run.CodeInvalidRequest {
			t.Errorf("Open(%+v) = %v, want invalid_request", cfg, err)
		}
	}
	eng, err := engine.Open(t.Context(), engine.Config{MaxForeachItems: 10_000_000, JSONPathMaxResults: 100_000_000, JSONPathMaxWork: 1_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	_ = eng.Close(t.Context())
}

// TestStatusWithRawOutputs: under engine.WithRawOutputs, Status and Steps give the stored JSON
// of each output instead of decoding it (the C ABI canonicalises it without decoding).
func TestStatusWithRawOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(`steps: [{ id: e, tool: flow__echo, args: { b: 1, a: [x] } }]`, nil)
	raw, err := b.eng.Status(engine.WithRawOutputs(b.ctx), info.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, ok := raw.Outputs["e"].(json.RawMessage)
	if !ok || string(out) != `{"a":["x"],"b":1}` {
		t.Fatalf("raw output %T %s", raw.Outputs["e"], raw.Outputs["e"])
	}
	steps, err := b.eng.Steps(engine.WithRawOutputs(b.ctx), info.ID)
	if err != nil || len(steps) != 1 || string(steps[0].Output.(json.RawMessage)) != string(out) {
		t.Fatalf("steps %+v %v", steps, err)
	}
	if _, ok := info.Outputs["e"].(map[string]any); !ok {
		t.Fatalf("decoded output %T", info.Outputs["e"])
	}
}
