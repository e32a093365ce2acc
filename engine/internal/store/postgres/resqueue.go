package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// The shared queue of scarce resources (store.ResourceQueue; migrations/0017_resource_waiters.sql):
// the waiters of every engine of the database in one order, granted by the database in the
// transaction that frees or asks for the units, and woken with NOTIFY on slotsChannel.
var _ store.ResourceQueue = (*Store)(nil)

// slotsChannel is the LISTEN/NOTIFY channel of the shared queue: "g:HOLDER" when a waiter was
// granted its units, "w:HOLDER" when it should ask again.
const slotsChannel = "dcc_flow_slots"

// AcquireQueued implements store.ResourceQueue in one round trip (resource_acquire_queued).
func (s *Store) AcquireQueued(ctx context.Context, r store.SlotRequest, q store.QueueEntry) (bool, int, error) {
	l, err := s.attached()
	if err != nil {
		return false, 0, err
	}
	if err := r.Check(); err != nil {
		return false, 0, err
	}
	names := slices.Sorted(maps.Keys(r.Amounts))
	amounts, limits, caps := make([]int32, len(names)), make([]int32, len(names)), make([]int32, len(names))
	for i, n := range names {
		amounts[i], limits[i], caps[i] = int32(r.Amounts[n]), int32(r.Limits[n]), int32(r.Limits[n])
		if c, ok := q.Caps[n]; ok && c < r.Limits[n] {
			caps[i] = int32(max(c, 0))
		}
		names[i] = text(n)
	}
	aging := max(q.AgingEvery.Milliseconds(), 0)
	var got int
	if err := s.retryQueue(ctx, func() error {
		return s.pool.QueryRow(ctx, `SELECT resource_acquire_queued($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`, l.id, text(r.ID),
			names, amounts, limits, caps, text(store.CutSlotText(r.RunID)), text(store.CutSlotText(r.Label)), int32(q.Priority),
			text(q.Key), aging, q.Again).Scan(&got)
	}); err != nil {
		return false, 0, s.fault(fmt.Errorf("taking slots for %s in the shared queue: %w", r.ID, err))
	}
	switch {
	case got < 0:
		return false, 0, fmt.Errorf("engine %s cannot take slots: its heartbeat is older than its lease: %w", l.id, store.ErrLeaseLost)
	case got == 1:
		return true, 0, nil
	}
	return false, got - 1, nil
}

// LeaveQueue implements store.ResourceQueue (resource_release with p_leave).
func (s *Store) LeaveQueue(ctx context.Context, id string) (bool, error) {
	l, err := s.attached()
	if err != nil {
		return false, err
	}
	n, err := s.releaseSlots(ctx, l.id, id, true)
	if err != nil {
		return false, s.fault(fmt.Errorf("leaving the shared queue of resources (%s): %w", id, err))
	}
	return n > 0, nil
}

// releaseSlots runs resource_release: the number of slot rows of holder id deleted.
func (s *Store) releaseSlots(ctx context.Context, engine, id string, leave bool) (int, error) {
	var n int
	err := s.retryQueue(ctx, func() error { // deleting twice is deleting once
		return s.pool.QueryRow(ctx, `SELECT resource_release($1, $2, $3)`, engine, text(id), leave).Scan(&n)
	})
	return n, err
}

// retryQueue is retryLost for the idempotent functions of the queue, also tried again when the
// server chose it as a deadlock's victim or a serialization failure (two dispatches recording
// the turns of the same fair-share keys in another order): nothing of it was applied.
func (s *Store) retryQueue(ctx context.Context, fn func() error) error {
	for tries := 0; ; tries++ {
		err := s.retryLost(ctx, true, fn)
		var pe *pgconn.PgError
		if err == nil || tries >= 5 || ctx.Err() != nil || !errors.As(err, &pe) || (pe.Code != "40P01" && pe.Code != "40001") {
			return err
		}
	}
}

// ListenSlots implements store.ResourceQueue on a connection of its own (taken out of the pool,
// closed at the end).
func (s *Store) ListenSlots(ctx context.Context, ready func(), fn func(store.SlotWake)) error {
	if err := s.check(); err != nil {
		return err
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.fault(err)
	}
	conn := pc.Hijack()
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `LISTEN `+slotsChannel); err != nil {
		return s.fault(err)
	}
	ready()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return s.fault(err)
		}
		kind, holder, ok := strings.Cut(n.Payload, ":")
		if ok && (kind == "g" || kind == "w") {
			fn(store.SlotWake{Holder: holder, Granted: kind == "g"})
		}
	}
}
