package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The admission of a schedule's fire across engines (store.ScheduleAdmitter, docs/operations/cluster.md,
// "Schedules"). The scheduler of each engine serialises the admissions of one schedule with a
// mutex; on a shared database that mutex is extended to every engine by a transaction-level
// advisory lock keyed by the schedule id, held from the redelivery check to the record of the
// fire:
//
//	lock → (webhook) a fired entry with this delivery id? → duplicate
//	     → (max_concurrent) count the schedule's unfinished runs of every engine → skip at the limit
//	     → start the run (its row is committed before Start returns) → record the fire → unlock
//
// So two engines that receive the same delivery at once (a load balancer retrying) start one
// run: the second takes the lock after the first recorded its fire, finds it and answers as for
// a redelivery; and two fires of a max_concurrent: 1 schedule on two engines cannot both see
// room. A delivery whose run could not start records no fired entry, so its retry (on any
// engine) starts it, as on one engine. A lock rather than a claim row with a unique key: the
// second request must wait for the first one's outcome (a run id to answer with, or a failure
// that lets it start the run itself), which a unique key alone answers only by polling; and the
// max_concurrent count needs the same serialisation anyway. The lock is released with the
// session if the holder dies.

// lockPoolConns is how many admission locks one engine holds at once (admissions of more
// schedules at once wait for a connection). The locks have a pool of their own: a holder writes
// its run through the main pool, and must never wait for a connection another holder keeps.
const lockPoolConns = 4

// lockWait bounds how long LockSchedule waits for another engine's admission of the schedule
// (PostgreSQL's lock_timeout, in whole milliseconds, at least 1: 0 would wait for ever; an
// admission takes milliseconds). Store.lockWait, when not 0, replaces it (tests).
const lockWait = 30 * time.Second

// LockSchedule takes the database-wide admission lock of scheduleID (store.ScheduleAdmitter):
// BEGIN, the lock's timeout and pg_advisory_xact_lock in one round trip on a connection of the
// lock pool; the unlock is a ROLLBACK (a second round trip) that returns the connection.
func (s *Store) LockSchedule(ctx context.Context, scheduleID string) (func(), error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	fail := func(err error) (func(), error) {
		// A lost connection resets the lock pool, where the others are as dead as this one.
		return nil, s.faultOf(s.lockPool, fmt.Errorf("taking the admission lock of schedule %s: %w", scheduleID, err))
	}
	conn, err := s.lockPool.Acquire(ctx)
	if err != nil {
		return fail(err)
	}
	wait := lockWait
	if s.lockWait != 0 {
		wait = s.lockWait
	}
	var q pgx.Batch
	q.Queue(`BEGIN`)
	q.Queue(fmt.Sprintf(`SET LOCAL lock_timeout = %d`, max(wait.Milliseconds(), 1)))
	q.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('dcc-flow schedule ' || $1, 0))`, text(scheduleID))
	if err := conn.SendBatch(ctx, &q).Close(); err != nil {
		s.release(conn)
		return fail(err)
	}
	return func() { s.release(conn) }, nil
}

// release ends the transaction of conn, a connection of the lock pool (releasing its
// transaction-level locks), waiting at most 5 s for the server, and returns conn to the pool
// (which closes it when the ROLLBACK failed; a lost connection resets the lock pool).
func (s *Store) release(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, `ROLLBACK`); err != nil {
		_ = conn.Conn().Close(ctx)
		s.dropConnsOf(s.lockPool, err)
	}
	conn.Release()
}

// ActiveScheduleRuns counts the unfinished top-level runs whose trigger names scheduleID, of
// every engine (store.ScheduleAdmitter). The server selects the candidates, whose trigger bytes
// hold `"schedule_id":"ID"` as the engine encodes it (encoding/json, like the trigger); the
// trigger's top-level schedule_id is then decoded here: a payload may hold the same bytes, and
// PostgreSQL's json operators refuse a payload holding "\u0000" (which JSON allows).
func (s *Store) ActiveScheduleRuns(ctx context.Context, scheduleID string) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	fail := func(err error) (int, error) {
		return 0, s.fault(fmt.Errorf("counting the active runs of schedule %s: %w", scheduleID, err))
	}
	id, err := json.Marshal(scheduleID)
	if err != nil {
		return fail(err)
	}
	needle := append([]byte(`"schedule_id":`), id...)
	rows, err := s.pool.Query(ctx, `SELECT trigger FROM workflows
		WHERE status IN `+sqlUnfinished+` AND parent_run_id IS NULL
		AND origin IN ('schedule', 'webhook') AND position($1::bytea IN trigger) > 0`, needle)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var trig []byte
		if err := rows.Scan(&trig); err != nil {
			return fail(err)
		}
		var t struct {
			ScheduleID string `json:"schedule_id"`
		}
		if json.Unmarshal(trig, &t) == nil && t.ScheduleID == scheduleID {
			n++
		}
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return n, nil
}
