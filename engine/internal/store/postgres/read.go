package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// finishedRun selects the runs in a finished status.
const finishedRun = `status IN ('completed', 'failed', 'cancelled', 'interrupted')`

// stepFinished selects the step rows (alias s) in a finished status.
const stepFinished = `s.status IN ('completed', 'failed', 'cancelled', 'skipped', 'interrupted')`

// progressColumns are the progress of a run as committed (store.Store: Run.Progress): the
// stored counts of a finished run; for a run still going, its step rows in a finished status
// and the total of its newest event.
const progressColumns = `CASE WHEN ` + finishedRun + ` THEN completed
		ELSE (SELECT count(*) FROM workflow_steps s WHERE s.run_id = workflows.id AND ` + stepFinished + `) END,
	CASE WHEN ` + finishedRun + ` THEN total
		ELSE coalesce((SELECT e.total FROM workflow_events e WHERE e.run_id = workflows.id ORDER BY e.seq DESC LIMIT 1), total) END`

const runColumns = `id, name, spec_json, spec_hash, inputs, status, error, origin, env_allow, trigger,
	` + progressColumns + `, created_at, updated_at, finished_at, parent_run_id, parent_step_key, priority`

// GetRun returns the run, or store.ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	if err := s.check(); err != nil {
		return store.Run{}, err
	}
	r, err := sqlrow.Run(s.pool.QueryRow(ctx, `SELECT `+runColumns+` FROM workflows WHERE id = $1`, text(id)))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Run{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return r, s.fault(err)
}

// ListRuns returns the runs matching f, newest first.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q, args := listRunsQuery(&f)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		r, err := sqlrow.Run(rows)
		if err != nil {
			return nil, s.fault(err)
		}
		out = append(out, r)
	}
	return out, s.fault(rows.Err())
}

// listRunsQuery is the query of ListRuns(f) and its arguments.
func listRunsQuery(f *store.RunFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if len(f.Statuses) > 0 {
		st := make([]string, len(f.Statuses))
		for i, x := range f.Statuses {
			st[i] = string(x)
		}
		where = append(where, "status = ANY("+arg(st)+")")
	}
	if f.Name != "" {
		where = append(where, "name = "+arg(text(f.Name)))
	}
	if f.ParentRunID != "" {
		where = append(where, "parent_run_id = "+arg(text(f.ParentRunID)))
	}
	if !f.Since.IsZero() {
		where = append(where, "created_at >= "+arg(nanos(f.Since)))
	}
	if !f.Until.IsZero() {
		where = append(where, "created_at < "+arg(nanos(f.Until)))
	}
	where = append(where, searchWhere(f, arg)...)
	if f.After != nil {
		// A row value comparison: PostgreSQL walks workflows_created (created_at DESC, id DESC)
		// from the cursor instead of reading every run before it.
		where = append(where, "(created_at, id) < ("+arg(nanos(f.After.CreatedAt))+", "+arg(text(f.After.ID))+")")
	}
	q := `SELECT ` + runColumns + ` FROM workflows`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	return q, args
}

// ListSteps returns the step instances of a run in the order each was first written.
func (s *Store) ListSteps(ctx context.Context, runID string) ([]store.Step, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.StepColumns+` FROM workflow_steps WHERE run_id = $1 ORDER BY ord`, text(runID))
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.Step
	for rows.Next() {
		st, err := sqlrow.Step(rows, runID)
		if err != nil {
			return nil, s.fault(err)
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, s.fault(err)
	}
	if out == nil {
		if _, err := s.GetRun(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

var _ store.AttemptLog = (*Store)(nil)

// Resumes implements store.AttemptLog, through the partial index workflow_events_resumed.
func (s *Store) Resumes(ctx context.Context, runID string) ([]run.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.EventColumns+` FROM workflow_events
		WHERE run_id = $1 AND type = 'workflow_resumed' ORDER BY seq`, text(runID))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []run.Event
	for rows.Next() {
		ev, err := sqlrow.Event(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, rows.Err()
}

// ListAttempts implements store.AttemptLog.
func (s *Store) ListAttempts(ctx context.Context, runID, stepKey string) ([]store.Attempt, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT ` + sqlrow.AttemptColumns + ` FROM step_attempts WHERE run_id = $1`
	args := []any{text(runID)}
	if stepKey != "" {
		q += ` AND step_key = $2`
		args = append(args, text(stepKey))
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY step_key COLLATE "C", attempt`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		a, err := sqlrow.Attempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// ListEvents returns events with Seq > f.AfterSeq in order. Only committed events are listed,
// and they commit in seq order (see the package comment), so no later commit adds a smaller seq.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]run.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT ` + sqlrow.EventColumns + ` FROM workflow_events
		WHERE seq > $1`
	args := []any{int64(f.AfterSeq)}
	if f.RunID != "" {
		args = append(args, text(f.RunID))
		q += fmt.Sprintf(" AND run_id = $%d", len(args))
	}
	if len(f.Types) > 0 {
		// No index has type: with a run id, the run's rows (index workflow_events_run on
		// (run_id, seq)) are read and the others dropped by the server, not sent to the caller.
		types := make([]string, len(f.Types))
		for i, t := range f.Types {
			types[i] = text(t)
		}
		args = append(args, types)
		q += fmt.Sprintf(" AND type = ANY($%d::text[])", len(args))
	}
	q += " ORDER BY seq"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []run.Event
	for rows.Next() {
		ev, err := sqlrow.Event(rows)
		if err != nil {
			return nil, s.fault(err)
		}
		out = append(out, ev)
	}
	return out, s.fault(rows.Err())
}

// LastSeq returns the largest event sequence number committed (the counter never goes back,
// also when a prune deletes the newest events).
func (s *Store) LastSeq(ctx context.Context) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	var v int64
	if err := s.pool.QueryRow(ctx, `SELECT value FROM store_counters WHERE name = 'event_seq'`).Scan(&v); err != nil {
		return 0, s.fault(err)
	}
	return uint64(v), nil
}

// GetIdempotency returns the entry for (scope, runID, key) if it is live at now.
func (s *Store) GetIdempotency(ctx context.Context, scope, runID, key string, now time.Time) (store.IdempotencyEntry, bool, error) {
	if err := s.check(); err != nil {
		return store.IdempotencyEntry{}, false, err
	}
	e := store.IdempotencyEntry{Scope: scope, RunID: runID, Key: key}
	var output, fileRefs []byte
	var created, expires int64
	err := s.pool.QueryRow(ctx, `SELECT output, file_refs, created_at, expires_at FROM workflow_idempotency
		WHERE scope = $1 AND run_id = $2 AND key = $3`, text(scope), text(runID), text(key)).Scan(&output, &fileRefs, &created, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, false, nil
	}
	if err != nil {
		return e, false, s.fault(err)
	}
	if expires != 0 && nanos(now) >= expires {
		return e, false, nil
	}
	e.Output, e.FileRefs, e.CreatedAt, e.ExpiresAt = sqlrow.Raw(output), sqlrow.Raw(fileRefs), sqlrow.FromNanos(created), sqlrow.FromNanos(expires)
	return e, true, nil
}

// PurgeExpired deletes the idempotency entries expired at now.
func (s *Store) PurgeExpired(ctx context.Context, now time.Time) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM workflow_idempotency WHERE expires_at != 0 AND expires_at <= $1`, nanos(now))
	if err != nil {
		return 0, s.fault(err)
	}
	return int(tag.RowsAffected()), nil
}

// MarkInterrupted turns every non-terminal run and its non-terminal steps into interrupted,
// and appends each run's interrupted event, in one transaction (see store.Store).
func (s *Store) MarkInterrupted(ctx context.Context, now time.Time, in store.Interruption) ([]string, error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	runErr, err := runErrorJSON(in.Error)
	if err != nil {
		return nil, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, s.fault(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	rows, err := tx.Query(ctx, `SELECT id FROM workflows WHERE status IN ('pending', 'running', 'waiting') FOR UPDATE`)
	if err != nil {
		return nil, s.fault(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.fault(err)
	}
	sort.Strings(ids)
	at := nanos(now)
	type prog struct{ completed, total int64 }
	progs := make([]prog, len(ids))
	for i, id := range ids {
		if _, err := tx.Exec(ctx, `UPDATE workflow_steps SET status = 'interrupted', updated_at = $1
			WHERE run_id = $2 AND status IN `+sqlStepInFlight, at, id); err != nil {
			return nil, s.fault(err)
		}
		// The run's progress as committed (see progressColumns), now that its steps in flight
		// are interrupted; the total is at least the steps finished.
		if err := tx.QueryRow(ctx, `UPDATE workflows SET status = 'interrupted', error = $1, updated_at = $2, finished_at = $2,
			completed = c.completed, total = greatest(c.completed, c.total)
			FROM (SELECT (SELECT count(*) FROM workflow_steps s WHERE s.run_id = $3 AND `+stepFinished+`) AS completed,
				coalesce((SELECT e.total FROM workflow_events e WHERE e.run_id = $3 ORDER BY e.seq DESC LIMIT 1),
					(SELECT total FROM workflows WHERE id = $3)) AS total) c
			WHERE id = $3 RETURNING workflows.completed, workflows.total`, runErr, at, id).Scan(&progs[i].completed, &progs[i].total); err != nil {
			return nil, s.fault(err)
		}
	}
	// A paused run stays paused (Unpause resumes it); its steps that were in flight when its
	// engine stopped are interrupted.
	if _, err := tx.Exec(ctx, `UPDATE workflow_steps SET status = 'interrupted', updated_at = $1
		WHERE status IN `+sqlStepInFlight+`
		AND run_id IN (SELECT id FROM workflows WHERE status = 'paused')`, at); err != nil {
		return nil, s.fault(err)
	}
	if len(ids) > 0 {
		// The events last, under the counter's row lock (see the package comment).
		b := &store.Batch{Events: make([]run.Event, len(ids))}
		for i, id := range ids {
			b.Events[i] = run.Event{RunID: id, Time: now, Type: run.EventInterrupted, Status: string(run.StatusInterrupted),
				Progress: run.Progress{Completed: int(progs[i].completed), Total: int(progs[i].total)}, Detail: in.Detail}
		}
		if _, err := s.apply(ctx, tx, []*store.Batch{b}, false); err != nil {
			return nil, s.fault(fmt.Errorf("appending the interrupted events: %w", err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.fault(err)
	}
	return ids, nil
}

// PutArtefact stores data content-addressed and returns its sha256.
func (s *Store) PutArtefact(ctx context.Context, data []byte) (string, error) {
	if err := s.checkWrite(); err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	if data == nil {
		data = []byte{}
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO artefacts (sha256, size, data) VALUES ($1, $2, $3) ON CONFLICT (sha256) DO NOTHING`,
		h, len(data), data); err != nil {
		return "", s.fault(err)
	}
	return h, nil
}

// GetArtefact returns the bytes stored under sha256, or store.ErrNotFound.
func (s *Store) GetArtefact(ctx context.Context, sum string) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var data []byte
	err := s.pool.QueryRow(ctx, `SELECT data FROM artefacts WHERE sha256 = $1`, text(strings.ToLower(sum))).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("artefact %s: %w", sum, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.fault(err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// searchWhere returns the terms of f's search fields (store.RunFilter), each answered from an
// index of migration 0010 (as SQLite's, see there); arg adds a parameter and returns its
// placeholder. A search for completed steps, which most step rows are, walks the newest runs
// instead (EXISTS), and with a limit stops early.
func searchWhere(f *store.RunFilter, arg func(any) string) (where []string) {
	keys := make([]string, 0, len(f.Inputs))
	for k := range f.Inputs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		where = append(where, `id IN (SELECT run_id FROM run_inputs WHERE key = `+arg(text(k))+` AND value = `+arg(text(f.Inputs[k]))+`)`)
	}
	if f.Tool != "" {
		where = append(where, `id IN (SELECT run_id FROM step_attempts WHERE tool = `+arg(text(f.Tool))+`)`)
	}
	if f.Worker != "" {
		// The worker itself, or every process of that pool ("POOL/…"), through the
		// text_pattern_ops index (byte order, whatever the collation).
		where = append(where, `id IN (SELECT run_id FROM step_attempts WHERE worker = `+arg(text(f.Worker))+
			` OR worker LIKE `+arg(text(store.EscapeLike(f.Worker)+"/%"))+` ESCAPE '\')`)
	}
	if f.ErrorKind != "" {
		k := arg(text(f.ErrorKind))
		where = append(where, `id IN (SELECT run_id FROM step_attempts WHERE error_kind = `+k+`
			UNION ALL SELECT run_id FROM workflow_steps WHERE error_kind = `+k+` AND error_message <> ''
			UNION ALL SELECT run_id FROM run_errors WHERE kind = `+k+`)`) // the run's own (migration 0011)
	}
	if f.ErrorText != "" {
		// ILIKE ignores case; the pattern's own %, _ and \ are escaped.
		p := arg(text("%" + store.EscapeLike(f.ErrorText) + "%"))
		where = append(where, `id IN (SELECT run_id FROM step_attempts WHERE error_kind IS NOT NULL AND error_message ILIKE `+p+` ESCAPE '\'
			UNION ALL SELECT run_id FROM workflow_steps WHERE error_message <> '' AND error_message ILIKE `+p+` ESCAPE '\'
			UNION ALL SELECT run_id FROM run_errors WHERE message ILIKE `+p+` ESCAPE '\')`)
	}
	if len(f.StepStatuses) > 0 {
		st := make([]string, len(f.StepStatuses))
		for i, x := range f.StepStatuses {
			st[i] = string(x)
		}
		if slices.Contains(f.StepStatuses, run.StepCompleted) {
			where = append(where, `EXISTS (SELECT 1 FROM workflow_steps s WHERE s.run_id = workflows.id AND s.status = ANY(`+arg(st)+`))`)
		} else {
			where = append(where, `id IN (SELECT run_id FROM workflow_steps WHERE status = ANY(`+arg(st)+`) AND status <> 'completed')`)
		}
	}
	return where
}
