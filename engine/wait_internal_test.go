package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// runTakenOverByOther makes a memcluster database on a stub clock with run r1 of a one-step
// workflow named name, which another engine ("other", lease 30 s, returned) claimed: r1 is
// interrupted under a live lease that is not the caller's.
func runTakenOverByOther(t *testing.T, name string) (*clock.Stub, *memcluster.DB, *memcluster.Store) {
	t.Helper()
	ctx := context.Background()
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	db := memcluster.NewMem(clk)
	s, err := spec.ParseString("name: " + name + "\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	now := clk.Now()
	if err := db.Open().Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r1", Name: name,
		SpecJSON: s.Canonical(), SpecHash: s.Hash(), Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	other := db.Open()
	if err := other.Attach(ctx, store.EngineInfo{ID: "other", Lease: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if ok, err := other.ClaimRun(ctx, "r1", now, store.Interruption{}); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	return clk, db, other
}

// leaseReadHook is a memcluster store whose first Leased call runs hook before it reads.
type leaseReadHook struct {
	*memcluster.Store
	once sync.Once
	hook func()
}

func (s *leaseReadHook) Leased(ctx context.Context, id string) (bool, error) {
	s.once.Do(s.hook)
	return s.Store.Leased(ctx, id)
}

// Wait on a shared database reads a run's status, then, for an interrupted run, its lease: an
// interrupted run with a live lease is being taken over, not ended. A run that another engine
// claimed (interrupted), resumed and finished between the two reads looked unleased, and Wait
// returned "interrupted" for a run that completed (tests/go's hand-over test failed so about
// once in 60 on a loaded machine). Here the other engine finishes the run right before the
// lease is read: Wait must return the run's end.
func TestWaitDoesNotTakeARunFinishedBetweenItsReadsForInterrupted(t *testing.T) {
	ctx := context.Background()
	clk, db, other := runTakenOverByOther(t, "handed")
	now := clk.Now()

	finished := false
	mine := &leaseReadHook{Store: db.Open(), hook: func() {
		for i, st := range []run.Status{run.StatusRunning, run.StatusCompleted} {
			at := now.Add(time.Duration(i+1) * time.Millisecond)
			u := store.RunUpdate{ID: "r1", Status: st, UpdatedAt: at}
			if st.Terminal() {
				u.FinishedAt = at
			}
			if err := other.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{u}}); err != nil {
				t.Errorf("the other engine's write: %v", err)
			}
		}
		finished = true
	}}
	e, err := Open(ctx, Config{LeaseSecs: 30, StallAfterSecs: -1}, WithStore(mine), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	info, err := e.Wait(ctx, "r1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !finished {
		t.Fatal("Wait never read the lease of the interrupted run: the test's race did not happen")
	}
	if info.Status != run.StatusCompleted {
		t.Fatalf("Wait returned %s for a run that completed after its status was read; want completed", info.Status)
	}
}

// stepsReadHook is a memcluster store whose first ListSteps call runs hook before it reads.
type stepsReadHook struct {
	*memcluster.Store
	once sync.Once
	hook func()
}

func (s *stepsReadHook) ListSteps(ctx context.Context, runID string) ([]store.Step, error) {
	s.once.Do(s.hook)
	return s.Store.ListSteps(ctx, runID)
}

// Status reads a run's record, then its steps, attempts and children: a run resumed between
// those reads (a takeover wrote it interrupted; the engine that resumed it wrote it running
// and started its steps) showed as interrupted beside the steps of its resumed execution. The
// record read again at the end moved, so Status reads again: the run is running, with them.
func TestStatusReadsAgainARunWhoseStatusMovedWhileItRead(t *testing.T) {
	ctx := context.Background()
	// Another engine takes the run over (its claim writes it interrupted, under that engine's
	// live lease: this engine leaves it alone).
	clk, db, other := runTakenOverByOther(t, "resumed")
	now := clk.Now()
	mine := &stepsReadHook{Store: db.Open(), hook: func() {
		at := now.Add(time.Millisecond)
		if err := other.Write(ctx, &store.Batch{
			RunUpdates: []store.RunUpdate{{ID: "r1", Status: run.StatusRunning, UpdatedAt: at}},
			Steps:      []store.Step{{RunID: "r1", Key: "a", StepID: "a", Kind: "tool", Status: run.StepRunning, Attempt: 1, StartedAt: at, UpdatedAt: at, Insert: true}},
		}); err != nil {
			t.Errorf("the resuming engine's write: %v", err)
		}
	}}
	e, err := Open(ctx, Config{LeaseSecs: 30, StallAfterSecs: -1}, WithStore(mine), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	info, err := e.Status(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Steps) != 1 || info.Steps[0].Status != run.StepRunning {
		t.Fatalf("steps %+v; want step a running (the resumed execution's)", info.Steps)
	}
	if info.Status != run.StatusRunning {
		t.Fatalf("Status = %s beside the resumed execution's running step; want running (read again)", info.Status)
	}
}
