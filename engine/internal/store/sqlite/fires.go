package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
)

// The schedule_fires table keeps the scheduler's fire history.
var (
	_ store.FireLog        = (*Store)(nil)
	_ store.DeliveryFinder = (*Store)(nil)
	_ store.FireBatcher    = (*Store)(nil)
)

// BatchesFires implements store.FireBatcher: Write takes Batch.Fires (putFires).
func (s *Store) BatchesFires() {}

const fireColumns = `schedule_id, kind, reason, message, run_id, origin, scheduled_at, fired_at, delivery_id`

const sqlFireInsert = `INSERT INTO schedule_fires (` + fireColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// RecordFire appends a fire.
func (s *Store) RecordFire(ctx context.Context, f store.Fire) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	_, err := s.w.ExecContext(ctx, sqlFireInsert,
		f.ScheduleID, string(f.Kind), f.Reason, f.Message, f.RunID, f.Origin, nanos(f.ScheduledAt), nanos(f.FiredAt), f.DeliveryID)
	if err != nil {
		return fmt.Errorf("recording a fire of %s: %w", f.ScheduleID, err)
	}
	if f.Kind != store.FireFired && s.refusedFires.Due(f.ScheduleID) {
		// The newest MaxRefusedFires refused fires of the schedule stay (store.FireLog).
		if _, err := s.w.ExecContext(ctx, `DELETE FROM schedule_fires WHERE schedule_id = ? AND kind != 'fired' AND id <
			(SELECT id FROM schedule_fires WHERE schedule_id = ? AND kind != 'fired' ORDER BY id DESC LIMIT 1 OFFSET ?)`,
			f.ScheduleID, f.ScheduleID, store.MaxRefusedFires-1); err != nil {
			return fmt.Errorf("trimming the refused fires of %s: %w", f.ScheduleID, err)
		}
	}
	return nil
}

func scanFire(sc sqlrow.Scanner) (store.Fire, error) {
	var f store.Fire
	var kind string
	var scheduled, fired int64
	err := sc.Scan(&f.ScheduleID, &kind, &f.Reason, &f.Message, &f.RunID, &f.Origin, &scheduled, &fired, &f.DeliveryID)
	f.Kind, f.ScheduledAt, f.FiredAt = store.FireKind(kind), sqlrow.FromNanos(scheduled), sqlrow.FromNanos(fired)
	return f, err
}

func (s *Store) oneFire(ctx context.Context, q string, args ...any) (store.Fire, bool, error) {
	if err := s.check(); err != nil {
		return store.Fire{}, false, err
	}
	f, err := scanFire(s.r.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Fire{}, false, nil
	}
	return f, err == nil, err
}

// LastFire returns the most recent fire of scheduleID.
func (s *Store) LastFire(ctx context.Context, scheduleID string) (store.Fire, bool, error) {
	return s.oneFire(ctx, `SELECT `+fireColumns+` FROM schedule_fires WHERE schedule_id = ? ORDER BY id DESC LIMIT 1`, scheduleID)
}

// FireByDelivery returns the latest started fire of scheduleID with deliveryID.
func (s *Store) FireByDelivery(ctx context.Context, scheduleID, deliveryID string) (store.Fire, bool, error) {
	return s.oneFire(ctx, `SELECT `+fireColumns+` FROM schedule_fires WHERE schedule_id = ? AND delivery_id = ?
		AND kind = 'fired' ORDER BY id DESC LIMIT 1`, scheduleID, deliveryID)
}

// Fires returns up to limit fires of scheduleID ("" = every schedule), newest first.
func (s *Store) Fires(ctx context.Context, scheduleID string, limit int) ([]store.Fire, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT ` + fireColumns + ` FROM schedule_fires`
	var args []any
	if scheduleID != "" {
		q += ` WHERE schedule_id = ?`
		args = append(args, scheduleID)
	}
	q += ` ORDER BY id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Fire
	for rows.Next() {
		f, err := scanFire(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, rows.Err()
}
