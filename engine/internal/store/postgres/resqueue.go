package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
			queueKey(q.Key), aging, q.Again).Scan(&got)
	}); err != nil {
		return false, 0, s.fault(fmt.Errorf("taking slots for %s in the shared queue: %w", r.ID, err))
	}
	switch {
	case got < 0:
		return false, 0, fmt.Errorf("engine %s cannot take slots: its heartbeat is older than its lease: %w", l.id, store.ErrLeaseLost)
	case got == 0: // asked again, still waiting, place not read
		return false, 0, nil
	case got == 1:
		return true, 0, nil
	}
	return false, got - 1, nil
}

// queueKey is a fair-share key as the queue keeps it: a key of more than maxQueueKey bytes (a
// template rendered from a large input) by its SHA-256, so that it fits the primary key of
// resource_fair_share (a B-tree entry holds about 2,700 bytes).
func queueKey(k string) string {
	if len(k) <= maxQueueKey {
		return text(k)
	}
	sum := sha256.Sum256([]byte(k))
	return "sha256:" + hex.EncodeToString(sum[:])
}

const maxQueueKey = 200

// LeaveQueue implements store.ResourceQueue (resource_leave).
func (s *Store) LeaveQueue(ctx context.Context, id string) (bool, error) {
	l, err := s.attached()
	if err != nil {
		return false, err
	}
	var n int
	if err := s.retryQueue(ctx, func() error { // leaving twice is leaving once
		return s.pool.QueryRow(ctx, `SELECT resource_leave($1, $2)`, l.id, text(id)).Scan(&n)
	}); err != nil {
		return false, s.fault(fmt.Errorf("leaving the shared queue of resources (%s): %w", id, err))
	}
	return n > 0, nil
}

// releaseSlots deletes the slot rows of holder id of engine and returns how many it deleted, in
// one round trip when nobody waits; else a second one serves the waiters of its resources now
// first (resource_serve): the units freed are committed first, and an acquire meanwhile serves
// the queue in its order itself. (The check is for any waiter, the cheapest: resource_serve
// looks at those of the resources.)
func (s *Store) releaseSlots(ctx context.Context, engine, id string) (int, error) {
	var names []string
	waiting := false
	err := s.retryQueue(ctx, func() error { // deleting twice is deleting once
		names, waiting = names[:0], false
		rows, err := s.pool.Query(ctx, `DELETE FROM resource_slots WHERE holder = $1 AND engine_id = $2
			RETURNING resource, EXISTS (SELECT 1 FROM resource_waiters)`, text(id), engine)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name string
			var w bool
			if err := rows.Scan(&name, &w); err != nil {
				rows.Close()
				return err
			}
			names, waiting = append(names, name), waiting || w
		}
		return rows.Err()
	})
	if err != nil || !waiting {
		return len(names), err
	}
	slices.Sort(names) // the lock order of resource_acquire's callers (Go's, byte order)
	// The units are given back. Should serving fail, the waiters' next asks serve the queue
	// (an ask that finds a unit free dispatches), so it is not the release's error.
	_ = s.retryQueue(ctx, func() error {
		_, err := s.pool.Exec(ctx, `SELECT resource_serve($1)`, names)
		return err
	})
	return len(names), nil
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
	return s.listen(ctx, slotsChannel, ready, func(payload string) {
		kind, holder, ok := strings.Cut(payload, ":")
		if ok && (kind == "g" || kind == "w") {
			fn(store.SlotWake{Holder: holder, Granted: kind == "g"})
		}
	})
}

// Waiters implements store.ResourceQueue: the view resource_queue's order (migration 0017), with
// each waiter's own fields.
func (s *Store) Waiters(ctx context.Context) ([]store.Waiter, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT w.holder, w.engine_id, w.run_id, w.label, w.names, w.amounts, w.priority,
			w.priority::BIGINT + CASE WHEN w.aging_ms > 0
				THEN floor(greatest(extract(epoch FROM now() - w.enqueued_at), 0) * 1000 / w.aging_ms)::BIGINT ELSE 0 END,
			w.fair_key, w.enqueued_at
		FROM resource_queue q JOIN resource_waiters w ON w.holder = q.holder ORDER BY q.pos`)
	if err != nil {
		return nil, s.fault(fmt.Errorf("listing the shared queue of resources: %w", err))
	}
	defer rows.Close()
	out := []store.Waiter{}
	for rows.Next() {
		var w store.Waiter
		var names []string
		var amounts []int32
		var eff int64
		if err := rows.Scan(&w.Holder, &w.Engine, &w.RunID, &w.Label, &names, &amounts, &w.Priority, &eff, &w.Key, &w.Since); err != nil {
			return nil, s.fault(err)
		}
		w.Effective = int(eff)
		w.Amounts = make(map[string]int, len(names))
		for i, n := range names {
			if i < len(amounts) {
				w.Amounts[n] = int(amounts[i])
			}
		}
		out = append(out, w)
	}
	return out, s.fault(rows.Err())
}
