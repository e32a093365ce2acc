package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// The slots of scarce resources (store.ResourceSlots), held across every engine of the
// database under each engine's lease (migrations/0014_resource_slots.sql). Every time is the
// server's.
var _ store.ResourceSlots = (*Store)(nil)

// sqlEngineLive is true for a resource_slots row s whose engine's heartbeat is at most its
// lease old.
const sqlEngineLive = `EXISTS (SELECT 1 FROM engines e WHERE e.id = s.engine_id AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now())`

// AcquireSlots implements store.ResourceSlots in one round trip (the function resource_acquire).
func (s *Store) AcquireSlots(ctx context.Context, r store.SlotRequest) (bool, error) {
	l, err := s.attached()
	if err != nil {
		return false, err
	}
	if err := r.Check(); err != nil {
		return false, err
	}
	names := slices.Sorted(maps.Keys(r.Amounts))
	amounts, limits := make([]int32, len(names)), make([]int32, len(names))
	for i, n := range names {
		amounts[i], limits[i] = int32(r.Amounts[n]), int32(r.Limits[n])
		names[i] = text(n)
	}
	var got int
	// Idempotent by holder id (a holder that holds gets 1 again): tried again on a new
	// connection while the connection is lost (a server restart), as a write is.
	if err := s.retryLost(ctx, true, func() error {
		return s.pool.QueryRow(ctx, `SELECT resource_acquire($1, $2, $3, $4, $5, $6, $7)`, l.id, text(r.ID), names, amounts, limits,
			text(store.CutSlotText(r.RunID)), text(store.CutSlotText(r.Label))).Scan(&got)
	}); err != nil {
		return false, s.fault(fmt.Errorf("taking slots for %s: %w", r.ID, err))
	}
	if got < 0 {
		return false, fmt.Errorf("engine %s cannot take slots: its heartbeat is older than its lease: %w", l.id, store.ErrLeaseLost)
	}
	return got == 1, nil
}

// ReleaseSlots implements store.ResourceSlots: the engine's own holder only. The units go to
// the waiters of the shared queue now first (releaseSlots).
func (s *Store) ReleaseSlots(ctx context.Context, id string) (bool, error) {
	l, err := s.attached()
	if err != nil {
		return false, err
	}
	n, err := s.releaseSlots(ctx, l.id, id)
	if err != nil {
		return false, s.fault(fmt.Errorf("releasing the slots of %s: %w", id, err))
	}
	return n > 0, nil
}

// Slots implements store.ResourceSlots: the rows of live engines.
func (s *Store) Slots(ctx context.Context) ([]store.Slot, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var out []store.Slot
	err := s.retryLost(ctx, true, func() error {
		rows, err := s.pool.Query(ctx, `SELECT s.resource, s.holder, s.amount, s.taken_limit, s.engine_id, s.run_id, s.label, s.acquired_at
			FROM resource_slots s WHERE `+sqlEngineLive+` ORDER BY s.resource, s.acquired_at, s.holder`)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.Slot, error) {
			var sl store.Slot
			var amount, limit int32
			err := row.Scan(&sl.Resource, &sl.Holder, &amount, &limit, &sl.Engine, &sl.RunID, &sl.Label, &sl.AcquiredAt)
			sl.Amount, sl.Limit = int(amount), int(limit)
			return sl, err
		})
		return err
	})
	if err != nil {
		return nil, s.fault(fmt.Errorf("listing the slots: %w", err))
	}
	store.SortSlots(out) // the same order as the other stores, collation aside
	return out, nil
}
