package memcluster_test

import (
	"context"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

func TestExerciseResources(t *testing.T) {
	storetest.ExerciseResources(t, func(t *testing.T) storetest.ResourceStore {
		db, _ := newDB(t)
		s := db.Open()
		if err := s.Attach(context.Background(), store.EngineInfo{ID: "E", Lease: 3600e9}); err != nil {
			t.Fatal(err)
		}
		return s
	})
	storetest.ExerciseSharedResources(t, func(t *testing.T) storetest.Shared[storetest.SharedResourceStore] {
		return shared(t, func(s *memcluster.Store) storetest.SharedResourceStore { return s })
	})
}
