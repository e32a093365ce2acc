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
