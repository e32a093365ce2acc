package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/groupcommit"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/pathkey"
)

// writeTimeout bounds one group commit: a server that does not answer fails the writes
// instead of blocking the engine for ever, as a write whose outcome is unknown (a *FaultError
// wrapping store.ErrConnectionLost: the group may have been sent, see classify).
const writeTimeout = 2 * time.Minute

const (
	sqlRunInsert = `INSERT INTO workflows (id, name, spec_json, spec_hash, inputs, status, error,
		origin, env_allow, trigger, completed, total, created_at, updated_at, finished_at,
		parent_run_id, parent_step_key, priority, owner, lease_until)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18::integer,
		$19::text, CASE WHEN $19::text IS NOT NULL THEN now() + make_interval(secs => $20::float8) END)`
	// sqlRunUpdate fails with division_by_zero (SQLSTATE 22012) when the run does not exist: a
	// batch is sent as one pipeline whose statements' results are read only after it
	// committed, so an unknown run must abort it from inside (see apply). $8 is the attached
	// engine (NULL: none; then owner and lease are left alone): an update of a run another
	// engine owns — live, finished (its lease released) or expired — matches no row and fails
	// with numeric_value_out_of_range (22003), store.ErrLeaseLost (a run changes owner only
	// through ClaimRun and Acquire); an unfinished status takes the lease, a terminal one
	// releases it (store.Leaser).
	sqlRunUpdate = `WITH u AS (UPDATE workflows SET status = $1, error = $2, completed = $3, total = $4,
		updated_at = $5, finished_at = $6,
		owner = CASE WHEN $8::text IS NULL OR $1 NOT IN ` + sqlUnfinished + ` THEN owner ELSE $8::text END,
		lease_until = CASE WHEN $8::text IS NULL THEN lease_until WHEN $1 IN ` + sqlUnfinished + `
			THEN now() + make_interval(secs => $9::float8) END
		WHERE id = $7 AND ($8::text IS NULL OR owner IS NULL OR owner = $8::text) RETURNING 1)
		SELECT CASE WHEN x.c = 1 THEN 1 WHEN x.e = 0 THEN 1 / x.c ELSE 2147483647 + x.e END
		FROM (SELECT (SELECT count(*)::int FROM u) AS c, (SELECT count(*)::int FROM workflows WHERE id = $7) AS e) x`
	sqlStepsUpsert = `INSERT INTO workflow_steps (run_id, key, step_id, kind, status, attempt, output, file_refs,
		error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at, worker, logs, logs_dropped, progress)
		SELECT run_id, key, step_id, kind, status, attempt, output, file_refs,
		error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at, worker, logs, logs_dropped, progress
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bytea[], $8::bytea[],
			$9::text[], $10::text[], $11::text[], $12::boolean[], $13::bigint[], $14::bigint[], $15::bigint[],
			$16::text[], $17::text[], $18::bigint[], $19::text[])
		WITH ORDINALITY AS u(run_id, key, step_id, kind, status, attempt, output, file_refs,
		error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at, worker, logs, logs_dropped, progress, i)
		ORDER BY i
		ON CONFLICT (run_id, key) DO UPDATE SET step_id = excluded.step_id, kind = excluded.kind,
		status = excluded.status, attempt = excluded.attempt, output = excluded.output,
		file_refs = excluded.file_refs, error_kind = excluded.error_kind, error_message = excluded.error_message,
		error_trace = excluded.error_trace, cached = excluded.cached, started_at = excluded.started_at,
		finished_at = excluded.finished_at, updated_at = excluded.updated_at, worker = excluded.worker,
		logs = excluded.logs, logs_dropped = excluded.logs_dropped, progress = excluded.progress`
	sqlIdemUpsert = `INSERT INTO workflow_idempotency (scope, run_id, key, output, file_refs, created_at, expires_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::bytea[], $6::bigint[], $7::bigint[])
		ON CONFLICT (scope, run_id, key) DO UPDATE SET output = excluded.output, file_refs = excluded.file_refs,
		created_at = excluded.created_at, expires_at = excluded.expires_at`
	// sqlAttemptsUpsert writes attempt rows (store.Attempt); sqlAttemptsTrim deletes those a
	// write pushes out of the window kept (store.AttemptDropped).
	sqlAttemptsUpsert = `INSERT INTO step_attempts (run_id, step_key, attempt, tool, status, started_at, finished_at,
		args, worker, host, pid, error_kind, error_message, error_trace, exit, env)
		SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::bigint[],
			$8::text[], $9::text[], $10::text[], $11::bigint[], $12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
		ON CONFLICT (run_id, step_key, attempt) DO UPDATE SET tool = excluded.tool, status = excluded.status,
		started_at = excluded.started_at, finished_at = excluded.finished_at, args = excluded.args,
		worker = excluded.worker, host = excluded.host, pid = excluded.pid, error_kind = excluded.error_kind,
		error_message = excluded.error_message, error_trace = excluded.error_trace, exit = excluded.exit,
		env = excluded.env`
	// sqlFilesUpsert writes file records (store.FileRecord) in the order given, so their ids
	// follow it; the same key again replaces the row's other columns and keeps its id.
	sqlFilesUpsert = `INSERT INTO file_records (run_id, step_key, attempt, role, path, path_key, state, size, mod_time,
			dev, ino, hash, error, recorded_at, verified_at)
		SELECT run_id, step_key, attempt, role, path, path_key, state, size, mod_time, dev, ino, hash, error, recorded_at,
			verified_at
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[],
			$9::bigint[], $10::bigint[], $11::bigint[], $12::text[], $13::text[], $14::bigint[], $15::bigint[])
		WITH ORDINALITY AS u(run_id, step_key, attempt, role, path, path_key, state, size, mod_time, dev, ino, hash, error,
			recorded_at, verified_at, i)
		ORDER BY i
		ON CONFLICT (run_id, step_key, attempt, role, path) DO UPDATE SET state = excluded.state, size = excluded.size,
		mod_time = excluded.mod_time, dev = excluded.dev, ino = excluded.ino, hash = excluded.hash, error = excluded.error,
		recorded_at = excluded.recorded_at, verified_at = excluded.verified_at`
	// sqlCacheUpsert writes cache entries (store.CacheEntry), replacing those of their keys.
	sqlCacheUpsert = `INSERT INTO cache_entries (key, run_id, step_key, attempt, tool, step_id, workflow, parts, output,
			file_refs, created_at, expires_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
			$8::bytea[], $9::bytea[], $10::bytea[], $11::bigint[], $12::bigint[])
		ON CONFLICT (key, run_id, step_key, attempt) DO UPDATE SET tool = excluded.tool, step_id = excluded.step_id,
		workflow = excluded.workflow, parts = excluded.parts, output = excluded.output, file_refs = excluded.file_refs,
		created_at = excluded.created_at, expires_at = excluded.expires_at`
	sqlAttemptsTrim = `DELETE FROM step_attempts WHERE (run_id, step_key, attempt) IN
		(SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]))`
	// sqlEventsAppend reserves $1 sequence numbers (see the package comment) and appends the
	// events numbered from the first, returning the number before it.
	sqlEventsAppend = `WITH r AS (UPDATE store_counters SET value = value + $1::bigint WHERE name = 'event_seq'
			RETURNING value - $1::bigint AS base),
		ins AS (INSERT INTO workflow_events (seq, run_id, time, type, step_key, status, attempt, completed, total, detail)
			SELECT r.base + u.i, u.run_id, u.time, u.type, u.step_key, u.status, u.attempt, u.completed, u.total, u.detail
			FROM r, unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[],
				$9::bigint[], $10::bytea[])
			WITH ORDINALITY AS u(run_id, time, type, step_key, status, attempt, completed, total, detail, i))
		SELECT base FROM r`
)

// Write applies b atomically and durably (see the package comment): it returns once the
// transaction holding b has committed. ctx bounds nothing but the start: a batch queued is
// always applied or failed as a whole.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	err := s.gc.Do(b)
	if errors.Is(err, groupcommit.ErrClosed) {
		return store.ErrClosed
	}
	return err
}

// writeFor is how long one group commit may take: writeTimeout, or the store's writeWait.
func (s *Store) writeFor() time.Duration {
	if s.writeWait != 0 {
		return s.writeWait
	}
	return writeTimeout
}

// Retrying a write that never reached the database (docs/operations/cluster.md, "A database restart"):
// the pauses between tries double from retryFirst up to retryMax, for at most the engine's
// lease (retryDefault when no engine is attached).
const (
	retryFirst   = 10 * time.Millisecond
	retryMax     = 500 * time.Millisecond
	retryDefault = 15 * time.Second
)

// retryFor is how long commitGroup retries a group that never reached the database: the lease
// of the attached engine (past it, the engine's heartbeat has failed for a whole lease too and
// other engines may take its runs over), else retryDefault.
func (s *Store) retryFor() time.Duration {
	if l := s.lease.Load(); l != nil {
		return time.Duration(l.secs * float64(time.Second))
	}
	return retryDefault
}

// Retries returns how many times a group commit was tried again after its connection was lost
// before the write reached the database (for tests and figures).
func (s *Store) Retries() int64 { return s.retries.Load() }

// commitGroup applies the batches of group in one transaction (commitOnce). A try that lost
// its connection before the group could have been applied (nothing was sent, or the server
// ended the session in place of a statement's result: a restart, pg_terminate_backend) is
// tried again on a new connection, with pauses, for up to retryFor; a connection lost after
// the group was sent, before its commit was confirmed, a database still out of reach after
// retryFor, or no answer within writeTimeout, fails the group with a *FaultError wrapping
// store.ErrConnectionLost (the writes may or may not be applied: the engine does not guess, see
// exec). Any other fault (a full disk, an I/O error) fails it as a plain *FaultError, and
// other errors fail the batches they are about.
func (s *Store) commitGroup(group []*store.Batch) ([]error, error) {
	if fe := s.broken.Load(); fe != nil {
		return nil, fe
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.writeFor())
	defer cancel()
	began := time.Now()
	var errs []error
	var err error
	var ns *notSentError
	stop := s.retry(ctx, func() bool {
		errs, err = s.commitOnce(ctx, group)
		return errors.As(err, &ns)
	})
	switch {
	case stop == nil:
		return errs, err
	case errors.Is(stop, errGaveUp):
		return nil, &FaultError{DB: s.name, Err: fmt.Errorf("writing: %w: out of reach for %s: %w",
			store.ErrConnectionLost, time.Since(began).Round(time.Millisecond), ns.err)}
	default:
		return nil, &FaultError{DB: s.name, Err: fmt.Errorf("writing: %w: %w", store.ErrConnectionLost, ns.err)}
	}
}

// retryLost runs fn, a statement of its own (not a group commit), and runs it again on a new
// connection, with commitGroup's pauses for up to retryFor, while it fails with a lost
// connection that proves it was not applied (notApplied) or, when idempotent (running it twice
// is running it once), with any lost connection. It returns fn's last error.
func (s *Store) retryLost(ctx context.Context, idempotent bool, fn func() error) error {
	var err error
	_ = s.retry(ctx, func() bool {
		err = fn()
		if err == nil || ctx.Err() != nil || !connectionLost(err) || !(idempotent || notApplied(err)) {
			return false
		}
		s.dropConns(err)
		return true
	})
	return err
}

// errGaveUp is retry's answer when it stopped because the database stayed out of reach.
var errGaveUp = errors.New("out of reach for too long")

// retry calls try, and calls it again after a pause for as long as it asks to (it returns
// true): the pauses double from retryFirst up to retryMax, each counted in Retries, for up to
// retryFor from the first call. It returns nil once try did not ask again, errGaveUp (without
// pausing) when the next pause would end past retryFor, or ctx's error when ctx ended during a
// pause. The loop of commitGroup and retryLost.
func (s *Store) retry(ctx context.Context, try func() (again bool)) error {
	giveUp := time.Now().Add(s.retryFor())
	pause := retryFirst
	for try() {
		if time.Now().Add(pause).After(giveUp) {
			return errGaveUp
		}
		s.retries.Add(1)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		pause = min(2*pause, retryMax)
	}
	return nil
}

// notSentError is a try of commitOnce that lost its connection before the group could have
// been applied: commitGroup tries again.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }

// commitError is the error of the COMMIT of a write, after every statement succeeded: a
// connection lost there leaves the outcome unknown.
type commitError struct{ err error }

func (e *commitError) Error() string { return e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// connectionLost reports whether err is the loss of the connection (a network error, the
// server closing it, a FATAL of SQLSTATE class 08 or 57P01 to 57P03), as opposed to a fault
// the server reports on a live connection (a full disk, an I/O error).
func connectionLost(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	return AsFault("", err) != nil
}

// notApplied reports whether err, a lost connection, proves the write was not applied: pgx sent
// nothing (pgconn.SafeToRetry), no connection was made, or the server ended the session in
// place of a statement's result. The commit of a pipeline (an implicit transaction, at its
// Sync) or of a transaction comes after the results of all its statements, so a session that
// ended before one of them rolled the write back; an error at the commit (*commitError) or a
// read that found the connection gone (EOF, a reset) leaves it unknown.
func notApplied(err error) bool {
	if pgconn.SafeToRetry(err) {
		return true
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	var cm *commitError
	if errors.As(err, &cm) {
		return false
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Severity == "FATAL" || pe.Severity == "PANIC") && connectionLost(pe)
}

// classify returns err, an error of a try that was not about the batches' content (see
// commitOnce), as commitGroup handles it.
func (s *Store) classify(ctx context.Context, err error) error {
	s.dropConns(err)
	switch {
	case ctx.Err() != nil:
		// writeTimeout passed: the server did not answer in time, or no connection could be
		// had. The group may have been sent (pgx then closes the connection, and the server
		// may or may not have committed it first): its outcome is unknown.
		return &FaultError{DB: s.name, Err: fmt.Errorf("writing: %w: no answer within %s: %w",
			store.ErrConnectionLost, s.writeFor(), err)}
	case !connectionLost(err):
		return s.fault(fmt.Errorf("writing to %s: %w", s.name, err))
	case notApplied(err):
		return &notSentError{err: err}
	default:
		return &FaultError{DB: s.name, Err: fmt.Errorf("writing: %w: %w", store.ErrConnectionLost, err)}
	}
}

// commitOnce applies the batches of group in one transaction; when that fails for another
// reason than a fault, it applies them again batch by batch, each in a SAVEPOINT, so that only
// the failing batch fails, with an error naming its row. A try that lost its connection before
// the group could have been applied returns a *notSentError.
func (s *Store) commitOnce(ctx context.Context, group []*store.Batch) ([]error, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() == nil && AsFault(s.name, err) != nil {
			s.dropConns(err)
			return nil, &notSentError{err: fmt.Errorf("connecting to %s: %w", s.name, err)}
		}
		if ctx.Err() != nil {
			return nil, s.classify(ctx, fmt.Errorf("connecting to %s: %w", s.name, err))
		}
		return nil, s.fault(fmt.Errorf("writing to %s: %w", s.name, err))
	}
	defer conn.Release() // a connection that was lost is closed: the pool drops it
	// One round trip: the statements of the group in one pipeline, which PostgreSQL runs as one
	// implicit transaction, committed at its end (or rolled back whole at its first error).
	base, err := s.apply(ctx, conn, group, true)
	if err == nil {
		s.commits.Add(1)
		number(group, base)
		return nil, nil
	}
	if AsFault(s.name, err) != nil || ctx.Err() != nil {
		return nil, s.classify(ctx, err)
	}
	errs := make([]error, len(group))
	bases := make([]int64, len(group))
	err = s.inTx(ctx, conn, func(tx pgx.Tx) error {
		for i, b := range group {
			sp, err := tx.Begin(ctx) // a SAVEPOINT
			if err != nil {
				return err
			}
			if bases[i], err = s.apply(ctx, sp, []*store.Batch{b}, false); err != nil {
				if AsFault(s.name, err) != nil {
					return err
				}
				errs[i] = err
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				continue
			}
			if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	s.commits.Add(1)
	for i, b := range group {
		if errs[i] == nil {
			number([]*store.Batch{b}, bases[i])
		}
	}
	return errs, nil
}

// inTx runs fn in a transaction on conn and commits it.
func (s *Store) inTx(ctx context.Context, conn *pgxpool.Conn, fn func(pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return &commitError{err: err}
	}
	return nil
}

// number sets the Seq of the events of batches, numbered after base in order.
func number(batches []*store.Batch, base int64) {
	seq := uint64(base)
	for _, b := range batches {
		for i := range b.Events {
			seq++
			b.Events[i].Seq = seq
		}
	}
}

// sqlCancelRunCalls cancels the calls still queued or claimed of the runs of $1 (runs that
// ended) and wakes the engines running them ("c:ID"): nobody waits for them any more. They are
// calls a former orchestrator of the run left in flight (it died, or gave the run up) that the
// run's resume did not adopt; the calls of the run's own steps ended with their steps.
const sqlCancelRunCalls = `WITH u AS (UPDATE tool_calls SET status = 'cancelled', lease_until = NULL, done_at = now()
		WHERE run_id = ANY($1::text[]) AND status IN ('queued', 'claimed') RETURNING id)
	SELECT count(pg_notify('` + callsChannel + `', 'c:' || u.id)) FROM u`

// endedRuns returns the ids of the runs that batches end (a run update to a terminal status).
func endedRuns(batches []*store.Batch) []string {
	var ids []string
	for _, b := range batches {
		for i := range b.RunUpdates {
			if u := &b.RunUpdates[i]; u.Status.Terminal() {
				ids = append(ids, text(u.ID))
			}
		}
	}
	return ids
}

// sender is a connection or a transaction: what apply sends its pipeline on.
type sender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// apply writes batches on tx (a transaction, or a connection: then the pipeline is one implicit
// transaction of its own, and implicit is true), table by table (the runs created, the run updates, the steps, the
// idempotency entries, then the events, each in batch order), in one pipelined round trip, and
// returns the sequence number before the first event appended. The order between tables differs
// from batch after batch only for batches that depend on a concurrent batch of the same group: no
// caller does that (as for the SQLite store). When implicit, the end of the pipeline (br.Close)
// is the COMMIT, and its error a *commitError; in a transaction it is not (the transaction's
// own COMMIT is its caller's).
func (s *Store) apply(ctx context.Context, tx sender, batches []*store.Batch, implicit bool) (int64, error) {
	var q pgx.Batch
	type check struct {
		what string // the row, for errors
		run  string
	}
	var checks []check
	if l := s.lease.Load(); l != nil {
		// The fence of an attached engine: a group that writes steps, idempotency entries,
		// events, attempts, file records or cache entries of a run whose live lease another
		// engine holds fails whole, before any of it
		// is applied, with numeric_value_out_of_range (store.ErrLeaseLost). Its run updates
		// carry their own fence (sqlRunUpdate).
		if ids := fencedRuns(batches); len(ids) > 0 {
			q.Queue(sqlFence, ids, l.id)
			checks = append(checks, check{what: fmt.Sprintf("writing to %d runs", len(ids))})
		}
	}
	for _, b := range batches {
		for i := range b.CreateRuns {
			r := &b.CreateRuns[i]
			args, err := runArgs(r)
			if err != nil {
				return 0, err
			}
			owner, secs := s.leaseArgs()
			q.Queue(sqlRunInsert, append(args, owner, secs)...)
			checks = append(checks, check{what: "creating run " + r.ID, run: r.ID})
		}
	}
	for _, b := range batches {
		for i := range b.RunUpdates {
			u := &b.RunUpdates[i]
			errJSON, err := runErrorJSON(u.Error)
			if err != nil {
				return 0, err
			}
			owner, secs := s.leaseArgs()
			q.Queue(sqlRunUpdate, string(u.Status), errJSON, int64(u.Progress.Completed), int64(u.Progress.Total),
				nanos(u.UpdatedAt), nanos(u.FinishedAt), u.ID, owner, secs)
			checks = append(checks, check{what: "updating run " + u.ID, run: u.ID})
		}
	}
	if ended := endedRuns(batches); len(ended) > 0 {
		q.Queue(sqlCancelRunCalls, ended)
		checks = append(checks, check{what: fmt.Sprintf("cancelling the queued calls of %d ended runs", len(ended))})
	}
	if steps := dedupSteps(batches); len(steps) > 0 {
		q.Queue(sqlStepsUpsert, stepArrays(steps)...)
		checks = append(checks, check{what: fmt.Sprintf("writing %d steps", len(steps))})
	}
	if idem := dedupIdempotency(batches); len(idem) > 0 {
		q.Queue(sqlIdemUpsert, idemArrays(idem)...)
		checks = append(checks, check{what: fmt.Sprintf("writing %d idempotency entries", len(idem))})
	}
	if atts := dedupAttempts(batches); len(atts) > 0 {
		q.Queue(sqlAttemptsUpsert, attemptArrays(atts)...)
		checks = append(checks, check{what: fmt.Sprintf("writing %d attempts", len(atts))})
		if trim := trimArrays(atts); trim != nil {
			q.Queue(sqlAttemptsTrim, trim...)
			checks = append(checks, check{what: "trimming the attempts kept"})
		}
	}
	if files := dedupFiles(batches); len(files) > 0 {
		q.Queue(sqlFilesUpsert, fileArrays(files)...)
		checks = append(checks, check{what: fmt.Sprintf("writing %d file records", len(files))})
	}
	if entries := dedupCache(batches); len(entries) > 0 {
		q.Queue(sqlCacheUpsert, cacheArrays(entries)...)
		checks = append(checks, check{what: fmt.Sprintf("writing %d cache entries", len(entries))})
	}
	for _, b := range batches {
		for i := range b.Fires {
			f := &b.Fires[i]
			if f.Kind != store.FireFired {
				return 0, fmt.Errorf("a batch records fired fires only; got %q for %s", f.Kind, f.ScheduleID)
			}
			q.Queue(sqlFireInsert, text(f.ScheduleID), string(f.Kind), text(f.Reason), text(f.Message), text(f.RunID),
				text(f.Origin), nanos(f.ScheduledAt), nanos(f.FiredAt), text(f.DeliveryID), textPtr(f.ReplayKey))
			checks = append(checks, check{what: "recording a fire of " + f.ScheduleID})
		}
	}
	nEvents := 0
	for _, b := range batches {
		nEvents += len(b.Events)
	}
	if nEvents > 0 {
		q.Queue(sqlEventsAppend, eventArrays(batches, nEvents)...)
	}
	if q.Len() == 0 {
		return 0, nil
	}
	br := tx.SendBatch(ctx, &q)
	defer br.Close()
	for _, c := range checks {
		if _, err := br.Exec(); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) {
				switch {
				case pe.Code == "23505" && pe.ConstraintName == "workflows_pkey":
					return 0, fmt.Errorf("run %s: %w", c.run, store.ErrExists)
				case pe.Code == "23503":
					return 0, fmt.Errorf("%s: %s: %w", c.what, pe.Detail, store.ErrNotFound)
				case pe.Code == "22012": // sqlRunUpdate: no such run
					return 0, fmt.Errorf("%s: %w", c.what, store.ErrNotFound)
				case pe.Code == "22003": // sqlRunUpdate: another engine holds the run
					return 0, fmt.Errorf("%s: %w", c.what, store.ErrLeaseLost)
				}
			}
			return 0, fmt.Errorf("%s: %w", c.what, err)
		}
	}
	var base int64
	if nEvents > 0 {
		if err := br.QueryRow().Scan(&base); err != nil {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "23503" {
				return 0, fmt.Errorf("appending %d events: %s: %w", nEvents, pe.Detail, store.ErrNotFound)
			}
			return 0, fmt.Errorf("appending %d events: %w", nEvents, err)
		}
	}
	if err := br.Close(); err != nil {
		if implicit { // the implicit transaction's COMMIT
			return 0, &commitError{err: err}
		}
		return 0, err
	}
	return base, nil
}

// sqlFence fails with numeric_value_out_of_range when another engine owns one of the runs $1
// ($2 is this engine), whether its lease is live, released (it finished the run) or expired: an
// engine whose run was taken over (a SIGSTOP or a cut past its lease) writes nothing of it
// again until it acquires it (store.Leaser.Acquire, a resume), and a run changes owner only
// through ClaimRun and Acquire.
const sqlFence = `SELECT CASE WHEN count(*) = 0 THEN 0 ELSE 2147483647 + count(*)::int END FROM workflows
	WHERE id = ANY($1) AND owner IS NOT NULL AND owner <> $2`

// fencedRuns returns the ids of the runs whose steps, workflow-scoped idempotency entries,
// events, attempts, file records or cache entries batches write, except the runs the batches
// create.
func fencedRuns(batches []*store.Batch) []string {
	created := map[string]bool{}
	for _, b := range batches {
		for i := range b.CreateRuns {
			created[b.CreateRuns[i].ID] = true
		}
	}
	seen := map[string]bool{}
	var ids []string
	add := func(id string) {
		if id != "" && !created[id] && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	for _, b := range batches {
		for i := range b.Steps {
			add(b.Steps[i].RunID)
		}
		for i := range b.Idempotency {
			add(b.Idempotency[i].RunID)
		}
		for i := range b.Events {
			add(b.Events[i].RunID)
		}
		for i := range b.Attempts {
			add(b.Attempts[i].RunID)
		}
		for i := range b.Files {
			add(b.Files[i].RunID)
		}
		for i := range b.CacheEntries {
			add(b.CacheEntries[i].RunID)
		}
	}
	return ids
}

// dedupFiles returns the file records of batches, one per key (run, step, attempt, role,
// path), the last write of each at the place of the first (as dedupSteps): one upsert cannot
// write a row twice.
func dedupFiles(batches []*store.Batch) []*store.FileRecord {
	type key struct {
		run, step string
		n         int
		role      store.FileRole
		path      string
	}
	var out []*store.FileRecord
	var at map[key]int
	for _, b := range batches {
		for i := range b.Files {
			f := &b.Files[i]
			if at == nil {
				at = make(map[key]int, len(b.Files))
			}
			// The key as stored: texts cleaned as PostgreSQL's TEXT needs (two paths whose
			// bytes differ may be one row).
			k := key{text(f.RunID), text(f.StepKey), f.Attempt, store.FileRole(text(string(f.Role))), text(f.Path)}
			if j, ok := at[k]; ok {
				out[j] = f
				continue
			}
			at[k] = len(out)
			out = append(out, f)
		}
	}
	return out
}

func fileArrays(files []*store.FileRecord) []any {
	n := len(files)
	runID, key, role, path, state := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	pathKey, hash, errText := make([]*string, n), make([]*string, n), make([]*string, n)
	attempt, size, mod, dev, ino, recorded := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	verified := make([]int64, n)
	for i, f := range files {
		runID[i], key[i], role[i], path[i], state[i] = text(f.RunID), text(f.StepKey), text(string(f.Role)), text(f.Path), text(string(f.State))
		if k := pathkey.Key(path[i]); k != path[i] {
			pathKey[i] = &k
		}
		hash[i], errText[i] = textPtr(f.Hash), textPtr(f.Error)
		attempt[i], size[i], mod[i], recorded[i] = int64(f.Attempt), f.Size, nanos(f.ModTime), nanos(f.RecordedAt)
		dev[i], ino[i], verified[i] = int64(f.Dev), int64(f.Ino), nanos(f.VerifiedAt)
	}
	return []any{runID, key, attempt, role, path, pathKey, state, size, mod, dev, ino, hash, errText, recorded, verified}
}

// dedupCache returns the cache entries of batches, one per key (key, run, step, attempt), the
// last write of each.
func dedupCache(batches []*store.Batch) []*store.CacheEntry {
	type key struct {
		key, run, step string
		n              int
	}
	var out []*store.CacheEntry
	var at map[key]int
	for _, b := range batches {
		for i := range b.CacheEntries {
			e := &b.CacheEntries[i]
			if at == nil {
				at = map[key]int{}
			}
			k := key{text(e.Key), text(e.RunID), text(e.StepKey), e.Attempt}
			if j, ok := at[k]; ok {
				out[j] = e
				continue
			}
			at[k] = len(out)
			out = append(out, e)
		}
	}
	return out
}

func cacheArrays(es []*store.CacheEntry) []any {
	n := len(es)
	key, runID, stepKey, tool, stepID, workflow := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	parts, output, fileRefs := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	attempt, created, expires := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, e := range es {
		key[i], runID[i], stepKey[i], tool[i], stepID[i], workflow[i] = text(e.Key), text(e.RunID), text(e.StepKey), text(e.Tool), text(e.StepID), text(e.Workflow)
		parts[i], output[i], fileRefs[i] = bytesOrNil(e.Parts), bytesOrNil(e.Output), bytesOrNil(e.FileRefs)
		attempt[i], created[i], expires[i] = int64(e.Attempt), nanos(e.CreatedAt), nanos(e.ExpiresAt)
	}
	return []any{key, runID, stepKey, attempt, tool, stepID, workflow, parts, output, fileRefs, created, expires}
}

// dedupAttempts returns the attempt rows of batches, one per (RunID, StepKey, Attempt), the
// last write of each (as dedupSteps).
func dedupAttempts(batches []*store.Batch) []*store.Attempt {
	type key struct {
		run, step string
		n         int
	}
	var out []*store.Attempt
	var at map[key]int
	for _, b := range batches {
		for i := range b.Attempts {
			a := &b.Attempts[i]
			if at == nil {
				at = map[key]int{}
			}
			k := key{a.RunID, a.StepKey, a.Attempt}
			if j, ok := at[k]; ok {
				out[j] = a
				continue
			}
			at[k] = len(out)
			out = append(out, a)
		}
	}
	return out
}

func attemptArrays(atts []*store.Attempt) []any {
	n := len(atts)
	runID, key, tool, status := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempt, started, finished := make([]int64, n), make([]int64, n), make([]int64, n)
	args, worker, host, kind, msg, trace, exit := make([]*string, n), make([]*string, n), make([]*string, n),
		make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	pid := make([]*int64, n)
	env := make([]*string, n)
	for i, a := range atts {
		runID[i], key[i], tool[i], status[i] = text(a.RunID), text(a.StepKey), text(a.Tool), string(a.Status)
		attempt[i], started[i], finished[i] = int64(a.Attempt), nanos(a.StartedAt), nanos(a.FinishedAt)
		if a.Args != nil {
			t := text(string(a.Args))
			args[i] = &t
		}
		worker[i], host[i] = textPtr(a.Worker), textPtr(a.Host)
		if a.PID != 0 {
			p := int64(a.PID)
			pid[i] = &p
		}
		kind[i], msg[i], trace[i], exit[i] = textPtr(a.ErrorKind), textPtr(a.ErrorMessage), textPtr(a.ErrorTrace), textPtr(a.Exit)
		if a.Env != nil {
			t := text(string(a.Env))
			env[i] = &t
		}
	}
	return []any{runID, key, attempt, tool, status, started, finished, args, worker, host, pid, kind, msg, trace, exit, env}
}

// trimArrays returns the arguments of sqlAttemptsTrim for the attempts the writes of atts push
// out of the window kept, nil when none.
func trimArrays(atts []*store.Attempt) []any {
	var runID, key []string
	var attempt []int64
	for _, a := range atts {
		if d := store.AttemptDropped(a.Attempt); d > 0 {
			runID, key, attempt = append(runID, text(a.RunID)), append(key, text(a.StepKey)), append(attempt, int64(d))
		}
	}
	if runID == nil {
		return nil
	}
	return []any{runID, key, attempt}
}

func runArgs(r *store.Run) ([]any, error) {
	errJSON, err := runErrorJSON(r.Error)
	if err != nil {
		return nil, err
	}
	var envAllow []byte
	if r.EnvAllow != nil {
		if envAllow, err = json.Marshal(r.EnvAllow); err != nil {
			return nil, err
		}
	}
	spec := []byte(r.SpecJSON)
	if spec == nil {
		spec = []byte{}
	}
	return []any{text(r.ID), text(r.Name), spec, text(r.SpecHash), bytesOrNil(r.Inputs), string(r.Status), errJSON,
		text(r.Origin), envAllow, bytesOrNil(r.Trigger), int64(r.Progress.Completed), int64(r.Progress.Total),
		nanos(r.CreatedAt), nanos(r.UpdatedAt), nanos(r.FinishedAt), nullText(r.ParentRunID), nullText(r.ParentStepKey), r.Priority}, nil
}

// dedupSteps returns the step rows of batches, one per (RunID, Key): an upsert statement cannot
// write a row twice, and a row is replaced whole, so a key written twice in a group keeps its
// last write, at the place of its first (which gives the row its order when it is new).
func dedupSteps(batches []*store.Batch) []*store.Step {
	type key struct{ run, key string }
	var out []*store.Step
	var at map[key]int
	for _, b := range batches {
		for i := range b.Steps {
			st := &b.Steps[i]
			if at == nil {
				at = make(map[key]int, len(b.Steps))
			}
			k := key{st.RunID, st.Key}
			if j, ok := at[k]; ok {
				out[j] = st
				continue
			}
			at[k] = len(out)
			out = append(out, st)
		}
	}
	return out
}

func dedupIdempotency(batches []*store.Batch) []*store.IdempotencyEntry {
	type key struct{ scope, run, key string }
	var out []*store.IdempotencyEntry
	var at map[key]int
	for _, b := range batches {
		for i := range b.Idempotency {
			e := &b.Idempotency[i]
			if at == nil {
				at = map[key]int{}
			}
			k := key{e.Scope, e.RunID, e.Key}
			if j, ok := at[k]; ok {
				out[j] = e
				continue
			}
			at[k] = len(out)
			out = append(out, e)
		}
	}
	return out
}

func stepArrays(steps []*store.Step) []any {
	n := len(steps)
	runID, key, stepID, kind, status := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempt, started, finished, updated, dropped := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	output, fileRefs := make([][]byte, n), make([][]byte, n)
	errKind, errMsg, errTrace := make([]string, n), make([]string, n), make([]string, n)
	cached := make([]bool, n)
	worker, logs, progress := make([]*string, n), make([]*string, n), make([]*string, n)
	for i, st := range steps {
		runID[i], key[i], stepID[i], kind[i], status[i] = text(st.RunID), text(st.Key), text(st.StepID), text(st.Kind), string(st.Status)
		attempt[i], dropped[i] = int64(st.Attempt), int64(st.LogsDropped)
		started[i], finished[i], updated[i] = nanos(st.StartedAt), nanos(st.FinishedAt), nanos(st.UpdatedAt)
		output[i], fileRefs[i] = bytesOrNil(st.Output), bytesOrNil(st.FileRefs)
		errKind[i], errMsg[i], errTrace[i] = text(st.ErrorKind), text(st.ErrorMessage), text(st.ErrorTrace)
		cached[i] = st.Cached
		worker[i] = textPtr(st.Worker)
		logs[i] = textPtr(string(st.Logs))
		progress[i] = textPtr(string(st.Progress))
	}
	return []any{runID, key, stepID, kind, status, attempt, output, fileRefs, errKind, errMsg, errTrace, cached,
		started, finished, updated, worker, logs, dropped, progress}
}

func idemArrays(es []*store.IdempotencyEntry) []any {
	n := len(es)
	scope, runID, key := make([]string, n), make([]string, n), make([]string, n)
	output, fileRefs := make([][]byte, n), make([][]byte, n)
	created, expires := make([]int64, n), make([]int64, n)
	for i, e := range es {
		scope[i], runID[i], key[i] = text(e.Scope), text(e.RunID), text(e.Key)
		output[i], fileRefs[i] = bytesOrNil(e.Output), bytesOrNil(e.FileRefs)
		created[i], expires[i] = nanos(e.CreatedAt), nanos(e.ExpiresAt)
	}
	return []any{scope, runID, key, output, fileRefs, created, expires}
}

func eventArrays(batches []*store.Batch, n int) []any {
	runID, typ, stepKey, status := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	t, attempt, completed, total := make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	detail := make([][]byte, 0, n)
	for _, b := range batches {
		for i := range b.Events {
			ev := &b.Events[i]
			runID, typ, stepKey, status = append(runID, text(ev.RunID)), append(typ, text(ev.Type)), append(stepKey, text(ev.StepKey)), append(status, text(ev.Status))
			t, attempt = append(t, nanos(ev.Time)), append(attempt, int64(ev.Attempt))
			completed, total = append(completed, int64(ev.Progress.Completed)), append(total, int64(ev.Progress.Total))
			detail = append(detail, bytesOrNil(ev.Detail))
		}
	}
	return []any{int64(n), runID, t, typ, stepKey, status, attempt, completed, total, detail}
}

func runErrorJSON(e *store.RunError) ([]byte, error) {
	if e == nil {
		return nil, nil
	}
	return json.Marshal(e)
}

// bytesOrNil is b as a BYTEA argument: NULL when nil, else its bytes (an empty document stays
// empty, not NULL).
func bytesOrNil[T ~[]byte](b T) []byte {
	if b == nil {
		return nil
	}
	return []byte(b)
}

// text is s as a TEXT argument. PostgreSQL text holds valid UTF-8 without NUL bytes; SQLite
// keeps any bytes. A string that is not (a tool's error message in another encoding) is stored
// with each invalid byte and each NUL replaced by U+FFFD, rather than failing the write.
func text(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// textPtr is s as a nullable TEXT argument: NULL for "".
func textPtr(s string) *string {
	if s == "" {
		return nil
	}
	t := text(s)
	return &t
}

// nullText is s as a nullable TEXT argument: NULL for "".
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return text(s)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
