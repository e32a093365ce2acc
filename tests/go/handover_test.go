package gotest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Closing an engine on a shared database hands its runs to the other engines
// (docs/operations/cluster.md, "Closing an engine"), with engines in this process.

// handoverLease is long so that only the hand-over, never a lease's expiry, can explain a run
// going on elsewhere within a few seconds (the sweep of expired leases runs every 40 s).
const handoverLease = 120

// waitStep waits until the step instance key of run id is in status want, as e sees it.
// logRun logs run id's events as e reads them and its row in the database db, for a failing
// test's message.
func logRun(t *testing.T, e *engine.Engine, db, id string) {
	t.Helper()
	ev, _ := e.PollEvents(context.Background(), engine.EventQuery{RunID: id}, time.Millisecond)
	for _, x := range ev {
		t.Logf("%s %s %s %s %s", x.Time.Format("15:04:05.000"), x.Type, x.StepKey, x.Status, x.Detail)
	}
	t.Logf("row: %s", runRow(t, db, id))
}

func waitStep(t *testing.T, e *engine.Engine, id, key string, want run.StepStatus) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		steps, err := e.Steps(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			if st.Key == key && st.Status == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("step %s of %s never %s: %+v", key, id, want, steps)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stepCounter answers a host tool's calls and counts them by args.step.
type stepCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

func (c *stepCounter) answer(args map[string]any) flowtype.ToolResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[args["step"].(string)]++
	return flowtype.ToolResult{Output: map[string]any{"ok": true}}
}

func (c *stepCounter) count(step string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[step]
}

// An engine closed with a run in flight hands it to another engine, which finishes it at once:
// the step that completed is not called again, the step in flight runs again there, and the run
// completes (not interrupted).
func TestClosingEngineHandsItsRunOver(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	count := &stepCounter{calls: map[string]int{}}
	a := openLeasedEngine(t, db, handoverLease, "count", count.answer, nil)
	b := openLeasedEngine(t, db, handoverLease, "count", count.answer, nil)
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: handed
steps:
  - {id: first, tool: count, args: {step: first}}
  - {id: wait, tool: flow__sleep, args: {ms: 1500}, depends_on: [first]}
  - {id: last, tool: count, args: {step: last}, depends_on: [wait]}
`)})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, a, id, "wait", run.StepRunning)
	closed := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.LeaseStats(); st.HandedOver != 1 || st.Abandoned != 0 {
		t.Fatalf("closing engine's lease stats: %+v", st)
	}
	info, err := b.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		logRun(t, b, db, id)
		t.Fatalf("run after the hand-over: %+v %v; b %+v", info, err, b.LeaseStats())
	}
	// The sleep ran again in full (1.5 s) on b; the hand-over itself is one notification.
	if took := time.Since(closed); took > 6*time.Second {
		t.Fatalf("the run ended %s after its engine closed; with a %d s lease only the hand-over explains an end within seconds", took, handoverLease)
	}
	if st := b.LeaseStats(); st.TakenOver != 1 {
		t.Fatalf("the other engine's lease stats: %+v", st)
	}
	if count.count("first") != 1 || count.count("last") != 1 {
		t.Fatalf("calls: %v, want first and last once each", count.calls)
	}
	steps, err := b.Steps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		if st.Status != run.StepCompleted || st.Key == "first" && st.Attempts != 1 {
			t.Fatalf("steps: %+v", steps)
		}
	}
}

// A run whose tool no other live engine hosts is stopped as on a database of one's own: it
// becomes interrupted, and no engine takes it.
func TestClosingEngineInterruptsWhatNoOtherEngineCanRun(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	a := openLeasedEngine(t, db, handoverLease, "maya_only", nil, nil) // pulled, never answered
	b := openLeasedEngine(t, db, handoverLease, "", nil, nil)
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: local
steps: [{id: m, tool: maya_only}]
`)})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, a, id, "m", run.StepRunning)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.LeaseStats(); st.HandedOver != 0 {
		t.Fatalf("closing engine's lease stats: %+v", st)
	}
	info, err := b.Status(ctx, id)
	if err != nil || info.Status != run.StatusInterrupted {
		t.Fatalf("run: %+v %v", info, err)
	}
	time.Sleep(300 * time.Millisecond) // a sweep woken by the close would take it now
	if st := b.LeaseStats(); st.TakenOver != 0 {
		t.Fatalf("the other engine took an interrupted run: %+v", st)
	}
}

// Whether another engine can run a run is judged down its sub-workflows too: a run whose
// catalog child calls a tool only the closing engine hosts is not handed over.
func TestClosingEngineJudgesSubWorkflowsToo(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	a := openLeasedEngine(t, db, handoverLease, "maya_only", nil, nil)
	b := openLeasedEngine(t, db, handoverLease, "", nil, nil)
	if err := a.Register(mustSpec(t, "name: in_maya\nsteps: [{id: m, tool: maya_only}]\n")); err != nil {
		t.Fatal(err)
	}
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: parent
steps:
  - {id: first, tool: flow__sleep, args: {ms: 5000}}
  - {id: sub, kind: workflow, workflow: in_maya, depends_on: [first]}
`)})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, a, id, "first", run.StepRunning)
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.LeaseStats(); st.HandedOver != 0 {
		t.Fatalf("handed over a run whose sub-workflow needs the closing engine: %+v", st)
	}
	if info, err := b.Wait(ctx, id, 5*time.Second); err != nil || info.Status != run.StatusInterrupted {
		t.Fatalf("run: %+v %v", info, err)
	}
}

// A run with a paused child run is not handed over: the resume that a takeover makes would
// unpause the child, which only a person may do. The parent becomes interrupted; the child
// stays paused.
func TestClosingEngineKeepsARunWithAPausedChild(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	a := openLeasedEngine(t, db, handoverLease, "", nil, nil)
	b := openLeasedEngine(t, db, handoverLease, "", nil, nil)
	if err := a.Register(mustSpec(t, "name: napping\nsteps: [{id: nap, tool: flow__sleep, args: {ms: 5000}}]\n")); err != nil {
		t.Fatal(err)
	}
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: parent
steps: [{id: sub, kind: workflow, workflow: napping}]
`)})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, a, id, "sub", run.StepRunning)
	var child string
	deadline := time.Now().Add(10 * time.Second)
	for child == "" {
		info, err := a.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(info.Children) > 0 {
			child = info.Children[0].ID
		} else if time.Now().After(deadline) {
			t.Fatalf("no child run: %+v", info)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitStep(t, a, child, "nap", run.StepRunning)
	if err := a.Pause(ctx, child, "checking", "td"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.LeaseStats(); st.HandedOver != 0 {
		t.Fatalf("handed over a run with a paused child: %+v", st)
	}
	if info, err := b.Status(ctx, child); err != nil || info.Status != run.StatusPaused {
		t.Fatalf("child: %+v %v", info, err)
	}
	if st := b.LeaseStats(); st.TakenOver != 0 {
		t.Fatalf("the other engine took it: %+v", st)
	}
}

// An engine marked closing (here by hand, as its Close marks it first) is not handed runs,
// though it hosts their tools: it would not claim them. The run becomes interrupted.
func TestClosingEngineDoesNotHandRunsToAClosingOne(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	a := openLeasedEngine(t, db, handoverLease, "", nil, nil)
	w := openLeasedEngine(t, db, handoverLease, "farm", nil, nil) // pulled, never answered
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: farmed
steps:
  - {id: first, tool: flow__sleep, args: {ms: 5000}}
  - {id: render, tool: farm, depends_on: [first]}
`)})
	if err != nil {
		t.Fatal(err)
	}
	waitStep(t, a, id, "first", run.StepRunning)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE engines SET closing = true WHERE id = $1`, w.EngineID()); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.LeaseStats(); st.HandedOver != 0 {
		t.Fatalf("handed a run to a closing engine: %+v", st)
	}
	if info, err := w.Wait(ctx, id, 5*time.Second); err != nil || info.Status != run.StatusInterrupted {
		t.Fatalf("run: %+v %v", info, err)
	}
}

// A call the closing engine queued for a worker engine is not made twice: the engine that takes
// the run over adopts the call in flight, and its outcome completes the run.
func TestClosingEngineLeavesItsQueuedCallToTheNextOrchestrator(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	release := make(chan struct{})
	var pulls atomic.Int32
	a := openLeasedEngine(t, db, handoverLease, "", nil, nil)
	worker := openLeasedEngine(t, db, handoverLease, "farm", func(args map[string]any) flowtype.ToolResult {
		<-release
		return flowtype.ToolResult{Output: map[string]any{"frames": 240}}
	}, &pulls)
	b := openLeasedEngine(t, db, handoverLease, "", nil, nil)
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: farmed
steps: [{id: render, tool: farm}]
`)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for pulls.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker never pulled the call")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st := a.LeaseStats(); st.HandedOver != 1 {
		t.Fatalf("closing engine's lease stats: %+v", st)
	}
	// The run is continued by b or by the worker engine (both can orchestrate it); wait until
	// one holds it, then let the call finish.
	deadline = time.Now().Add(5 * time.Second)
	for b.LeaseStats().TakenOver+worker.LeaseStats().TakenOver == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no engine took the run over within 5 s of the close (lease %d s)", handoverLease)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	info, err := b.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		logRun(t, b, db, id)
		t.Fatalf("run: %+v %v; b %+v, worker %+v", info, err, b.LeaseStats(), worker.LeaseStats())
	}
	if n := pulls.Load(); n != 1 {
		logRun(t, b, db, id)
		t.Fatalf("the worker was called %d times, want 1 (taken over by b %d, worker %d; queue %q)", n, b.LeaseStats().TakenOver, worker.LeaseStats().TakenOver, queueRows(t, db))
	}
	if rows := queueRows(t, db); strings.Join(rows, ",") != "farm 1 done " {
		t.Fatalf("queue rows: %q", rows)
	}
}
