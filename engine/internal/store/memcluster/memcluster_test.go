package memcluster_test

import (
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
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

func TestExercise(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store {
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
