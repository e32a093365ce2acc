package memcluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

var t0 = time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC)

// newDB returns a new DB on a memstore and a stub clock, closed when the test ends.
func newDB(t *testing.T) (*memcluster.DB, *clock.Stub) {
	t.Helper()
	clk := clock.NewStub(t0)
	db := memcluster.NewMem(clk)
	t.Cleanup(func() { _ = db.Close() })
	return db, clk
}

// shared is the suites' harness on a new DB: each Open is a handle, Advance the stub clock's.
func shared[S any](t *testing.T, as func(*memcluster.Store) S) storetest.Shared[S] {
	db, clk := newDB(t)
	return storetest.Shared[S]{
		Open: func(t *testing.T) S {
			s := db.Open()
			t.Cleanup(func() { _ = s.Close() })
			return as(s)
		},
		Advance: func(t *testing.T, d time.Duration) { clk.Advance(d) },
	}
}

// The volume part of the assets suite (storetest.ExerciseAssetsVolume). In GO_NORACE_TESTS.
func TestExerciseVolume(t *testing.T) {
	storetest.ExerciseAssetsVolume(t, func(t *testing.T) storetest.AssetStore {
		db, _ := newDB(t)
		return db.Open()
	})
}

func TestExercise(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
		db, _ := newDB(t)
		return db.Open()
	})
	storetest.ExerciseAssets(t, func(t *testing.T) storetest.AssetStore {
		db, _ := newDB(t)
		return db.Open()
	})
	storetest.ExerciseLeaser(t, func(t *testing.T) storetest.Shared[storetest.LeaserStore] {
		return shared(t, func(s *memcluster.Store) storetest.LeaserStore { return s })
	})
	storetest.ExerciseCallQueue(t, func(t *testing.T) storetest.Shared[storetest.QueueStore] {
		return shared(t, func(s *memcluster.Store) storetest.QueueStore { return s })
	})
	storetest.ExerciseSlotClaimer(t, func(t *testing.T, n int) []store.SlotClaimer {
		db, _ := newDB(t)
		cs := make([]store.SlotClaimer, n)
		for i := range cs {
			cs[i] = db.Open()
		}
		return cs
	})
}

func attach(t *testing.T, db *memcluster.DB, id string, lease time.Duration) *memcluster.Store {
	t.Helper()
	s := db.Open()
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Attach(context.Background(), store.EngineInfo{ID: id, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	return s
}

func newRun(id string) store.Run {
	return store.Run{ID: id, Name: "wf", SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning, CreatedAt: t0, UpdatedAt: t0}
}

// A lease is live until its end, that end included (PostgreSQL's lease_until >= now()), and an
// engine is live while its heartbeat is less than a lease old (heartbeat_at > now() - lease):
// the edges the shared suite cannot pin on PostgreSQL, whose clock moves on its own.
func TestLeaseEdges(t *testing.T) {
	ctx := context.Background()
	db, clk := newDB(t)
	a, b := attach(t, db, "A", time.Minute), attach(t, db, "B", time.Hour)
	if err := a.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if h, err := b.Holder(ctx, "r"); h != "A" || err != nil {
		t.Fatalf("Holder at the lease's end = %q, %v; want A (live)", h, err)
	}
	if ok, err := b.ClaimRun(ctx, "r", t0, store.Interruption{}); ok || err != nil {
		t.Fatalf("ClaimRun at the lease's end = %v, %v; want false", ok, err)
	}
	if es, _ := b.Engines(ctx); es[0].ID != "A" || es[0].Live {
		t.Fatalf("A a lease after its heartbeat = %+v; want not live", es[0])
	}
	clk.Advance(time.Nanosecond)
	if h, err := b.Holder(ctx, "r"); h != "" || err != nil {
		t.Fatalf("Holder just past the lease's end = %q, %v; want \"\"", h, err)
	}
	if ok, err := b.ClaimRun(ctx, "r", t0, store.Interruption{}); !ok || err != nil {
		t.Fatalf("ClaimRun just past the lease's end = %v, %v; want true", ok, err)
	}
}

// Closing a handle ends its ListenCalls (store.ErrClosed) and its methods; the other handles and
// the database go on.
func TestCloseHandle(t *testing.T) {
	ctx := context.Background()
	db, _ := newDB(t)
	a, b := attach(t, db, "A", time.Minute), attach(t, db, "B", time.Minute)
	ended := make(chan error, 1)
	go func() { ended <- a.ListenCalls(ctx, nil, func(string) {}) }()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("ListenCalls of a closed handle ended with %v; want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ListenCalls did not return when its handle closed")
	}
	if _, err := a.EnqueueCall(ctx, store.QueuedCall{Tool: "t"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("EnqueueCall on a closed handle: %v; want ErrClosed", err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := b.EnqueueCall(ctx, store.QueuedCall{Tool: "t"}); err != nil {
		t.Fatalf("another handle after one closed: %v", err)
	}
}

// Engines working at once on one database (-race): runs written, beaten, expired and claimed
// while calls are queued, claimed and completed; every call is claimed once and done.
func TestConcurrentEngines(t *testing.T) {
	ctx := context.Background()
	db, clk := newDB(t)
	const engines, runs, calls = 4, 20, 200
	ss := make([]*memcluster.Store, engines)
	for i := range ss {
		ss[i] = attach(t, db, fmt.Sprintf("E%d", i), time.Minute)
	}
	var listened sync.WaitGroup
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	listened.Add(1)
	go func() {
		defer listened.Done()
		_ = ss[0].ListenCalls(lctx, nil, func(string) {})
	}()
	var mu sync.Mutex
	claimed := map[int64]string{}
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []string
			for r := range runs {
				id := fmt.Sprintf("r%d-%d", i, r)
				if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun(id)}}); err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, id)
				if _, err := s.EnqueueCall(ctx, store.QueuedCall{RunID: id, StepKey: "s", Attempt: 1, Tool: "t"}); err != nil {
					t.Error(err)
					return
				}
			}
			for range calls {
				if _, err := s.Heartbeat(ctx, store.EngineInfo{ID: fmt.Sprintf("E%d", i)}, mine); err != nil {
					t.Error(err)
					return
				}
				c, err := s.ClaimCall(ctx, []string{"t"}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if c == nil {
					break
				}
				mu.Lock()
				if by, dup := claimed[c.ID]; dup {
					t.Errorf("call %d claimed by %s and E%d", c.ID, by, i)
				}
				claimed[c.ID] = fmt.Sprintf("E%d", i)
				mu.Unlock()
				if ok, err := s.CompleteCall(ctx, c.ID, store.CallOutcome{}); !ok || err != nil {
					t.Errorf("CompleteCall(%d) = %v, %v", c.ID, ok, err)
				}
				if exp, err := s.Expired(ctx, 5); err != nil {
					t.Error(err)
				} else {
					for _, r := range exp {
						_, _ = s.ClaimRun(ctx, r.ID, t0, store.Interruption{})
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			clk.Advance(10 * time.Second)
		}
	}()
	wg.Wait()
	stop()
	listened.Wait()
	// The claims left (a claimer's loop may end before the queue is empty) are completed now.
	for {
		c, err := ss[0].ClaimCall(ctx, []string{"t"}, nil)
		if err != nil || c == nil {
			break
		}
		if _, dup := claimed[c.ID]; dup {
			t.Errorf("call %d claimed twice", c.ID)
		}
		claimed[c.ID] = "E0"
		_, _ = ss[0].CompleteCall(ctx, c.ID, store.CallOutcome{})
	}
	if len(claimed) != engines*runs {
		t.Fatalf("%d calls claimed; want %d", len(claimed), engines*runs)
	}
	for id := range claimed {
		if st, _, err := ss[1].CallStatus(ctx, id); st != "done" || err != nil {
			t.Errorf("call %d is %s (%v); want done", id, st, err)
		}
	}
}

// Fail cuts one engine off the database: its calls fail with the error given (a write that
// reaches nothing), its ListenCalls returns it, its leases expire and another engine takes its
// run over; once back (Fail(nil)), it finds the run lost to the fence.
func TestFailCutsAnEngineOff(t *testing.T) {
	ctx := context.Background()
	db, clk := newDB(t)
	a, b := attach(t, db, "A", time.Minute), attach(t, db, "B", time.Minute)
	if err := a.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		ended <- a.ListenCalls(ctx, nil, func(p string) {
			if p == "q:probe" {
				once.Do(func() { close(started) })
			}
		})
	}()
	for probing := true; probing; {
		if _, err := b.EnqueueCall(ctx, store.QueuedCall{Tool: "probe"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
			probing = false
		case <-time.After(50 * time.Millisecond):
		}
	}
	cut := fmt.Errorf("engine A's network is down: %w", store.ErrConnectionLost)
	a.Fail(cut)
	select {
	case err := <-ended:
		if !errors.Is(err, store.ErrConnectionLost) {
			t.Fatalf("ListenCalls of a failing handle ended with %v; want the cut", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ListenCalls did not return when its handle failed")
	}
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, []string{"r"}); !errors.Is(err, store.ErrConnectionLost) {
		t.Fatalf("Heartbeat of a failing handle: %v; want the cut", err)
	}
	if err := a.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusCompleted, UpdatedAt: t0, FinishedAt: t0}}}); !errors.Is(err, store.ErrConnectionLost) {
		t.Fatalf("Write of a failing handle: %v; want the cut", err)
	}
	clk.Advance(time.Minute + time.Second)
	if ok, err := b.ClaimRun(ctx, "r", t0, store.Interruption{}); !ok || err != nil {
		t.Fatalf("B's ClaimRun of the cut engine's run = %v, %v; want true", ok, err)
	}
	a.Fail(nil)
	if owned, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, []string{"r"}); err != nil || len(owned) != 0 {
		t.Fatalf("A's first Heartbeat back = %v, %v; want no run (r was taken over)", owned, err)
	}
	if err := a.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusCompleted, UpdatedAt: t0, FinishedAt: t0}}}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("A's Write back = %v; want ErrLeaseLost", err)
	}
}
