package gotest

import (
	"fmt"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// countingTool registers host tool "dcc__export" served by a goroutine that counts calls and
// answers {"n": <call number>}.
func countingTool(t *testing.T, b *testBundle) *server {
	t.Helper()
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "dcc__export", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	var s *server
	s = b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		return output(map[string]any{"n": float64(s.calls.Load()), "scene": c.Args["scene"]})
	})
	return s
}

func idemSpec(scope string, ttl int, key string) string {
	ttlLine := ""
	if ttl > 0 {
		ttlLine = fmt.Sprintf("\n    idempotency_ttl_secs: %d", ttl)
	}
	return fmt.Sprintf(`
name: idem
inputs: { scene: { type: string, default: a.ma } }
steps:
  - id: export
    tool: dcc__export
    args: { scene: "{{inputs.scene}}" }
    idempotency_key: %q
    idempotency_scope: %s%s
`, key, scope, ttlLine)
}

func TestGlobalIdempotencyKeyAcrossRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := countingTool(t, b)
	first := b.run(idemSpec("global", 0, "export_{{inputs.scene}}"), nil)
	second := b.run(idemSpec("global", 0, "export_{{inputs.scene}}"), nil)
	if srv.calls.Load() != 1 {
		t.Fatalf("the tool was called %d times, want 1", srv.calls.Load())
	}
	if first.Status != run.StatusCompleted || second.Status != run.StatusCompleted {
		t.Fatalf("statuses %s %s", first.Status, second.Status)
	}
	if jsonOf(t, first.Outputs["export"]) != jsonOf(t, second.Outputs["export"]) {
		t.Fatalf("the cached output differs: %v vs %v", first.Outputs["export"], second.Outputs["export"])
	}
	a, c := b.steps(first.ID)["export"], b.steps(second.ID)["export"]
	if a.Cached || !c.Cached || c.Attempts != 0 || c.Status != run.StepCompleted {
		t.Fatalf("cached flags: first %+v second %+v", a, c)
	}
	exits := b.events(second.ID)
	var exit run.Event
	for _, e := range exits {
		if e.Type == run.EventStepExit {
			exit = e
		}
	}
	mustContain(t, "exit detail", string(exit.Detail), `"cached":true`)
	// Another key calls the tool again.
	if info := b.run(idemSpec("global", 0, "export_{{inputs.scene}}"), map[string]any{"scene": "b.ma"}); info.Status != run.StatusCompleted || srv.calls.Load() != 2 {
		t.Fatalf("another key: %s, %d calls", info.Status, srv.calls.Load())
	}
}

func TestWorkflowScopeIsPerRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := countingTool(t, b)
	text := `
name: per_run
steps:
  - id: twice
    kind: foreach
    items: [1, 2]
    steps:
      - id: export
        tool: dcc__export
        args: { scene: a.ma }
        idempotency_key: "export_a"
`
	one := b.run(text, nil)
	if srv.calls.Load() != 1 {
		t.Fatalf("within a run the key is shared: %d calls", srv.calls.Load())
	}
	st := b.steps(one.ID)
	if st["twice[0].export"].Cached || !st["twice[1].export"].Cached {
		t.Fatalf("second iteration should be cached: %+v %+v", st["twice[0].export"], st["twice[1].export"])
	}
	b.run(text, nil)
	if srv.calls.Load() != 2 {
		t.Fatalf("workflow scope does not cross runs: %d calls", srv.calls.Load())
	}
}

func TestIdempotencyTTL(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	srv := countingTool(t, b)
	text := idemSpec("global", 60, "auto")
	b.run(text, nil)
	b.clk.Advance(59 * time.Second)
	b.run(text, nil)
	if srv.calls.Load() != 1 {
		t.Fatalf("within the TTL: %d calls", srv.calls.Load())
	}
	b.clk.Advance(time.Second) // 60 s after the write: expired
	third := b.run(text, nil)
	if srv.calls.Load() != 2 || b.steps(third.ID)["export"].Cached {
		t.Fatalf("after the TTL the tool runs again: %d calls", srv.calls.Load())
	}
	b.clk.Advance(30 * time.Second)
	fourth := b.run(text, nil)
	if srv.calls.Load() != 2 || !b.steps(fourth.ID)["export"].Cached {
		t.Fatalf("the new entry is cached again: %d calls", srv.calls.Load())
	}
	if n, err := b.eng.PurgeExpired(b.ctx); err != nil || n != 0 {
		t.Fatalf("nothing is expired yet: %d %v", n, err)
	}
	b.clk.Advance(30 * time.Second)
	if n, err := b.eng.PurgeExpired(b.ctx); err != nil || n != 1 {
		t.Fatalf("PurgeExpired after the TTL: %d %v", n, err)
	}
}

func TestAutoKeyHashesToolAndArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := countingTool(t, b)
	for _, scene := range []string{"a.ma", "b.ma", "a.ma", "b.ma"} {
		b.run(idemSpec("global", 0, "auto"), map[string]any{"scene": scene})
	}
	if srv.calls.Load() != 2 {
		t.Fatalf("auto keys: %d calls, want 2", srv.calls.Load())
	}
}

func TestFailuresAreNotCached(t *testing.T) {
	t.Parallel()
	b := setup(t)
	text := `
steps:
  - id: s
    tool: flow__fail
    args: { kind: fatal }
    idempotency_key: same
    idempotency_scope: global
`
	for i := range 2 {
		info := b.run(text, nil)
		st := b.steps(info.ID)["s"]
		if info.Status != run.StatusFailed || st.Cached || st.Attempts != 1 {
			t.Fatalf("run %d: a failure must not be cached: %s %+v", i+1, info.Status, st)
		}
	}
}
