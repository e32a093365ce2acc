package gotest

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// An engine on a PostgreSQL database (Config.DB a postgresql:// URL) runs a workflow; closed
// mid-run (the last foreach item's call unanswered), its run is interrupted; a new engine on the same database finds it there, resumes it
// without calling the completed instances again, and completes it. Meanwhile a second read-write
// engine and a read-only one see the run and leave it alone.
func TestPostgresRunCloseReopenResume(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	s, err := spec.ParseString(`
name: intake
steps:
  - id: per_file
    kind: foreach
    items: [0, 1, 2, 3, 4]
    steps: [{id: export, tool: export, args: {i: "{{item}}"}}]
  - {id: after, tool: flow__echo, args: {value: "{{per_file}}"}}
`)
	if err != nil {
		t.Fatal(err)
	}
	var calls [5]atomic.Int32
	var hang atomic.Bool
	hang.Store(true)
	open := func() (context.Context, context.CancelFunc, *engine.Engine) {
		ctx, cancel := context.WithCancel(context.Background())
		e, err := engine.Open(ctx, engine.Config{DB: url})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "export", Lane: flowtype.LaneMain}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for ctx.Err() == nil {
				cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
				if err != nil {
					return
				}
				for _, c := range cs {
					i := int(c.Args["i"].(float64))
					calls[i].Add(1)
					if i == 4 && hang.Load() {
						continue // never answered: the engine is closed under it
					}
					_ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"fbx": i}})
				}
			}
		}()
		return ctx, cancel, e
	}

	ctx, cancel, e := open()
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for calls[0].Load()+calls[1].Load()+calls[2].Load()+calls[3].Load()+calls[4].Load() < 5 {
		if time.Now().After(deadline) {
			t.Fatal("the five exports were not all called")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Wait until the four answered instances are committed.
	for {
		steps, err := e.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		done := 0
		for _, st := range steps {
			if strings.HasSuffix(st.Key, ".export") && st.Status == run.StepCompleted {
				done++
			}
		}
		if done == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("steps: %+v", steps)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// A second read-write engine opens beside it (docs/operations/cluster.md, "Leases"): it leaves the run
	// to its engine, which holds its lease, and closing it does not touch the run. A read-only
	// one sees the run too.
	second, err := engine.Open(ctx, engine.Config{DB: url})
	if err != nil {
		t.Fatalf("a second read-write engine: %v", err)
	}
	if second.EngineID() == "" || second.EngineID() == e.EngineID() {
		t.Fatalf("engine ids %q and %q", e.EngineID(), second.EngineID())
	}
	if info, err := second.Status(ctx, id); err != nil || info.Status != run.StatusRunning {
		t.Fatalf("second engine: %+v %v", info, err)
	}
	if err := second.Close(ctx); err != nil {
		t.Fatal(err)
	}
	viewer, err := engine.Open(ctx, engine.Config{DB: url, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := viewer.Status(ctx, id); err != nil || info.Status != run.StatusRunning {
		t.Fatalf("viewer: %+v %v", info, err)
	}
	if err := viewer.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cancel()
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	hang.Store(false)
	ctx, cancel, e = open()
	defer cancel()
	defer e.Close(context.Background())
	info, err := e.Status(ctx, id)
	if err != nil || info.Status != run.StatusInterrupted {
		t.Fatalf("after reopen: %+v %v", info, err)
	}
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err = e.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("resumed: %+v %v", info, err)
	}
	for i := range calls {
		want := int32(1)
		if i == 4 {
			want = 2
		}
		if got := calls[i].Load(); got != want {
			t.Errorf("export %d called %d times, want %d", i, got, want)
		}
	}
	// The events of both engines are one sequence: increasing, no gaps (nothing was pruned).
	evs, err := e.EventsSince(0, 0)
	if err != nil || len(evs) == 0 {
		t.Fatalf("%d events, %v", len(evs), err)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("events %d then %d", evs[i-1].Seq, evs[i].Seq)
		}
	}
}

// A URL that cannot be reached fails Open with code storage, naming the database without its
// password.
func TestPostgresUnreachable(t *testing.T) {
	t.Parallel()
	_, err := engine.Open(context.Background(), engine.Config{DB: "postgresql://flow:s3cret@127.0.0.1:1/flow?connect_timeout=2"})
	if run.CodeOf(err) != run.CodeStorage || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("%v (code %s)", err, run.CodeOf(err))
	}
}

// A PostgreSQL restart between two steps (the pooled connections all cut) loses nothing: the
// step that completes once the server is back is written through a new connection, the run
// completes, and no step is called twice (docs/operations/cluster.md, "A database restart").
func TestPostgresRestartBetweenStepsCompletes(t *testing.T) {
	c := pgtest.StartT(t) // a cluster of its own: it is restarted
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString(`
name: restart
steps:
  - {id: s1, tool: work, args: {k: s1}}
  - {id: s2, tool: work, args: {k: s2}, depends_on: [s1]}
  - {id: s3, tool: work, args: {k: s3}, depends_on: [s2]}
`)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(ctx, engine.Config{DB: url, LeaseSecs: 30}) // no heartbeat (every 10 s) takes a cut connection before the step
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close(context.Background()) }()
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := map[string]int{}
	inS2 := make(chan struct{}, 1)
	release := make(chan struct{})
	go func() {
		for ctx.Err() == nil {
			cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				continue // the database is away: pull again
			}
			for _, cl := range cs {
				k, _ := cl.Args["k"].(string)
				mu.Lock()
				calls[k]++
				mu.Unlock()
				if k == "s2" {
					inS2 <- struct{}{}
					<-release
				}
				_ = e.Host().Complete(cl.ID, flowtype.ToolResult{Output: map[string]any{"k": k}})
			}
		}
	}()
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-inS2:
	case <-time.After(15 * time.Second):
		t.Fatal("s2 was never called")
	}
	if err := c.Restart(ctx); err != nil { // s1 committed, s2 in flight
		t.Fatal(err)
	}
	close(release) // s2 completes once the server is back
	// The test reads nothing until s2's completion is written: a read would meet a cut
	// connection first and drop them all from the pool, sparing the write. The engine calls s3
	// once s2's completion is written (the executor writes a step's end before it releases the
	// steps after it), so wait for that, on the tool's side. (The engine's queue listener, on a
	// connection of its own, sees the restart as it happens and drops the pooled connections
	// itself, so the write usually goes out on a new one; a write that meets a cut connection
	// is retried, which the store's tests check, e.g. TestWriteAfterBackendsTerminatedIsRetried.)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := calls["s3"]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			info, err := e.Status(ctx, id)
			t.Fatalf("s3 was never called: the completion of s2 was not written after the restart; run %+v %v", info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	deadline = time.Now().Add(20 * time.Second)
	var info *engine.RunInfo
	for {
		info, err = e.Status(ctx, id)
		if err == nil && info.Terminal {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s not finished: %+v %v", id, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if info.Status != run.StatusCompleted {
		t.Fatalf("run ended %s: %+v", info.Status, info.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"s1", "s2", "s3"} {
		if calls[k] != 1 {
			t.Errorf("step %s called %d times, want 1 (calls %v)", k, calls[k], calls)
		}
	}
	if st := e.LeaseStats(); st.Abandoned != 0 || st.TakenOver != 0 {
		t.Errorf("lease stats %+v: the restart should cost no takeover", st)
	}
}
