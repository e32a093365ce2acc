package memstore

import (
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

// TestEveryKeyColliding runs the shared suite with a step-key hash that is the same for every
// key, so every step but the first of a run goes through the collision path.
func TestEveryKeyColliding(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) store.Store {
		s := New()
		s.hash = func(string) uint64 { return 42 }
		return s
	})
}
