package gotest

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func TestGlobalIdempotencySurvivesReopen(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "flow.db")
	s, _ := spec.ParseString(`
name: push
steps:
  - id: push
    tool: push_asset
    args: {asset: hero}
    idempotency_key: "push_{{inputs.asset}}"
    idempotency_scope: global
inputs: {asset: {type: string, default: hero}}
`)
	var calls atomic.Int32
	for i := 0; i < 2; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		e, err := engine.Open(ctx, engine.Config{DB: db})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "push_asset"}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for ctx.Err() == nil {
				cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: 20 * time.Millisecond})
				if err != nil {
					return
				}
				for _, c := range cs {
					calls.Add(1)
					_ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: "pushed"})
				}
			}
		}()
		info, err := e.Run(ctx, engine.StartRequest{Spec: s})
		if err != nil || info.Status != run.StatusCompleted || info.Outputs["push"] != "pushed" {
			t.Fatalf("run %d: %v %+v", i, err, info)
		}
		if i == 1 && !info.Steps[0].Cached {
			t.Fatalf("second engine: step not served from the cache: %+v", info.Steps[0])
		}
		cancel()
		if err := e.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the tool was called %d times across two engines, want 1", n)
	}
}

func TestFileDatabaseKeepsHistoryAndPrunes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "sub", "flow.db")
	e, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := spec.ParseString("name: echo\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
	info, err := e.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatal(err, info)
	}
	last, _ := e.LastSeq(ctx)
	e.Close(ctx)

	e, err = engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	runs, err := e.Runs(ctx, engine.RunFilter{Name: "echo"})
	if err != nil || len(runs) != 1 || runs[0].ID != info.ID {
		t.Fatalf("%v %+v", err, runs)
	}
	info2, _ := e.Run(ctx, engine.StartRequest{Spec: s})
	evs, _ := e.PollEvents(ctx, engine.EventQuery{RunID: info2.ID}, 0)
	if evs[0].Seq <= last {
		t.Fatalf("event seq restarted: %d after %d", evs[0].Seq, last)
	}
	if n, err := e.Prune(ctx, time.Now().Add(time.Hour)); err != nil || n != 2 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if runs, _ := e.Runs(ctx, engine.RunFilter{}); len(runs) != 0 {
		t.Fatalf("after prune: %+v", runs)
	}
}

// An in-memory engine keeps every run until it prunes them; Prune works on it as on a file
// database: by age and by finished status, never a run still going, and a status that is not
// a finished one is refused naming the field.
func TestInMemoryEnginePrunesFinishedRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 3 {
		b.run("name: ok\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]", nil)
	}
	failed := b.run("name: bad\nsteps: [{id: a, tool: flow__fail, args: {kind: error, message: no}}]", nil)
	gated := b.submit("name: gated\nsteps: [{id: gate, kind: approve, prompt: ship}]", nil)
	b.waitFor("the gate to open", func() bool { return b.status(gated).Status == run.StatusWaiting })

	_, err := b.eng.Prune(b.ctx, time.Now().Add(time.Hour), run.StatusRunning)
	if re := asRunError(err); re == nil || re.Code != run.CodeInvalidRequest || !strings.Contains(re.Message, "statuses") ||
		!strings.Contains(re.Message, `"running"`) {
		t.Fatalf("pruning running runs: %v", err)
	}
	if n, err := b.eng.Prune(b.ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("pruning runs finished over an hour ago: %d %v", n, err)
	}
	if n, err := b.eng.Prune(b.ctx, time.Now().Add(time.Hour), run.StatusFailed); err != nil || n != 1 {
		t.Fatalf("pruning failed runs: %d %v", n, err)
	}
	if _, err := b.eng.Status(b.ctx, failed.ID); codeOf(err) != run.CodeNotFound {
		t.Fatalf("status of the pruned run: %v", err)
	}
	if n, err := b.eng.Prune(b.ctx, time.Now().Add(time.Hour)); err != nil || n != 3 {
		t.Fatalf("pruning every finished run: %d %v", n, err)
	}
	runs, err := b.eng.Runs(b.ctx, engine.RunFilter{})
	if err != nil || len(runs) != 1 || runs[0].ID != gated {
		t.Fatalf("after pruning, the runs are %+v (%v); want only the waiting one", runs, err)
	}
	if err := b.eng.Approve(b.ctx, gated, "gate", true, "", "test"); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(gated); info.Status != run.StatusCompleted {
		t.Fatalf("the run left alone by the prune: %+v", info)
	}
}

func TestScheduleFiresPersistInTheDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "flow.db")
	e, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := spec.ParseString("name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "h", Workflow: "hook", Enabled: true, MaxConcurrent: 0,
		Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/h"}}); err != nil {
		t.Fatal(err)
	}
	ws, err := e.ServeWebhooks("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post("http://"+ws.Addr()+"/h", "application/json", strings.NewReader(`{"x": 1}`))
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("%v %v", err, resp)
	}
	resp.Body.Close()
	_ = ws.Close(ctx)
	e.Close(ctx)

	e, err = engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	fires, err := e.ScheduleFires(ctx, "h", 0)
	if err != nil || len(fires) != 1 || fires[0].RunID == "" || fires[0].Origin != "webhook" {
		t.Fatalf("fires after reopen: %+v %v", fires, err)
	}
}

// Prune is a store feature (store.Pruner): an engine on a store without it says so.
func TestPruneNeedsAStoreThatPrunes(t *testing.T) {
	t.Parallel()
	mem := engine.NewMemoryStore()
	defer mem.Close()
	b := setup(t, withOptions(engine.WithStore(struct{ engine.Store }{mem})))
	if n, err := b.eng.Prune(b.ctx, t0); run.CodeOf(err) != run.CodeInvalidState || n != 0 {
		t.Fatalf("Prune on a store without Prune = %d, %v; want code invalid_state", n, err)
	}
}
