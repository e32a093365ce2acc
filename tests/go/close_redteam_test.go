package gotest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// A closed engine must not leave a run interrupted that nobody takes over (issue 33, defect 8:
// the cluster soak's SIGTERM of a serve engine left a run whose host call was running there
// interrupted, with no live owner). Closing waits up to the close grace for the host's answer,
// then hands the run over: answered within it, the step is not called again; not answered, the
// call is cancelled and the next engine calls the step again (docs/operations/cluster.md, "Closing an
// engine").

// openSlowHostEngine opens an engine on db that hosts tool on the main lane with a host that
// pulls each call, reports it on pulled, and answers it once answer is closed (never, when
// answer is nil).
func openSlowHostEngine(t *testing.T, db string, graceSecs float64, tool string, pulled chan<- flowtype.PendingCall, answer <-chan struct{}) *engine.Engine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: handoverLease, CloseGraceSecs: graceSecs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = e.Close(context.Background())
	})
	if err := e.RegisterTool(flowtype.ToolInfo{Name: tool, Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				pulled <- c
				if answer == nil {
					continue // stuck in the tool for good
				}
				go func(c flowtype.PendingCall) {
					select {
					case <-answer:
					case <-ctx.Done():
						return
					}
					_ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"by": "a"}})
				}(c)
			}
		}
	}()
	return e
}

// engineClosing reports whether engine id is marked closing in the engines table.
func engineClosing(t *testing.T, db, id string) bool {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var closing bool
	if err := conn.QueryRow(context.Background(), `SELECT closing FROM engines WHERE id = $1`, id).Scan(&closing); err != nil {
		return true // its row is gone: it closed
	}
	return closing
}

const slowSpec = `
name: slow_host
steps:
  - {id: bake, tool: bake, args: {step: bake}}
  - {id: after, tool: count, args: {step: after}, depends_on: [bake]}
`

// The host answers the running call after the close began, within the close grace: the answer
// is kept, the run is handed over and completes on the other engine, and bake is not called
// again there.
func TestRedteamClosingEngineWaitsForItsHostCallThenHandsOver(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	pulled := make(chan flowtype.PendingCall, 4)
	answer := make(chan struct{})
	a := openSlowHostEngine(t, db, 20, "bake", pulled, answer)
	if err := a.RegisterTool(flowtype.ToolInfo{Name: "count", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err) // a hosts count too but never pulls the worker lane: after runs on b
	}
	count := &stepCounter{calls: map[string]int{}}
	b := openLeasedEngine(t, db, handoverLease, "bake", count.answer, nil)
	if err := b.RegisterTool(flowtype.ToolInfo{Name: "count", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, slowSpec)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-pulled:
	case <-time.After(10 * time.Second):
		t.Fatal("a's host never pulled bake")
	}
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- a.Close(ctx) }()
	for !engineClosing(t, db, a.EngineID()) { // the close has begun
		time.Sleep(5 * time.Millisecond)
	}
	// Answer a moment later: a close that did not wait would have cancelled the call by then,
	// and b would call bake again.
	time.Sleep(200 * time.Millisecond)
	close(answer)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > 15*time.Second {
		t.Fatalf("close took %s after the host answered", took)
	}
	t.Logf("close took %s (the host answered 0.2 s after it began)", took)
	info, err := b.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run after a's close: %+v %v (lease stats a %+v, b %+v)", info, err, a.LeaseStats(), b.LeaseStats())
	}
	if n := count.count("bake"); n != 0 {
		t.Fatalf("bake was called again on b (%d times) although a's host answered it within the close grace", n)
	}
	if count.count("after") != 1 {
		t.Fatalf("after called %d times on b, want 1", count.count("after"))
	}
}

// The host never answers (stuck in the tool): once the close grace is over, the call is
// cancelled and the run handed over; the other engine calls bake again and completes the run.
// The close takes about the grace (plus the interrupt grace), not for ever.
func TestRedteamClosingEngineHandsOverARunWhoseHostCallIsStuck(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	pulled := make(chan flowtype.PendingCall, 4)
	a := openSlowHostEngine(t, db, 0.5, "bake", pulled, nil)
	count := &stepCounter{calls: map[string]int{}}
	b := openLeasedEngine(t, db, handoverLease, "bake", count.answer, nil)
	if err := b.RegisterTool(flowtype.ToolInfo{Name: "count", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	go func() { // b's worker lane: count
		for {
			cs, err := b.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				_ = b.Host().Complete(c.ID, count.answer(c.Args))
			}
		}
	}()
	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, slowSpec)})
	if err != nil {
		t.Fatal(err)
	}
	var call flowtype.PendingCall
	select {
	case call = <-pulled:
	case <-time.After(10 * time.Second):
		t.Fatal("a's host never pulled bake")
	}
	start := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took > 8*time.Second {
		t.Fatalf("close took %s with a close grace of 0.5 s", took)
	}
	t.Logf("close took %s with a close grace of 0.5 s and a host that never lets go (interrupt grace 2 s)", took)
	if !a.Host().Cancelled(call.ID) {
		t.Fatal("the stuck call was not cancelled on the closed engine")
	}
	info, err := b.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run after a's close: %+v %v (lease stats a %+v, b %+v)", info, err, a.LeaseStats(), b.LeaseStats())
	}
	if count.count("bake") != 1 || count.count("after") != 1 {
		t.Fatalf("calls on b: %v, want bake (called again: its call on a was cancelled) and after once each", count.calls)
	}
	if st := a.LeaseStats(); st.HandedOver != 1 {
		t.Fatalf("a's lease stats: %+v", st)
	}
}

// Close while 8 goroutines keep submitting (issue 33, defect 7): the close refuses new work at
// once (code closed), stops every run whose start was under way with the others, and returns
// promptly without an error. A start that slipped past the list of runs to stop made Close wait
// its whole bound for a run nobody stopped (30 s through the C ABI, which then said internal).
func TestRedteamCloseWhileSubmitting(t *testing.T) {
	t.Parallel()
	for round := 0; round < 3; round++ {
		e, err := engine.Open(context.Background(), engine.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "held", Lane: flowtype.LaneMain}); err != nil {
			t.Fatal(err) // nobody pulls it: a run that is not stopped never ends
		}
		s := mustSpec(t, "name: held\nsteps: [{id: a, tool: held}]\n")
		var submitted atomic.Int64
		codes := make(chan string, 8)
		for range 8 {
			go func() {
				for {
					if _, err := e.Submit(context.Background(), engine.StartRequest{Spec: s}); err != nil {
						codes <- run.CodeOf(err)
						return
					}
					submitted.Add(1)
				}
			}()
		}
		for submitted.Load() < 32 {
			time.Sleep(time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		err = e.Close(ctx)
		took := time.Since(start)
		cancel()
		if err != nil || took > 5*time.Second {
			t.Fatalf("round %d: close with 8 goroutines submitting: %v after %s", round, err, took)
		}
		for range 8 {
			if code := <-codes; code != run.CodeClosed {
				t.Fatalf("round %d: a submit during the close failed with code %s, want closed", round, code)
			}
		}
	}
}
