package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/groupcommit"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// ObserveCommits implements store.CommitObserver: fn is called after each group commit (one
// pipeline of the group's statements, or its retry batch by batch in savepoints).
func (s *Store) ObserveCommits(fn func(store.Commit)) { groupcommit.ObserveCommits(&s.gc, fn) }

// RequestControl files a request for the engine that runs the run and returns its id. It works
// on a read-only store too (it is how such a store acts on a run).
func (s *Store) RequestControl(ctx context.Context, r store.ControlRequest) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if !store.ValidControlAction(r.Action) {
		return 0, fmt.Errorf("control request: unknown action %q (approve, cancel, pause or unpause)", r.Action)
	}
	var id int64
	err := s.pool.QueryRow(ctx, `INSERT INTO control_requests (run_id, action, step_key, approved, reason, requested_by, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`, text(r.RunID), r.Action, text(r.StepKey), r.Approved,
		text(r.Reason), text(r.By), nanos(r.CreatedAt)).Scan(&id)
	return id, s.fault(err)
}

// ControlAnswer returns the answer to request id (Handled false while pending).
func (s *Store) ControlAnswer(ctx context.Context, id int64) (store.ControlAnswer, error) {
	if err := s.check(); err != nil {
		return store.ControlAnswer{}, err
	}
	var a store.ControlAnswer
	var handled int64
	err := s.pool.QueryRow(ctx, `SELECT handled_at, error_code, error FROM control_requests WHERE id = $1`, id).
		Scan(&handled, &a.ErrorCode, &a.Error)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("control request %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return a, s.fault(err)
	}
	a.Handled = handled != 0
	return a, nil
}

// PendingControl returns the requests not answered yet, oldest first. A store attached as an
// engine (Attach) returns only those it is to answer: the requests for the runs it holds the
// lease of, and those for runs that no live lease holds (or unknown runs), which it claims
// (claimed_by) so that no other engine answers them too, unless the engine that claimed one
// stopped beating.
func (s *Store) PendingControl(ctx context.Context) ([]store.ControlRequest, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT id, run_id, action, step_key, approved, reason, requested_by, created_at
		FROM control_requests WHERE handled_at = 0 ORDER BY id`
	var args []any
	if l := s.lease.Load(); l != nil {
		q = `UPDATE control_requests c SET claimed_by = $1 WHERE c.id IN (
			SELECT c2.id FROM control_requests c2 LEFT JOIN workflows w ON w.id = c2.run_id
			WHERE c2.handled_at = 0 AND (
				(w.owner = $1 AND w.lease_until >= now())
				OR ((w.id IS NULL OR w.lease_until IS NULL OR w.lease_until < now())
					AND (c2.claimed_by IS NULL OR c2.claimed_by = $1 OR NOT EXISTS (SELECT 1 FROM engines e
						WHERE e.id = c2.claimed_by AND e.heartbeat_at + make_interval(secs => e.lease_secs) >= now()))))
			ORDER BY c2.id FOR UPDATE OF c2 SKIP LOCKED)
		RETURNING id, run_id, action, step_key, approved, reason, requested_by, created_at`
		args = []any{l.id}
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.ControlRequest
	for rows.Next() {
		var r store.ControlRequest
		var created int64
		if err := rows.Scan(&r.ID, &r.RunID, &r.Action, &r.StepKey, &r.Approved, &r.Reason, &r.By, &created); err != nil {
			return nil, s.fault(err)
		}
		r.CreatedAt = sqlrow.FromNanos(created)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fault(err)
	}
	slices.SortFunc(out, func(a, b store.ControlRequest) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// AnswerControl records the outcome of request id (code and message "" for success).
func (s *Store) AnswerControl(ctx context.Context, id int64, now time.Time, code, message string) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, `UPDATE control_requests SET handled_at = $1, error_code = $2, error = $3 WHERE id = $4`,
		max(nanos(now), 1), text(code), text(message), id)
	return s.fault(err)
}

const fireColumns = `schedule_id, kind, reason, message, run_id, origin, scheduled_at, fired_at, delivery_id`

var _ store.FireBatcher = (*Store)(nil)

// BatchesFires implements store.FireBatcher: Write takes Batch.Fires (apply).
func (s *Store) BatchesFires() {}

// sqlFireInsert appends a fire (RecordFire, and store.Batch.Fires in a write's transaction).
const sqlFireInsert = `INSERT INTO schedule_fires (` + fireColumns + `, replay_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

// RecordFire appends a fire. The fire of a run just started is what the other engines'
// redelivery, replay and max_concurrent checks find, so a connection lost before the insert
// could have been applied (a server restart, pg_terminate_backend; see retryLost) is tried
// again on a new connection. Only then: schedule_fires has no unique key but its generated id,
// so an insert sent again after a loss that leaves its outcome unknown could record the fire
// twice.
func (s *Store) RecordFire(ctx context.Context, f store.Fire) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	err := s.retryLost(ctx, false, func() error {
		_, err := s.pool.Exec(ctx, sqlFireInsert,
			text(f.ScheduleID), string(f.Kind), text(f.Reason), text(f.Message), text(f.RunID), text(f.Origin),
			nanos(f.ScheduledAt), nanos(f.FiredAt), text(f.DeliveryID), textPtr(f.ReplayKey))
		return err
	})
	if err != nil {
		return s.fault(fmt.Errorf("recording a fire of %s: %w", f.ScheduleID, err))
	}
	if f.Kind != store.FireFired && s.refusedFires.Due(f.ScheduleID) {
		// The newest MaxRefusedFires refused fires of the schedule stay (store.FireLog).
		if _, err := s.pool.Exec(ctx, `DELETE FROM schedule_fires WHERE schedule_id = $1 AND kind != 'fired' AND id <
			(SELECT id FROM schedule_fires WHERE schedule_id = $1 AND kind != 'fired' ORDER BY id DESC LIMIT 1 OFFSET $2)`,
			text(f.ScheduleID), store.MaxRefusedFires-1); err != nil {
			return s.fault(fmt.Errorf("trimming the refused fires of %s: %w", f.ScheduleID, err))
		}
	}
	return nil
}

func scanFire(sc pgx.Row) (store.Fire, error) {
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
	f, err := scanFire(s.pool.QueryRow(ctx, q, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Fire{}, false, nil
	}
	return f, err == nil, s.fault(err)
}

// LastFire returns the most recent fire of scheduleID.
func (s *Store) LastFire(ctx context.Context, scheduleID string) (store.Fire, bool, error) {
	return s.oneFire(ctx, `SELECT `+fireColumns+` FROM schedule_fires WHERE schedule_id = $1 ORDER BY id DESC LIMIT 1`, text(scheduleID))
}

// FireByDelivery returns the latest started fire of scheduleID with deliveryID.
func (s *Store) FireByDelivery(ctx context.Context, scheduleID, deliveryID string) (store.Fire, bool, error) {
	return s.oneFire(ctx, `SELECT `+fireColumns+` FROM schedule_fires WHERE schedule_id = $1 AND delivery_id = $2
		AND kind = 'fired' ORDER BY id DESC LIMIT 1`, text(scheduleID), text(deliveryID))
}

// FireByReplay returns the latest started fire of scheduleID whose replay key is key
// (store.ReplayFinder; the partial index schedule_fires_replay answers it).
func (s *Store) FireByReplay(ctx context.Context, scheduleID, key string) (store.Fire, bool, error) {
	if key == "" {
		return store.Fire{}, false, s.check()
	}
	f, ok, err := s.oneFire(ctx, `SELECT `+fireColumns+` FROM schedule_fires WHERE schedule_id = $1 AND replay_key = $2
		AND kind = 'fired' ORDER BY id DESC LIMIT 1`, text(scheduleID), text(key))
	if ok {
		f.ReplayKey = key
	}
	return f, ok, err
}

// Fires returns up to limit fires of scheduleID ("" = every schedule), newest first.
func (s *Store) Fires(ctx context.Context, scheduleID string, limit int) ([]store.Fire, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT ` + fireColumns + ` FROM schedule_fires`
	var args []any
	if scheduleID != "" {
		q += ` WHERE schedule_id = $1`
		args = append(args, text(scheduleID))
	}
	q += ` ORDER BY id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.Fire
	for rows.Next() {
		f, err := scanFire(rows)
		if err != nil {
			return nil, s.fault(err)
		}
		out = append(out, f)
	}
	return out, s.fault(rows.Err())
}

// SaveWorkflow implements store.Catalog in one transaction, under a transaction-level advisory
// lock on the name, so that engines registering the same workflow at once number its versions
// one after the other.
func (s *Store) SaveWorkflow(ctx context.Context, w store.WorkflowVersion) (store.WorkflowVersion, error) {
	if err := s.checkWrite(); err != nil {
		return store.WorkflowVersion{}, err
	}
	fail := func(err error) (store.WorkflowVersion, error) {
		return store.WorkflowVersion{}, s.fault(fmt.Errorf("saving workflow %s: %w", w.Name, err))
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	name := text(w.Name)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('dcc-flow catalog ' || $1, 0))`, name); err != nil {
		return fail(err)
	}
	var version int64
	err = tx.QueryRow(ctx, `SELECT version FROM workflow_versions WHERE name = $1 AND spec_hash = $2`, name, text(w.SpecHash)).Scan(&version)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) + 1 FROM workflow_versions WHERE name = $1`, name).Scan(&version); err != nil {
			return fail(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO workflow_versions (name, version, spec_hash, spec, description, registered_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, name, version, text(w.SpecHash), text(string(w.Spec)), text(w.Description), nanos(w.RegisteredAt)); err != nil {
			return fail(err)
		}
	case err != nil:
		return fail(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE workflow_versions SET current = (version = $1),
		registered_at = CASE WHEN version = $1 THEN $2 ELSE registered_at END WHERE name = $3`,
		version, nanos(w.RegisteredAt), name); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	w.Version, w.Current = int(version), true
	return w, nil
}

// RemoveWorkflow implements store.Catalog.
func (s *Store) RemoveWorkflow(ctx context.Context, name string) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE workflow_versions SET current = false WHERE name = $1 AND current`, text(name))
	if err != nil {
		return false, s.fault(fmt.Errorf("removing workflow %s: %w", name, err))
	}
	return tag.RowsAffected() > 0, nil
}

// WorkflowVersions implements store.Catalog.
func (s *Store) WorkflowVersions(ctx context.Context, name string) ([]store.WorkflowVersion, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT name, version, spec_hash, spec, description, registered_at, current FROM workflow_versions`
	var args []any
	if name != "" {
		q += ` WHERE name = $1`
		args = append(args, text(name))
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY name, version DESC`, args...)
	if err != nil {
		return nil, s.fault(fmt.Errorf("reading the workflow catalog: %w", err))
	}
	defer rows.Close()
	var out []store.WorkflowVersion
	for rows.Next() {
		var w store.WorkflowVersion
		var spec string
		var version, at int64
		if err := rows.Scan(&w.Name, &version, &w.SpecHash, &spec, &w.Description, &at, &w.Current); err != nil {
			return nil, s.fault(fmt.Errorf("reading the workflow catalog: %w", err))
		}
		w.Version, w.Spec, w.RegisteredAt = int(version), []byte(spec), sqlrow.FromNanos(at)
		out = append(out, w)
	}
	return out, s.fault(rows.Err())
}

// PruneChunk is the most runs one prune transaction deletes, so that the writes of the runs in
// progress are not held up for the whole prune.
const PruneChunk = 200

// finishedStatuses returns the finished statuses among statuses (all four when empty).
func finishedStatuses(statuses []run.Status) []string {
	var out []string
	for _, st := range []run.Status{run.StatusCompleted, run.StatusFailed, run.StatusCancelled, run.StatusInterrupted} {
		if len(statuses) == 0 || slices.Contains(statuses, st) {
			out = append(out, string(st))
		}
	}
	return out
}

// Prune deletes the runs in a finished status (one of statuses, or any when statuses is empty)
// that finished before olderThan, PruneChunk runs per transaction.
func (s *Store) Prune(ctx context.Context, olderThan time.Time, statuses []run.Status) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	runs, err := s.PruneCandidates(ctx, olderThan, statuses, 0)
	if err != nil || len(runs) == 0 {
		return 0, err
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return s.PruneRuns(ctx, ids, olderThan, statuses, nil)
}

// PruneCandidates lists the runs Prune would delete, earliest finish first (store.Pruner).
func (s *Store) PruneCandidates(ctx context.Context, olderThan time.Time, statuses []run.Status, limit int) ([]store.Run, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	sts := finishedStatuses(statuses)
	if len(sts) == 0 {
		return nil, nil
	}
	q := `SELECT id, name, status, origin, created_at, finished_at FROM workflows
		WHERE status = ANY($1) AND finished_at != 0 AND finished_at < $2 ORDER BY finished_at, id`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := s.pool.Query(ctx, q, sts, nanos(olderThan))
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		var r store.Run
		var status string
		var created, finished int64
		if err := rows.Scan(&r.ID, &r.Name, &status, &r.Origin, &created, &finished); err != nil {
			return nil, s.fault(err)
		}
		r.Status, r.CreatedAt, r.FinishedAt = run.Status(status), sqlrow.FromNanos(created), sqlrow.FromNanos(finished)
		out = append(out, r)
	}
	return out, s.fault(rows.Err())
}

// PruneRuns deletes those of ids that still qualify (store.Pruner), PruneChunk per
// transaction; their steps, events and workflow-scoped idempotency entries go with them (ON
// DELETE CASCADE and a trigger). The event counter is not touched, so a deleted seq is never
// assigned again.
func (s *Store) PruneRuns(ctx context.Context, ids []string, olderThan time.Time, statuses []run.Status, progress func(deleted int)) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	sts := finishedStatuses(statuses)
	if len(sts) == 0 {
		return 0, nil
	}
	deleted := 0
	for len(ids) > 0 {
		if err := ctx.Err(); err != nil {
			return deleted, context.Cause(ctx)
		}
		chunk := ids[:min(len(ids), PruneChunk)]
		ids = ids[len(chunk):]
		tag, err := s.pool.Exec(ctx, `DELETE FROM workflows WHERE id = ANY($1) AND status = ANY($2)
			AND finished_at != 0 AND finished_at < $3`, chunk, sts, nanos(olderThan))
		if err != nil {
			return deleted, s.fault(fmt.Errorf("pruning runs: %w", err))
		}
		deleted += int(tag.RowsAffected())
		if progress != nil {
			progress(deleted)
		}
	}
	return deleted, nil
}
