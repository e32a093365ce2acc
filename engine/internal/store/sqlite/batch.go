package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// The statements of the write path, prepared once on the writer connection.
const (
	sqlRunExists = `SELECT 1 FROM workflows WHERE id = ?`
	sqlRunInsert = `INSERT INTO workflows (id, name, spec_json, spec_hash, inputs, status, error,
			origin, env_allow, trigger, completed, total, created_at, updated_at, finished_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlRunUpdate = `UPDATE workflows SET status = ?, error = ?, completed = ?, total = ?,
			updated_at = ?, finished_at = ? WHERE id = ?`
	sqlStepUpsert = `INSERT INTO workflow_steps (run_id, key, ord, step_id, kind, status, attempt,
			output, file_refs, error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(run_id, key) DO UPDATE SET step_id = excluded.step_id, kind = excluded.kind,
			status = excluded.status, attempt = excluded.attempt, output = excluded.output,
			file_refs = excluded.file_refs, error_kind = excluded.error_kind, error_message = excluded.error_message,
			error_trace = excluded.error_trace, cached = excluded.cached, started_at = excluded.started_at,
			finished_at = excluded.finished_at, updated_at = excluded.updated_at`
	sqlIdemUpsert = `INSERT OR REPLACE INTO workflow_idempotency
			(scope, run_id, key, output, file_refs, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`
	sqlEventInsert = `INSERT INTO workflow_events (seq, run_id, time, type, step_key, status,
			attempt, completed, total, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

var writeStatements = []string{sqlRunExists, sqlRunInsert, sqlRunUpdate, sqlStepUpsert, sqlIdemUpsert, sqlEventInsert}

// txn runs prepared statements inside the committer's transaction.
type txn struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func (t *txn) exec(query string, args ...any) (sql.Result, error) {
	return t.tx.StmtContext(t.ctx, t.stmts[query]).ExecContext(t.ctx, args...)
}

func (t *txn) queryRow(query string, args ...any) *sql.Row {
	return t.tx.StmtContext(t.ctx, t.stmts[query]).QueryRowContext(t.ctx, args...)
}

// apply writes one batch inside the committer's transaction, assigning event sequence numbers
// after *seq and step orders after *ord.
func apply(t *txn, b *store.Batch, seq *uint64, ord *int64) error {
	for _, r := range b.CreateRuns {
		var one int
		err := t.queryRow(sqlRunExists, r.ID).Scan(&one)
		if err == nil {
			return fmt.Errorf("run %s: %w", r.ID, store.ErrExists)
		}
		if err != sql.ErrNoRows {
			return err
		}
		errJSON, err := runErrorJSON(r.Error)
		if err != nil {
			return err
		}
		var envAllow []byte
		if r.EnvAllow != nil {
			if envAllow, err = json.Marshal(r.EnvAllow); err != nil {
				return err
			}
		}
		if _, err := t.exec(sqlRunInsert,
			r.ID, r.Name, []byte(r.SpecJSON), r.SpecHash, nullBytes(r.Inputs), string(r.Status), errJSON,
			r.Origin, envAllow, nullBytes(r.Trigger), r.Progress.Completed, r.Progress.Total,
			nanos(r.CreatedAt), nanos(r.UpdatedAt), nanos(r.FinishedAt)); err != nil {
			return fmt.Errorf("creating run %s: %w", r.ID, err)
		}
	}
	for _, u := range b.RunUpdates {
		errJSON, err := runErrorJSON(u.Error)
		if err != nil {
			return err
		}
		res, err := t.exec(sqlRunUpdate,
			string(u.Status), errJSON, u.Progress.Completed, u.Progress.Total, nanos(u.UpdatedAt), nanos(u.FinishedAt), u.ID)
		if err != nil {
			return fmt.Errorf("updating run %s: %w", u.ID, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("updating run %s: %w", u.ID, store.ErrNotFound)
		}
	}
	for _, st := range b.Steps {
		*ord++
		_, err := t.exec(sqlStepUpsert,
			st.RunID, st.Key, *ord, st.StepID, st.Kind, string(st.Status), st.Attempt, nullBytes(st.Output),
			nullBytes(st.FileRefs), st.ErrorKind, st.ErrorMessage, st.ErrorTrace, st.Cached,
			nanos(st.StartedAt), nanos(st.FinishedAt), nanos(st.UpdatedAt))
		if err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("step %s of run %s: %w", st.Key, st.RunID, store.ErrNotFound)
			}
			return fmt.Errorf("writing step %s of run %s: %w", st.Key, st.RunID, err)
		}
	}
	for _, e := range b.Idempotency {
		if _, err := t.exec(sqlIdemUpsert,
			e.Scope, e.RunID, e.Key, nullBytes(e.Output), nullBytes(e.FileRefs), nanos(e.CreatedAt), nanos(e.ExpiresAt)); err != nil {
			return fmt.Errorf("writing idempotency entry %q: %w", e.Key, err)
		}
	}
	for i := range b.Events {
		ev := &b.Events[i]
		*seq++
		ev.Seq = *seq
		if _, err := t.exec(sqlEventInsert,
			int64(ev.Seq), ev.RunID, nanos(ev.Time), ev.Type, ev.StepKey, ev.Status, ev.Attempt,
			ev.Progress.Completed, ev.Progress.Total, nullBytes(ev.Detail)); err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("event %s of run %s: %w", ev.Type, ev.RunID, store.ErrNotFound)
			}
			return fmt.Errorf("appending event %s: %w", ev.Type, err)
		}
	}
	return nil
}

func isForeignKey(err error) bool {
	return strings.Contains(err.Error(), "FOREIGN KEY constraint failed")
}

func nullBytes(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return []byte(b)
}

func runErrorJSON(e *store.RunError) (any, error) {
	if e == nil {
		return nil, nil
	}
	return json.Marshal(e)
}
