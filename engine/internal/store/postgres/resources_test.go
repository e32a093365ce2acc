package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The slots of scarce resources, on the real server: the suite every store passes (one engine
// attached), and the suite of a database that engines share (leases, fencing), with the
// harness of the cluster suites (Advance ages the engines' heartbeats).
func TestExerciseResources(t *testing.T) {
	storetest.ExerciseResources(t, func(t *testing.T) storetest.ResourceStore {
		s := openURL(t, pgtest.DB(t))
		if err := s.Attach(context.Background(), store.EngineInfo{ID: "E", Lease: time.Hour}); err != nil {
			t.Fatal(err)
		}
		return s
	})
	storetest.ExerciseSharedResources(t, func(t *testing.T) storetest.Shared[storetest.SharedResourceStore] {
		return shared(t, func(s *postgres.Store) storetest.SharedResourceStore { return s })
	})
	storetest.ExerciseSharedQueue(t, func(t *testing.T) storetest.Shared[storetest.SharedQueueStore] {
		return shared(t, func(s *postgres.Store) storetest.SharedQueueStore { return s })
	})
}

// BenchmarkSlots: acquire plus release of one unit (storetest.BenchmarkSlots) on the real
// server, one engine attached; the goal is a p99 under 2 ms (docs/guide/resources.md).
func BenchmarkSlots(b *testing.B) {
	s := openURL(b, pgtest.DB(b))
	if err := s.Attach(context.Background(), store.EngineInfo{ID: "E", Lease: time.Hour}); err != nil {
		b.Fatal(err)
	}
	storetest.BenchmarkSlots(b, s)
}

// BenchmarkQueuedSlots: the same with the shared queue's acquire (AcquireQueued, what the
// engine asks on PostgreSQL), nobody waiting.
func BenchmarkQueuedSlots(b *testing.B) {
	s := openURL(b, pgtest.DB(b))
	if err := s.Attach(context.Background(), store.EngineInfo{ID: "E", Lease: time.Hour}); err != nil {
		b.Fatal(err)
	}
	storetest.BenchmarkQueuedSlots(b, s)
}

// The slots held across a server restart (here the backends terminated, as a restart leaves the
// pool): they are rows, so they still count; the next acquire and release go through on new
// connections.
func TestSlotsAcrossARestart(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openURL(t, url)
	if err := s.Attach(ctx, store.EngineInfo{ID: "E", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	lim := map[string]int{"houdini": 2}
	for _, id := range []string{"a", "b"} {
		if ok, err := s.AcquireSlots(ctx, store.SlotRequest{ID: id, Amounts: map[string]int{"houdini": 1}, Limits: lim}); err != nil || !ok {
			t.Fatalf("AcquireSlots(%s) = %v, %v", id, ok, err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if n := terminate(t, conn); n == 0 {
		t.Fatal("no backend of the store to terminate")
	}
	ok, err := s.AcquireSlots(ctx, store.SlotRequest{ID: "c", Amounts: map[string]int{"houdini": 1}, Limits: lim})
	if err != nil || ok {
		t.Fatalf("AcquireSlots after the restart = %v, %v; want false (2 of 2 still held), no error", ok, err)
	}
	if ok, err := s.ReleaseSlots(ctx, "a"); err != nil || !ok {
		t.Fatalf("ReleaseSlots after the restart = %v, %v", ok, err)
	}
	if ok, err := s.AcquireSlots(ctx, store.SlotRequest{ID: "c", Amounts: map[string]int{"houdini": 1}, Limits: lim}); err != nil || !ok {
		t.Fatalf("AcquireSlots of the released unit = %v, %v", ok, err)
	}
}

// A waiter of engine B granted by engine A's release is told so on B's ListenSlots ('g:'),
// once B listens (ready); nothing for a holder it does not wait for.
func TestListenSlotsHearsGrants(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	url := pgtest.DB(t)
	a, b := openURL(t, url), openURL(t, url)
	for id, s := range map[string]*postgres.Store{"A": a, "B": b} {
		if err := s.Attach(ctx, store.EngineInfo{ID: id, Lease: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	wakes := make(chan store.SlotWake, 8)
	ready := make(chan struct{})
	lctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.ListenSlots(lctx, func() { close(ready) }, func(w store.SlotWake) { wakes <- w }) }()
	<-ready
	lim := map[string]int{"gpu": 1}
	one := map[string]int{"gpu": 1}
	if held, _, err := a.AcquireQueued(ctx, store.SlotRequest{ID: "a1", Amounts: one, Limits: lim}, store.QueueEntry{}); err != nil || !held {
		t.Fatalf("a1: %v, %v", held, err)
	}
	if held, place, err := b.AcquireQueued(ctx, store.SlotRequest{ID: "b1", Amounts: one, Limits: lim}, store.QueueEntry{}); err != nil || held || place != 1 {
		t.Fatalf("b1: %v, %d, %v; want waiting first", held, place, err)
	}
	if ok, err := a.ReleaseSlots(ctx, "a1"); err != nil || !ok {
		t.Fatalf("ReleaseSlots(a1) = %v, %v", ok, err)
	}
	select {
	case w := <-wakes:
		if w != (store.SlotWake{Holder: "b1", Granted: true}) {
			t.Fatalf("wake %+v; want b1 granted", w)
		}
	case <-ctx.Done():
		t.Fatal("no wake-up for b1")
	}
	if held, _, err := b.AcquireQueued(ctx, store.SlotRequest{ID: "b1", Amounts: one, Limits: lim}, store.QueueEntry{Again: true}); err != nil || !held {
		t.Fatalf("b1 asked again after its grant: %v, %v", held, err)
	}
	stop()
	if err := <-done; err == nil {
		t.Fatal("ListenSlots returned nil once its context ended")
	}
}
