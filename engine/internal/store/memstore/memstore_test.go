package memstore_test

import (
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

func TestMemstore(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) store.Store { return memstore.New() })
	storetest.ExercisePruner(t, func(t *testing.T) storetest.PrunerStore { return memstore.New() })
	storetest.ExerciseAttemptLog(t, func(t *testing.T) storetest.AttemptStore { return memstore.New() })
	storetest.ExerciseCatalog(t, func(t *testing.T) store.Catalog { return memstore.New() })
}

// 100,000 attempts of one step keep 110 rows (storetest.AttemptFlood).
func TestRedteamAttemptFlood(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	storetest.AttemptFlood(t, s)
}
