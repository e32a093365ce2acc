package gotest

import (
	"context"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Wait on the engine that started a run follows the run when that engine loses it: its lease
// expired (here its clock never moves, so it never beats; in life a stall longer than the
// lease), another engine took the run over and goes on with it. Wait returned the run's
// stored, unfinished state as soon as the first engine stopped orchestrating it (Run
// returned "running" and no error on a loaded machine); it now waits for the run's end.
func TestWaitFollowsARunTakenOverByAnotherEngine(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	a, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 0.5}, engine.WithClock(engine.NewStubClock(time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close(context.Background()) })
	if err := a.RegisterTool(flowtype.ToolInfo{Name: "bake", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	pulled := make(chan flowtype.PendingCall, 1)
	go func() { // a's host: it takes bake's call and answers only when the test says so
		for ctx.Err() == nil {
			cs, err := a.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			if len(cs) == 1 {
				pulled <- cs[0]
				return
			}
		}
	}()

	release := make(chan struct{})
	b := openLeasedEngine(t, db, 0.5, "bake", func(args map[string]any) flowtype.ToolResult {
		if args["step"] == "after" {
			<-release
		}
		return flowtype.ToolResult{Output: map[string]any{"by": "b"}}
	}, nil)

	id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: lost
steps:
  - {id: bake, tool: bake, args: {step: bake}}
  - {id: after, tool: bake, args: {step: after}, depends_on: [bake]}
`)})
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan *engine.RunInfo, 1)
	go func() {
		info, err := a.Wait(ctx, id, 0)
		if err != nil {
			t.Errorf("a.Wait: %v", err)
		}
		waited <- info
	}()
	var call flowtype.PendingCall
	select {
	case call = <-pulled:
	case <-time.After(10 * time.Second):
		info, err := a.Status(ctx, id)
		t.Fatalf("a's host never pulled bake: %+v %v; a %+v, b %+v", info, err, a.LeaseStats(), b.LeaseStats())
	}
	// b takes the run over once a's lease has expired, and holds it in its step after.
	for deadline := time.Now().Add(20 * time.Second); b.LeaseStats().TakenOver == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b never took the run over: a %+v, b %+v", a.LeaseStats(), b.LeaseStats())
		}
	}
	// a's answer is refused (its lease is lost): a stops orchestrating the run, writing nothing.
	if err := a.Host().Complete(call.ID, flowtype.ToolResult{Output: map[string]any{"by": "a"}}); err != nil {
		t.Fatal(err)
	}
	// a stops orchestrating the run at once (nothing tells the test when): a pause for the old
	// behaviour, a return right then, to show; the new one needs none.
	select {
	case info := <-waited:
		t.Fatalf("a.Wait returned %+v while the run goes on on b", info)
	case <-time.After(time.Second):
	}
	close(release)
	select {
	case info := <-waited:
		if info == nil || info.Status != run.StatusCompleted {
			t.Fatalf("a.Wait: %+v", info)
		}
		if out := info.Outputs["after"]; out == nil {
			t.Fatalf("a.Wait's outputs: %+v", info.Outputs)
		}
		if st := a.LeaseStats(); st.Abandoned != 1 {
			t.Fatalf("a's lease stats %+v: the run it gave up on a refused write counts as abandoned", st)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a.Wait did not return once the run completed on b")
	}
}
