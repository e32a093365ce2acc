package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The durable queue of tool calls (store.CallQueue, docs/operations/cluster.md "The tool-call queue"),
// with the reports of running calls (tool_call_reports). Claims are FOR UPDATE SKIP LOCKED; wake-ups are NOTIFY on the channel callsChannel, sent in
// the statement that changes a call's status, so a listener is woken only once the change is
// committed. Lease times are the server's (now()).

// callsChannel is the LISTEN/NOTIFY channel of the queue.
const callsChannel = "dcc_flow_calls"

var _ store.CallQueue = (*Store)(nil)

// EnqueueCall adds c, queued, and wakes the engines listening ("q:TOOL" for a host-tool call,
// "r:REMOTE" for a call of a remote). With c.Nonce it is idempotent: a nonce already on a row
// returns that row's id, and the insert is retried on any lost connection; without one only
// when the connection was lost before the insert could have been applied (see retryLost).
func (s *Store) EnqueueCall(ctx context.Context, c store.QueuedCall) (int64, error) {
	l, err := s.attached()
	if err != nil {
		return 0, err
	}
	args := string(c.Args)
	if args == "" {
		args = "{}"
	}
	var id int64
	err = s.retryLost(ctx, c.Nonce != "", func() error {
		err := s.pool.QueryRow(ctx, `WITH prev AS (SELECT id FROM tool_calls WHERE nonce = $8),
		c AS (INSERT INTO tool_calls (run_id, step_key, attempt, tool, remote, args, enqueued_by, nonce, traceparent)
			SELECT $1::text, $2::text, $3::int, $4::text, $5::text, $6::text, $7::text, $8::text, $9::text WHERE NOT EXISTS (SELECT 1 FROM prev)
			ON CONFLICT (nonce) WHERE nonce IS NOT NULL DO NOTHING
			RETURNING id, tool, remote)
		SELECT c.id, pg_notify('`+callsChannel+`', CASE WHEN c.remote = '' THEN 'q:' || c.tool ELSE 'r:' || c.remote END)::text FROM c
		UNION ALL SELECT id, '' FROM prev`,
			text(c.RunID), text(c.StepKey), c.Attempt, c.Tool, text(c.Remote), text(args), l.id, textPtr(c.Nonce),
			text(c.Traceparent)).Scan(&id, new(string))
		if errors.Is(err, pgx.ErrNoRows) {
			// The nonce's row was inserted by a try still in flight when this one started (a
			// connection cut, not a restart), committed since: it is the call.
			err = s.pool.QueryRow(ctx, `SELECT id FROM tool_calls WHERE nonce = $1`, c.Nonce).Scan(&id)
		}
		return err
	})
	if err != nil {
		what := "tool " + c.Tool
		if c.Remote != "" {
			what = "remote " + c.Remote + " tool " + c.Tool
		}
		if connectionLost(err) {
			// A try may have been applied: the call may be queued (store.ErrConnectionLost).
			err = fmt.Errorf("%w: %w", store.ErrConnectionLost, err)
		}
		return 0, s.fault(fmt.Errorf("queueing the call of %s (run %s, step %s): %w", what, c.RunID, c.StepKey, err))
	}
	return id, nil
}

// AdoptCall finds the newest call still queued or claimed of c's run, step, tool, remote and
// args (the tool_calls_live index); a queued one takes c.Traceparent (migration 0015).
func (s *Store) AdoptCall(ctx context.Context, c store.QueuedCall) (int64, bool, error) {
	if _, err := s.attached(); err != nil {
		return 0, false, err
	}
	args := string(c.Args)
	if args == "" {
		args = "{}"
	}
	var id int64
	err := s.retryLost(ctx, true, func() error { // a read: retried on any lost connection
		// A call in flight first; else a done one only if it is the step's newest call (an
		// older one was an earlier attempt's, or an earlier execution's, whose outcome its step
		// recorded).
		// Retried on any lost connection: a try whose update was applied left the done call's
		// attempt at $7, which the next try matches too.
		return s.pool.QueryRow(ctx, `WITH f AS (SELECT id FROM tool_calls WHERE run_id = $1 AND step_key = $2
			AND tool = $3 AND remote = $4 AND args = $5
			AND (status IN ('queued', 'claimed') OR status = 'done' AND $6 > 0 AND attempt IN ($6, $7)
				AND id = (SELECT max(id) FROM tool_calls WHERE run_id = $1 AND step_key = $2))
			ORDER BY status IN ('queued', 'claimed') DESC, id DESC LIMIT 1)
			UPDATE tool_calls t SET attempt = $7,
				traceparent = CASE WHEN t.status = 'queued' AND $8::text <> '' THEN $8::text ELSE t.traceparent END
			FROM f WHERE t.id = f.id RETURNING t.id`,
			text(c.RunID), text(c.StepKey), c.Tool, text(c.Remote), text(args), int64(c.Interrupted), int64(c.Attempt),
			text(c.Traceparent)).Scan(&id)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, s.fault(fmt.Errorf("looking for a call in flight of run %s, step %s: %w", c.RunID, c.StepKey, err))
	}
	return id, true, nil
}

// ClaimCall claims the oldest queued call of one of tools (host-tool calls) or of one of
// remotes (calls of a remote), with its traceparent (migration 0015).
func (s *Store) ClaimCall(ctx context.Context, tools, remotes []string) (*store.QueuedCall, error) {
	l, err := s.attached()
	if err != nil {
		return nil, err
	}
	if len(tools) == 0 && len(remotes) == 0 {
		return nil, nil
	}
	if tools == nil {
		tools = []string{}
	}
	if remotes == nil {
		remotes = []string{}
	}
	var c store.QueuedCall
	var args string
	err = s.pool.QueryRow(ctx, `UPDATE tool_calls SET status = 'claimed', claimed_by = $2,
			lease_until = now() + make_interval(secs => $3), claimed_at = now()
		WHERE id = (SELECT id FROM tool_calls WHERE status = 'queued'
				AND (remote = '' AND tool = ANY($1) OR remote <> '' AND remote = ANY($4))
			ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1)
		RETURNING id, run_id, step_key, attempt, tool, remote, args, traceparent`, tools, l.id, l.secs, remotes).
		Scan(&c.ID, &c.RunID, &c.StepKey, &c.Attempt, &c.Tool, &c.Remote, &args, &c.Traceparent)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.fault(fmt.Errorf("claiming a queued tool call: %w", err))
	}
	c.Args = json.RawMessage(args)
	return &c, nil
}

// CompleteCall records the outcome of a call this engine holds claimed (with its files and
// env: migration 0013), and wakes its orchestrator ("d:ID").
func (s *Store) CompleteCall(ctx context.Context, id int64, out store.CallOutcome) (bool, error) {
	l, err := s.attached()
	if err != nil {
		return false, err
	}
	logs := string(out.Logs)
	if logs == "" {
		logs = "[]"
	}
	files := string(out.Files)
	if files == "" {
		files = "[]"
	}
	var result *string
	if out.ErrorKind == "" {
		r := string(out.Output)
		if r == "" {
			r = "null"
		}
		r = text(r)
		result = &r
	}
	// Idempotent (a second try of an applied one matches no row): retried on any lost connection
	// (a restart), so that a call's outcome outlives a restart while its claim does.
	var tag pgconn.CommandTag
	err = s.retryLost(ctx, true, func() error {
		var err error
		tag, err = s.pool.Exec(ctx, `WITH u AS (UPDATE tool_calls SET status = 'done', result = $3, error_kind = $4,
			error_message = $5, error_trace = $6, worker = $7, logs = $8, logs_dropped = $9, files = $10, env = $11, lease_until = NULL, done_at = now()
		WHERE id = $1 AND status = 'claimed' AND claimed_by = $2 RETURNING id)
		SELECT pg_notify('`+callsChannel+`', 'd:' || u.id)::text FROM u`,
			id, l.id, result, text(out.ErrorKind), text(out.ErrorMessage), text(out.ErrorTrace), text(out.Worker), text(logs), out.LogsDropped,
			text(files), textPtr(string(out.Env)))
		return err
	})
	if err != nil {
		return false, s.fault(fmt.Errorf("recording the outcome of queued tool call %d: %w", id, err))
	}
	return tag.RowsAffected() == 1, nil
}

// CallStatus returns a call's status, the Seq of its newest report and, once done, its outcome.
func (s *Store) CallStatus(ctx context.Context, id int64) (string, store.CallOutcome, error) {
	if err := s.check(); err != nil {
		return "", store.CallOutcome{}, err
	}
	var status, logs, files string
	var result, env *string
	var out store.CallOutcome
	err := s.pool.QueryRow(ctx, `SELECT status, result, error_kind, error_message, error_trace,
			coalesce(nullif(worker, ''), claimed_by, ''), logs, logs_dropped, files, env,
			coalesce((SELECT max(seq) FROM tool_call_reports WHERE call_id = $1), 0)
		FROM tool_calls WHERE id = $1`, id).
		Scan(&status, &result, &out.ErrorKind, &out.ErrorMessage, &out.ErrorTrace, &out.Worker, &logs, &out.LogsDropped, &files, &env, &out.LastReport)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", out, store.ErrNotFound
	}
	if err != nil {
		return "", out, s.fault(fmt.Errorf("reading queued tool call %d: %w", id, err))
	}
	if result != nil {
		out.Output = json.RawMessage(*result)
	}
	if logs != "" && logs != "[]" {
		out.Logs = json.RawMessage(logs)
	}
	if files != "" && files != "[]" {
		out.Files = json.RawMessage(files)
	}
	if env != nil {
		out.Env = json.RawMessage(*env)
	}
	return status, out, nil
}

// CancelCall marks a queued or claimed call cancelled and wakes its worker ("c:ID").
func (s *Store) CancelCall(ctx context.Context, id int64) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	err := s.retryLost(ctx, true, func() error { // idempotent: retried on any lost connection
		_, err := s.pool.Exec(ctx, `WITH u AS (UPDATE tool_calls SET status = 'cancelled', lease_until = NULL, done_at = now()
		WHERE id = $1 AND status IN ('queued', 'claimed') RETURNING id)
		SELECT pg_notify('`+callsChannel+`', 'c:' || u.id)::text FROM u`, id)
		return err
	})
	if err != nil {
		return s.fault(fmt.Errorf("cancelling queued tool call %d: %w", id, err))
	}
	return nil
}

// RenewCalls extends the leases of the calls of ids this engine still holds claimed.
func (s *Store) RenewCalls(ctx context.Context, ids []int64) ([]int64, error) {
	l, err := s.attached()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var held []int64
	err = s.retryLost(ctx, true, func() error { // idempotent: retried on any lost connection
		rows, err := s.pool.Query(ctx, `UPDATE tool_calls SET lease_until = now() + make_interval(secs => $3)
		WHERE id = ANY($1) AND status = 'claimed' AND claimed_by = $2 RETURNING id`, ids, l.id, l.secs)
		if err != nil {
			return err
		}
		held, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if err != nil {
		return nil, s.fault(fmt.Errorf("renewing the claims of engine %s: %w", l.id, err))
	}
	return held, nil
}

// ExpireCalls fails the claimed calls whose lease expired with kind worker_lost. The
// conditional UPDATE is the exactly-once: of engines expiring at once, the first takes the
// row lock; the others re-evaluate the condition on its committed row (done) and skip it. It
// also deletes the calls that finished more than a day ago (their orchestrator read them), with
// their reports, and the reports written more than an hour ago.
func (s *Store) ExpireCalls(ctx context.Context) ([]int64, error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM tool_calls WHERE done_at < now() - interval '1 day'`); err != nil {
		return nil, s.fault(fmt.Errorf("deleting the finished queued tool calls: %w", err))
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM tool_call_reports WHERE created_at < now() - interval '1 hour'`); err != nil {
		return nil, s.fault(fmt.Errorf("deleting the queued tool calls' reports older than an hour: %w", err))
	}
	rows, err := s.pool.Query(ctx, `WITH u AS (UPDATE tool_calls SET status = 'done', error_kind = 'worker_lost',
			error_message = 'engine ' || coalesce(claimed_by, '?') || ' claimed this call and stopped renewing its claim (it died, hung or lost the database)',
			lease_until = NULL, done_at = now()
		WHERE status = 'claimed' AND lease_until < now() RETURNING id)
		SELECT u.id, pg_notify('`+callsChannel+`', 'd:' || u.id)::text FROM u`)
	if err != nil {
		return nil, s.fault(fmt.Errorf("failing the expired claims of queued tool calls: %w", err))
	}
	ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
		var id int64
		return id, r.Scan(&id, new(string))
	})
	if err != nil {
		return nil, s.fault(fmt.Errorf("failing the expired claims of queued tool calls: %w", err))
	}
	return ids, nil
}

// ReportCall records a report of a call this engine holds claimed and wakes its orchestrator
// ("p:ID"). The claim is checked and locked (FOR SHARE) in the statement that inserts the row,
// so a report never lands after a cancel, an expiry or another engine's claim committed, and the
// outcome's UPDATE waits for a report being written.
func (s *Store) ReportCall(ctx context.Context, id int64, r store.CallReport) (bool, error) {
	l, err := s.attached()
	if err != nil {
		return false, err
	}
	var progress *string
	if r.Progress != nil {
		b, err := json.Marshal(r.Progress)
		if err != nil {
			return false, fmt.Errorf("recording a report of queued tool call %d: the progress: %w", id, err)
		}
		p := text(string(b))
		progress = &p
	}
	lines := "[]"
	if len(r.Lines) > 0 {
		b, err := json.Marshal(r.Lines)
		if err != nil {
			return false, fmt.Errorf("recording a report of queued tool call %d: the log lines: %w", id, err)
		}
		lines = text(string(b))
	}
	tag, err := s.pool.Exec(ctx, `WITH c AS (SELECT id FROM tool_calls
			WHERE id = $1 AND status = 'claimed' AND claimed_by = $2 FOR SHARE),
		i AS (INSERT INTO tool_call_reports (call_id, seq, progress, lines, dropped)
			SELECT c.id, $3, $4, $5, $6 FROM c RETURNING call_id)
		SELECT pg_notify('`+callsChannel+`', 'p:' || i.call_id)::text FROM i`,
		id, l.id, r.Seq, progress, lines, max(r.Dropped, 0))
	if err != nil {
		return false, s.fault(fmt.Errorf("recording report %d of queued tool call %d: %w", r.Seq, id, err))
	}
	return tag.RowsAffected() == 1, nil
}

// CallReports returns the reports of call id numbered past after, in order.
func (s *Store) CallReports(ctx context.Context, id int64, after int) ([]store.CallReport, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, progress, lines, dropped FROM tool_call_reports
		WHERE call_id = $1 AND seq > $2 ORDER BY seq`, id, after)
	if err != nil {
		return nil, s.fault(fmt.Errorf("reading the reports of queued tool call %d: %w", id, err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.CallReport, error) {
		var r store.CallReport
		var progress *string
		var lines string
		if err := row.Scan(&r.Seq, &progress, &lines, &r.Dropped); err != nil {
			return r, err
		}
		if progress != nil {
			var p run.StepProgress
			if json.Unmarshal([]byte(*progress), &p) == nil {
				r.Progress = &p
			}
		}
		if json.Unmarshal([]byte(lines), &r.Lines) != nil {
			r.Lines = nil // written by an engine: valid; a hand-edited row is skipped, not fatal
		}
		return r, nil
	})
	if err != nil {
		return nil, s.fault(fmt.Errorf("reading the reports of queued tool call %d: %w", id, err))
	}
	return out, nil
}

// ListenCalls listens on the queue's channel on a connection of its own (taken out of the
// pool, closed at the end), calls ready (when not nil) once it listens, then fn with each
// notification's payload.
func (s *Store) ListenCalls(ctx context.Context, ready func(), fn func(payload string)) error {
	return s.listen(ctx, callsChannel, ready, fn)
}

// listen runs LISTEN channel on a connection of its own (taken out of the pool, closed at the
// end), calls ready (when not nil) once it listens, then fn with each notification's payload,
// until ctx ends (its error) or the connection fails (the store's fault).
func (s *Store) listen(ctx context.Context, channel string, ready func(), fn func(payload string)) error {
	if err := s.check(); err != nil {
		return err
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.fault(err)
	}
	conn := pc.Hijack()
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, `LISTEN `+channel); err != nil {
		return s.fault(err)
	}
	if ready != nil {
		ready()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return s.fault(err)
		}
		fn(n.Payload)
	}
}
