package memcluster

import (
	"context"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memslots"
)

// The slots of scarce resources (store.ResourceSlots), held under the engines' leases as the
// PostgreSQL store holds them (postgres/resources.go), on the DB's clock.
var _ store.ResourceSlots = (*Store)(nil)

// slotTable returns the DB's slots, made on their first use.
func (db *DB) slotTable() *memslots.Table {
	db.slotsOnce.Do(func() { db.slotTab = memslots.New() })
	return db.slotTab
}

// liveLocked reports whether engine id is registered and its heartbeat is at most its lease old
// (the end included). db.mu is held.
func (db *DB) liveLocked(id string) bool {
	row := db.engines[id]
	return row != nil && !row.info.HeartbeatAt.Add(row.info.Lease).Before(db.now())
}

// AcquireSlots implements store.ResourceSlots: the engine must be attached and live.
func (s *Store) AcquireSlots(ctx context.Context, r store.SlotRequest) (bool, error) {
	a, err := s.attached()
	if err != nil {
		return false, err
	}
	if err := r.Check(); err != nil {
		return false, err
	}
	db := s.db
	t := db.slotTable()
	db.mu.Lock()
	defer db.mu.Unlock()
	if !db.liveLocked(a.id) {
		return false, fmt.Errorf("engine %s cannot take slots: its heartbeat is older than its lease: %w", a.id, store.ErrLeaseLost)
	}
	return t.Acquire(r, a.id, db.now(), db.liveLocked), nil
}

// ReleaseSlots implements store.ResourceSlots: only the engine's own holders.
func (s *Store) ReleaseSlots(ctx context.Context, id string) (bool, error) {
	a, err := s.attached()
	if err != nil {
		return false, err
	}
	return s.db.slotTable().Release(id, a.id), nil
}

// Slots implements store.ResourceSlots: the holders of live engines.
func (s *Store) Slots(ctx context.Context) ([]store.Slot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	db := s.db
	t := db.slotTable()
	db.mu.Lock()
	defer db.mu.Unlock()
	return t.Slots(db.liveLocked), nil
}
