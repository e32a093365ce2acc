package engine

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

const prioritySim = "name: sim\npriority: 3\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]"

// queuedPriority waits until e's queue of houdini has the step of run id and returns its
// priority there.
func queuedPriority(t *testing.T, e *Engine, id string, tick func()) int {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		info, err := e.Resources(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range info.Resources[0].Queue {
			if q.Label == id+"/cook" {
				return q.Priority
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s's step never queued: %+v", id, info.Resources[0])
		}
		if tick != nil {
			tick()
		}
	}
}

// A run's own priority, given when it started, is kept with the run: resumed (after a cancel
// while its step waited), its step waits with that priority again, not its spec's; its status
// says it. On SQLite and on PostgreSQL.
func TestRunPriorityKeptAcrossResume(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := filepath.Join(t.TempDir(), "flow.db")
			if kind == "postgres" {
				url, err := pgtest.StartT(t).NewDatabase(ctx) // (the engine package's tests share no cluster)
				if err != nil {
					t.Fatal(err)
				}
				db = url
			}
			e, err := Open(ctx, Config{DB: db, StallAfterSecs: -1, Resources: map[string]ResourceConfig{"houdini": {Limit: 1}}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close(ctx)
			if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
				t.Fatal(err)
			}
			s, err := spec.ParseString(prioritySim)
			if err != nil {
				t.Fatal(err)
			}
			holder, err := e.Submit(ctx, StartRequest{Spec: s})
			if err != nil {
				t.Fatal(err)
			}
			calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 10 * time.Second})
			if err != nil || len(calls) != 1 || calls[0].RunID != holder {
				t.Fatalf("pull: %+v, %v", calls, err)
			}
			own := 50
			id, err := e.Submit(ctx, StartRequest{Spec: s, Priority: &own})
			if err != nil {
				t.Fatal(err)
			}
			if p := queuedPriority(t, e, id, nil); p != 50 {
				t.Fatalf("queued with priority %d; want its own 50", p)
			}
			if err := e.Cancel(ctx, id, "later"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Wait(ctx, id, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Resume(ctx, id, ResumeOptions{}); err != nil {
				t.Fatal(err)
			}
			if p := queuedPriority(t, e, id, nil); p != 50 {
				t.Fatalf("resumed, queued with priority %d; want its own 50 (the spec's is 3)", p)
			}
			info, err := e.Status(ctx, id)
			if err != nil || info.Priority == nil || *info.Priority != 50 {
				t.Fatalf("status %+v, %v; want priority 50", info, err)
			}
			if info, _ := e.Status(ctx, holder); info.Priority != nil {
				t.Fatalf("a run started without a priority of its own has %d", *info.Priority)
			}
			for _, r := range []string{id, holder} {
				_ = e.Cancel(ctx, r, "done")
			}
		})
	}
}

// A run taken over by another engine (its own engine stopped past its lease) keeps its own
// priority: its step waits in the new engine's queue with it.
func TestRunPriorityKeptAcrossTakeover(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	db := memcluster.NewMem(clk)
	cfg := Config{LeaseSecs: 30, StallAfterSecs: -1, Resources: map[string]ResourceConfig{"houdini": {Limit: 1}}}
	handles := map[*Engine]*memcluster.Store{}
	open := func() *Engine {
		h := db.Open()
		e, err := Open(ctx, cfg, WithStore(h), WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeOnStub(ctx, e, clk) })
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
			t.Fatal(err)
		}
		handles[e] = h
		return e
	}
	a, b := open(), open()
	s, err := spec.ParseString(prioritySim)
	if err != nil {
		t.Fatal(err)
	}
	// B holds the one unit (a call it never ends).
	if _, err := b.Submit(ctx, StartRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		cs, err := b.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B's call never came")
		}
	}
	own := 50
	id, err := a.Submit(ctx, StartRequest{Spec: s, Priority: &own})
	if err != nil {
		t.Fatal(err)
	}
	handles[a].Fail(errors.New("engine A is stopped")) // it beats no more
	if p := queuedPriority(t, b, id, func() { clk.Advance(time.Second) }); p != 50 {
		t.Fatalf("taken over, queued on B with priority %d; want its own 50 (the spec's is 3)", p)
	}
	if info, err := b.Status(ctx, id); err != nil || info.Priority == nil || *info.Priority != 50 {
		t.Fatalf("status on B: %+v, %v", info, err)
	}
}
