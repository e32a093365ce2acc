package memstore

import (
	"context"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memslots"
)

// The slots of scarce resources (store.ResourceSlots), held in memory across every run of the
// one engine that has the store: every holder is live until released.
var _ store.ResourceSlots = (*Store)(nil)

func (s *Store) slots() (*memslots.Table, error) {
	s.mu.RLock()
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, store.ErrClosed
	}
	s.slotsOnce.Do(func() { s.slotTab = memslots.New() })
	return s.slotTab, nil
}

// AcquireSlots implements store.ResourceSlots.
func (s *Store) AcquireSlots(ctx context.Context, r store.SlotRequest) (bool, error) {
	if err := r.Check(); err != nil {
		return false, err
	}
	t, err := s.slots()
	if err != nil {
		return false, err
	}
	return t.Acquire(r, "", time.Now(), nil), nil
}

// ReleaseSlots implements store.ResourceSlots.
func (s *Store) ReleaseSlots(ctx context.Context, id string) (bool, error) {
	t, err := s.slots()
	if err != nil {
		return false, err
	}
	return t.Release(id, ""), nil
}

// Slots implements store.ResourceSlots.
func (s *Store) Slots(ctx context.Context) ([]store.Slot, error) {
	t, err := s.slots()
	if err != nil {
		return nil, err
	}
	return t.Slots(nil), nil
}
