package postgres_test

import (
	"context"
	"testing"
	"time"

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
