package sqlite

import (
	"context"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memslots"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
)

// The slots of scarce resources (store.ResourceSlots). The store's owner is the one engine of
// the file, so it holds the slots in memory (memslots: an acquire and a release cost no
// transaction) across every run, and mirrors them to the resource_slots table after each
// change, in the background and coalesced, for a process that reads the file (a read-only
// store's Slots). Slots of an earlier owner that died are not counted (they were in its
// memory) and leave the table at the new owner's first change.
var _ store.ResourceSlots = (*Store)(nil)

// slotState is a store's slots and the state of their mirror.
type slotState struct {
	t *memslots.Table

	mu      sync.Mutex
	dirty   bool // changed since the mirror last read the table
	running bool // a mirror goroutine is writing
}

func (s *Store) slotState() *slotState {
	s.slotsOnce.Do(func() { s.slots = &slotState{t: memslots.New()} })
	return s.slots
}

// AcquireSlots implements store.ResourceSlots (the owner only: a read-only store refuses it).
func (s *Store) AcquireSlots(ctx context.Context, r store.SlotRequest) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	if err := r.Check(); err != nil {
		return false, err
	}
	st := s.slotState()
	ok := st.t.Acquire(r, "", time.Now(), nil)
	if ok {
		st.changed(s)
	}
	return ok, nil
}

// ReleaseSlots implements store.ResourceSlots.
func (s *Store) ReleaseSlots(ctx context.Context, id string) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	st := s.slotState()
	ok := st.t.Release(id, "")
	if ok {
		st.changed(s)
	}
	return ok, nil
}

// Slots implements store.ResourceSlots: the owner's memory, or, for a read-only store, the
// table the owner mirrors them to (as of its last write, a few milliseconds behind).
func (s *Store) Slots(ctx context.Context) ([]store.Slot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if !s.readOnly {
		return s.slotState().t.Slots(nil), nil
	}
	rows, err := s.r.QueryContext(ctx, `SELECT holder, resource, amount, taken_limit, run_id, label, acquired_at FROM resource_slots`)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.Slot
	for rows.Next() {
		var sl store.Slot
		var at int64
		if err := rows.Scan(&sl.Holder, &sl.Resource, &sl.Amount, &sl.Limit, &sl.RunID, &sl.Label, &at); err != nil {
			return nil, s.fault(err)
		}
		sl.AcquiredAt = sqlrow.FromNanos(at)
		out = append(out, sl)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fault(err)
	}
	store.SortSlots(out)
	return out, nil
}

// changed marks the mirror out of date and starts its writer when none runs.
func (st *slotState) changed(s *Store) {
	st.mu.Lock()
	st.dirty = true
	start := !st.running
	st.running = true
	st.mu.Unlock()
	if start {
		go st.mirror(s)
	}
}

// mirrorEvery is the least time between two writes of the mirror: under a stream of acquires
// and releases it takes the writer connection at most 50 times a second.
const mirrorEvery = 20 * time.Millisecond

// mirror rewrites the resource_slots table with the slots held, until no change is left; it
// stops once the store is closed. A failed write is dropped (the table is for listings only;
// the next change writes it again).
func (st *slotState) mirror(s *Store) {
	for first := true; ; first = false {
		if !first {
			time.Sleep(mirrorEvery)
		}
		st.mu.Lock()
		if !st.dirty || s.closed.Load() {
			st.running = false
			st.mu.Unlock()
			return
		}
		st.dirty = false
		st.mu.Unlock()
		_ = s.writeSlots(st.t.Slots(nil))
	}
}

// writeSlots replaces the rows of resource_slots with slots, in one transaction; not once the
// owner lock is lost (as every write of the owner).
func (s *Store) writeSlots(slots []store.Slot) error {
	if s.checkLock != nil {
		if err := s.checkLock(); err != nil {
			return err
		}
	}
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM resource_slots`); err != nil {
		return err
	}
	for _, sl := range slots {
		if _, err := tx.ExecContext(ctx, `INSERT INTO resource_slots (holder, resource, amount, taken_limit, run_id, label, acquired_at)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, sl.Holder, sl.Resource, sl.Amount, sl.Limit, sl.RunID, sl.Label, nanos(sl.AcquiredAt)); err != nil {
			return err
		}
	}
	return tx.Commit()
}
