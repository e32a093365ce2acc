package memstore_test

import (
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

func TestExerciseResources(t *testing.T) {
	storetest.ExerciseResources(t, func(t *testing.T) storetest.ResourceStore { return memstore.New() })
}

// BenchmarkSlots: acquire plus release of one unit (storetest.BenchmarkSlots).
func BenchmarkSlots(b *testing.B) { storetest.BenchmarkSlots(b, memstore.New()) }
