package sqlite

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"math/bits"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/pathkey"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The statements of the write path, prepared once on the writer connection (see wconn).
const (
	sqlRunInsert = `INSERT INTO workflows (id, name, spec_json, spec_hash, inputs, status, error,
			origin, env_allow, trigger, completed, total, created_at, updated_at, finished_at,
			parent_run_id, parent_step_key, priority)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlRunUpdate = `UPDATE workflows SET status = ?, error = ?, completed = ?, total = ?,
			updated_at = ?, finished_at = ? WHERE id = ?`
	sqlStepUpsert = sqlStepInsertHead + sqlStepValues + sqlStepUpsertTail
	sqlIdemUpsert = `INSERT OR REPLACE INTO workflow_idempotency
			(scope, run_id, key, output, file_refs, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`
	sqlEventInsert = sqlEventInsertHead + sqlEventValues
	// sqlAttemptUpsert writes one attempt row; sqlAttemptTrim deletes the attempt a write
	// pushes out of the window kept (store.AttemptDropped).
	sqlAttemptUpsert = `INSERT INTO step_attempts (run_id, step_key, attempt, tool, status, started_at, finished_at,
			args, worker, host, pid, error_kind, error_message, error_trace, exit, env)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(run_id, step_key, attempt) DO UPDATE SET tool = excluded.tool, status = excluded.status,
			started_at = excluded.started_at, finished_at = excluded.finished_at, args = excluded.args,
			worker = excluded.worker, host = excluded.host, pid = excluded.pid, error_kind = excluded.error_kind,
			error_message = excluded.error_message, error_trace = excluded.error_trace, exit = excluded.exit,
			env = excluded.env`
	sqlAttemptTrim = `DELETE FROM step_attempts WHERE run_id = ? AND step_key = ? AND attempt = ?`
	// sqlFileUpsert writes one file record (store.FileRecord): the same key again replaces the
	// row's other columns and keeps its id (migration 0013).
	sqlFileUpsert = `INSERT INTO file_records (run_id, step_key, attempt, role, path, path_key, state, size, mod_time,
			dev, ino, hash, error, recorded_at, verified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(run_id, step_key, attempt, role, path) DO UPDATE SET state = excluded.state, size = excluded.size,
			mod_time = excluded.mod_time, dev = excluded.dev, ino = excluded.ino, hash = excluded.hash,
			error = excluded.error, recorded_at = excluded.recorded_at, verified_at = excluded.verified_at`
	// sqlCacheUpsert writes one cache entry (store.CacheEntry), replacing the one of its key.
	sqlCacheUpsert = `INSERT INTO cache_entries (key, run_id, step_key, attempt, tool, step_id, workflow, parts, output,
			file_refs, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(key, run_id, step_key, attempt) DO UPDATE SET tool = excluded.tool, step_id = excluded.step_id,
			workflow = excluded.workflow, parts = excluded.parts, output = excluded.output, file_refs = excluded.file_refs,
			created_at = excluded.created_at, expires_at = excluded.expires_at`
)

// The parts of the step and event statements, for the multi-row forms (see multiRow).
const (
	sqlStepInsertHead = `INSERT INTO workflow_steps (run_id, key, ord, step_id, kind, status, attempt,
			output, file_refs, error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at, worker, logs, logs_dropped, progress)
			VALUES `
	sqlStepValues     = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlStepUpsertTail = `
			ON CONFLICT(run_id, key) DO UPDATE SET step_id = excluded.step_id, kind = excluded.kind,
			status = excluded.status, attempt = excluded.attempt, output = excluded.output,
			file_refs = excluded.file_refs, error_kind = excluded.error_kind, error_message = excluded.error_message,
			error_trace = excluded.error_trace, cached = excluded.cached, started_at = excluded.started_at,
			finished_at = excluded.finished_at, updated_at = excluded.updated_at, worker = excluded.worker,
			logs = excluded.logs, logs_dropped = excluded.logs_dropped, progress = excluded.progress`
	sqlEventInsertHead = `INSERT INTO workflow_events (seq, run_id, time, type, step_key, status,
			attempt, completed, total, detail) VALUES `
	sqlEventValues = `(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// maxRows bounds the rows of one multi-row statement (a power of two; 64 step rows are 1,216
// parameters, far below SQLite's limit of 32,766).
const maxRows = 64

// The multi-row statements, by log2 of their row count (see chunk).
var (
	sqlStepUpserts  = multiRow(sqlStepInsertHead, sqlStepValues, sqlStepUpsertTail)
	sqlEventInserts = multiRow(sqlEventInsertHead, sqlEventValues, "")
)

// multiRow returns the statements that write 1, 2, 4, … maxRows rows at once: head, n copies
// of values, tail.
func multiRow(head, values, tail string) []string {
	var out []string
	for n := 1; n <= maxRows; n *= 2 {
		var b strings.Builder
		b.WriteString(head)
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(values)
		}
		b.WriteString(tail)
		out = append(out, b.String())
	}
	return out
}

// chunk returns how many of the remaining rows the next multi-row statement writes: the
// largest power of two ≤ min(remaining, maxRows), so a group uses at most log2(maxRows)+1
// distinct statements per table.
func chunk(remaining int) (n, log2 int) {
	n, log2 = maxRows, bits.Len(maxRows)-1
	for n > remaining {
		n, log2 = n>>1, log2-1
	}
	return n, log2
}

// The transaction statements of the leader.
const (
	sqlBegin      = `BEGIN IMMEDIATE`
	sqlCommit     = `COMMIT`
	sqlRollback   = `ROLLBACK`
	sqlSavepoint  = `SAVEPOINT b`
	sqlRollbackTo = `ROLLBACK TO b`
	sqlRelease    = `RELEASE b`
)

// wconn is the writer's driver connection with the write statements prepared on it, once
// each, and reused (database/sql would re-bind a prepared statement to the transaction and
// convert every argument on each call). It is used inside sql.Conn.Raw by the leader only.
type wconn struct {
	dc    any // the driver connection the statements belong to
	stmts map[string]driver.Stmt
	args  []driver.NamedValue // the arguments of the next statement (see arg)
}

// arg adds an argument for the next exec. v is a driver.Value: int64, float64, bool, []byte,
// string, time.Time or nil.
func (w *wconn) arg(v driver.Value) {
	w.args = append(w.args, driver.NamedValue{Ordinal: len(w.args) + 1, Value: v})
}

// bytesArg adds a JSON value as a BLOB argument, NULL when nil.
func (w *wconn) bytesArg(b []byte) {
	if b == nil {
		w.arg(nil)
		return
	}
	w.arg(b)
}

// execResult runs query with the arguments added by arg, preparing it on first use.
func (w *wconn) execResult(query string) (driver.Result, error) {
	args := w.args
	w.args = w.args[:0]
	st, ok := w.stmts[query]
	if !ok {
		p, ok := w.dc.(driver.ConnPrepareContext)
		if !ok {
			return nil, fmt.Errorf("sqlite store: the driver cannot prepare statements")
		}
		var err error
		if st, err = p.PrepareContext(context.Background(), query); err != nil {
			return nil, err
		}
		w.stmts[query] = st
	}
	return st.(driver.StmtExecContext).ExecContext(context.Background(), args)
}

func (w *wconn) exec(query string) error {
	_, err := w.execResult(query)
	return err
}

func (w *wconn) close() {
	for _, st := range w.stmts {
		st.Close()
	}
	w.stmts = map[string]driver.Stmt{}
}

// apply writes one batch inside the leader's transaction, a statement per row, assigning event
// sequence numbers after *seq and step orders after *ord. Its errors name the row that failed.
func apply(w *wconn, b *store.Batch, seq *uint64, ord *int64) error {
	for i := range b.CreateRuns {
		if err := createRun(w, &b.CreateRuns[i]); err != nil {
			return err
		}
	}
	for i := range b.RunUpdates {
		if err := updateRun(w, &b.RunUpdates[i]); err != nil {
			return err
		}
	}
	for i := range b.Steps {
		st := &b.Steps[i]
		*ord++
		stepArgs(w, st, *ord)
		if err := w.exec(sqlStepUpsert); err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("step %s of run %s: %w", st.Key, st.RunID, store.ErrNotFound)
			}
			return fmt.Errorf("writing step %s of run %s: %w", st.Key, st.RunID, err)
		}
	}
	for i := range b.Idempotency {
		if err := putIdempotency(w, &b.Idempotency[i]); err != nil {
			return err
		}
	}
	for i := range b.Events {
		ev := &b.Events[i]
		*seq++
		ev.Seq = *seq
		eventArgs(w, ev)
		if err := w.exec(sqlEventInsert); err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("event %s of run %s: %w", ev.Type, ev.RunID, store.ErrNotFound)
			}
			return fmt.Errorf("appending event %s: %w", ev.Type, err)
		}
	}
	if err := putAttempts(w, b.Attempts); err != nil {
		return err
	}
	if err := putFiles(w, b.Files); err != nil {
		return err
	}
	if err := putCacheEntries(w, b.CacheEntries); err != nil {
		return err
	}
	return putFires(w, b.Fires)
}

// putFires appends fires of runs the batch starts (store.Batch.Fires: fired ones only, never
// trimmed).
func putFires(w *wconn, fires []store.Fire) error {
	for i := range fires {
		f := &fires[i]
		if f.Kind != store.FireFired {
			return fmt.Errorf("a batch records fired fires only; got %q for %s", f.Kind, f.ScheduleID)
		}
		w.arg(f.ScheduleID)
		w.arg(string(f.Kind))
		w.arg(f.Reason)
		w.arg(f.Message)
		w.arg(f.RunID)
		w.arg(f.Origin)
		w.arg(nanos(f.ScheduledAt))
		w.arg(nanos(f.FiredAt))
		w.arg(f.DeliveryID)
		if err := w.exec(sqlFireInsert); err != nil {
			return fmt.Errorf("recording a fire of %s: %w", f.ScheduleID, err)
		}
	}
	return nil
}

// putAttempts upserts attempt rows, a statement per row, and trims each step's attempts to the
// window kept.
func putAttempts(w *wconn, atts []store.Attempt) error {
	for i := range atts {
		a := &atts[i]
		w.arg(a.RunID)
		w.arg(a.StepKey)
		w.arg(int64(a.Attempt))
		w.arg(a.Tool)
		w.arg(string(a.Status))
		w.arg(nanos(a.StartedAt))
		w.arg(nanos(a.FinishedAt))
		if a.Args == nil {
			w.arg(nil)
		} else {
			w.arg(string(a.Args))
		}
		w.arg(nullString(a.Worker))
		w.arg(nullString(a.Host))
		if a.PID == 0 {
			w.arg(nil)
		} else {
			w.arg(int64(a.PID))
		}
		w.arg(nullString(a.ErrorKind))
		w.arg(nullString(a.ErrorMessage))
		w.arg(nullString(a.ErrorTrace))
		w.arg(nullString(a.Exit))
		if a.Env == nil {
			w.arg(nil)
		} else {
			w.arg(string(a.Env))
		}
		if err := w.exec(sqlAttemptUpsert); err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("attempt %d of step %s of run %s: %w", a.Attempt, a.StepKey, a.RunID, store.ErrNotFound)
			}
			return fmt.Errorf("writing attempt %d of step %s of run %s: %w", a.Attempt, a.StepKey, a.RunID, err)
		}
		if d := store.AttemptDropped(a.Attempt); d > 0 {
			w.arg(a.RunID)
			w.arg(a.StepKey)
			w.arg(int64(d))
			if err := w.exec(sqlAttemptTrim); err != nil {
				return fmt.Errorf("trimming the attempts of step %s of run %s: %w", a.StepKey, a.RunID, err)
			}
		}
	}
	return nil
}

// applyAll writes every batch of a group inside the leader's transaction, table by table:
// the runs created, the run updates, then the step rows and the events of all the batches
// in multi-row statements (a statement per row costs more than the row under fan-out), the
// rows in group order, then batch order. The order between tables differs from batch after
// batch only for batches that depend on a concurrent batch of the same group (a step of a
// run created by another Write not yet returned): no caller does that. Its errors do not name
// the row: on one, the leader applies the group again, batch by batch (apply).
func applyAll(w *wconn, group []*store.Batch, seq *uint64, ord *int64) error {
	nSteps, nEvents := 0, 0
	for _, p := range group {
		for i := range p.CreateRuns {
			if err := createRun(w, &p.CreateRuns[i]); err != nil {
				return err
			}
		}
		nSteps += len(p.Steps)
		nEvents += len(p.Events)
	}
	for _, p := range group {
		for i := range p.RunUpdates {
			if err := updateRun(w, &p.RunUpdates[i]); err != nil {
				return err
			}
		}
	}
	// Steps, in chunks of multi-row statements.
	g, i := 0, 0 // the next step row: group[g].Steps[i]
	for nSteps > 0 {
		n, log2 := chunk(nSteps)
		for range n {
			for i == len(group[g].Steps) {
				g, i = g+1, 0
			}
			*ord++
			stepArgs(w, &group[g].Steps[i], *ord)
			i++
		}
		if err := w.exec(sqlStepUpserts[log2]); err != nil {
			return fmt.Errorf("writing %d steps: %w", n, err)
		}
		nSteps -= n
	}
	for _, p := range group {
		for i := range p.Idempotency {
			if err := putIdempotency(w, &p.Idempotency[i]); err != nil {
				return err
			}
		}
	}
	g, i = 0, 0
	for nEvents > 0 {
		n, log2 := chunk(nEvents)
		for range n {
			for i == len(group[g].Events) {
				g, i = g+1, 0
			}
			ev := &group[g].Events[i]
			*seq++
			ev.Seq = *seq
			eventArgs(w, ev)
			i++
		}
		if err := w.exec(sqlEventInserts[log2]); err != nil {
			return fmt.Errorf("appending %d events: %w", n, err)
		}
		nEvents -= n
	}
	for _, p := range group {
		if err := putAttempts(w, p.Attempts); err != nil {
			return err
		}
	}
	for _, p := range group {
		if err := putFiles(w, p.Files); err != nil {
			return err
		}
	}
	for _, p := range group {
		if err := putCacheEntries(w, p.CacheEntries); err != nil {
			return err
		}
	}
	for _, p := range group {
		if err := putFires(w, p.Fires); err != nil {
			return err
		}
	}
	return nil
}

// putFiles upserts file records, a statement per row.
func putFiles(w *wconn, files []store.FileRecord) error {
	for i := range files {
		f := &files[i]
		w.arg(f.RunID)
		w.arg(f.StepKey)
		w.arg(int64(f.Attempt))
		w.arg(string(f.Role))
		w.arg(f.Path)
		if k := pathkey.Key(f.Path); k != f.Path {
			w.arg(k)
		} else {
			w.arg(nil)
		}
		w.arg(string(f.State))
		w.arg(f.Size)
		w.arg(nanos(f.ModTime))
		w.arg(int64(f.Dev))
		w.arg(int64(f.Ino))
		w.arg(nullString(f.Hash))
		w.arg(nullString(f.Error))
		w.arg(nanos(f.RecordedAt))
		w.arg(nanos(f.VerifiedAt))
		if err := w.exec(sqlFileUpsert); err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("file record %s (%s) of attempt %d of step %s of run %s: %w", f.Path, f.Role, f.Attempt, f.StepKey, f.RunID, store.ErrNotFound)
			}
			return fmt.Errorf("writing file record %s (%s) of attempt %d of step %s of run %s: %w", f.Path, f.Role, f.Attempt, f.StepKey, f.RunID, err)
		}
	}
	return nil
}

// putCacheEntries upserts cache entries, a statement per row.
func putCacheEntries(w *wconn, es []store.CacheEntry) error {
	for i := range es {
		e := &es[i]
		w.arg(e.Key)
		w.arg(e.RunID)
		w.arg(e.StepKey)
		w.arg(int64(e.Attempt))
		w.arg(e.Tool)
		w.arg(e.StepID)
		w.arg(e.Workflow)
		w.bytesArg(e.Parts)
		w.bytesArg(e.Output)
		w.bytesArg(e.FileRefs)
		w.arg(nanos(e.CreatedAt))
		w.arg(nanos(e.ExpiresAt))
		if err := w.exec(sqlCacheUpsert); err != nil {
			if isForeignKey(err) {
				return fmt.Errorf("cache entry %s of step %s of run %s: %w", e.Key, e.StepKey, e.RunID, store.ErrNotFound)
			}
			return fmt.Errorf("writing cache entry %s of step %s of run %s: %w", e.Key, e.StepKey, e.RunID, err)
		}
	}
	return nil
}

func createRun(w *wconn, r *store.Run) error {
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
	w.arg(r.ID)
	w.arg(r.Name)
	w.arg([]byte(r.SpecJSON))
	w.arg(r.SpecHash)
	w.bytesArg(r.Inputs)
	w.arg(string(r.Status))
	w.bytesArg(errJSON)
	w.arg(r.Origin)
	w.bytesArg(envAllow)
	w.bytesArg(r.Trigger)
	w.arg(int64(r.Progress.Completed))
	w.arg(int64(r.Progress.Total))
	w.arg(nanos(r.CreatedAt))
	w.arg(nanos(r.UpdatedAt))
	w.arg(nanos(r.FinishedAt))
	w.arg(nullString(r.ParentRunID))
	w.arg(nullString(r.ParentStepKey))
	if r.Priority != nil {
		w.arg(int64(*r.Priority))
	} else {
		w.arg(nil)
	}
	if err := w.exec(sqlRunInsert); err != nil {
		if strings.Contains(err.Error(), "UNIQUE constraint failed: workflows.id") {
			return fmt.Errorf("run %s: %w", r.ID, store.ErrExists)
		}
		return fmt.Errorf("creating run %s: %w", r.ID, err)
	}
	return nil
}

func updateRun(w *wconn, u *store.RunUpdate) error {
	errJSON, err := runErrorJSON(u.Error)
	if err != nil {
		return err
	}
	w.arg(string(u.Status))
	w.bytesArg(errJSON)
	w.arg(int64(u.Progress.Completed))
	w.arg(int64(u.Progress.Total))
	w.arg(nanos(u.UpdatedAt))
	w.arg(nanos(u.FinishedAt))
	w.arg(u.ID)
	res, err := w.execResult(sqlRunUpdate)
	if err != nil {
		return fmt.Errorf("updating run %s: %w", u.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("updating run %s: %w", u.ID, store.ErrNotFound)
	}
	return nil
}

// stepArgs adds the arguments of one row of the step statements.
func stepArgs(w *wconn, st *store.Step, ord int64) {
	w.arg(st.RunID)
	w.arg(st.Key)
	w.arg(ord)
	w.arg(st.StepID)
	w.arg(st.Kind)
	w.arg(string(st.Status))
	w.arg(int64(st.Attempt))
	w.bytesArg(st.Output)
	w.bytesArg(st.FileRefs)
	w.arg(st.ErrorKind)
	w.arg(st.ErrorMessage)
	w.arg(st.ErrorTrace)
	w.arg(st.Cached)
	w.arg(nanos(st.StartedAt))
	w.arg(nanos(st.FinishedAt))
	w.arg(nanos(st.UpdatedAt))
	if st.Worker == "" {
		w.arg(nil)
	} else {
		w.arg(st.Worker)
	}
	if len(st.Logs) == 0 {
		w.arg(nil)
	} else {
		w.arg(string(st.Logs))
	}
	w.arg(int64(st.LogsDropped))
	if len(st.Progress) == 0 {
		w.arg(nil)
	} else {
		w.arg(string(st.Progress))
	}
}

func putIdempotency(w *wconn, e *store.IdempotencyEntry) error {
	w.arg(e.Scope)
	w.arg(e.RunID)
	w.arg(e.Key)
	w.bytesArg(e.Output)
	w.bytesArg(e.FileRefs)
	w.arg(nanos(e.CreatedAt))
	w.arg(nanos(e.ExpiresAt))
	if err := w.exec(sqlIdemUpsert); err != nil {
		return fmt.Errorf("writing idempotency entry %q: %w", e.Key, err)
	}
	return nil
}

// eventArgs adds the arguments of one row of the event statements.
func eventArgs(w *wconn, ev *run.Event) {
	w.arg(int64(ev.Seq))
	w.arg(ev.RunID)
	w.arg(nanos(ev.Time))
	w.arg(ev.Type)
	w.arg(ev.StepKey)
	w.arg(ev.Status)
	w.arg(int64(ev.Attempt))
	w.arg(int64(ev.Progress.Completed))
	w.arg(int64(ev.Progress.Total))
	w.bytesArg(ev.Detail)
}

func isForeignKey(err error) bool {
	return strings.Contains(err.Error(), "FOREIGN KEY constraint failed")
}

func runErrorJSON(e *store.RunError) ([]byte, error) {
	if e == nil {
		return nil, nil
	}
	return json.Marshal(e)
}

// nullString is s, or SQL NULL for "" (the nullable columns added by later migrations).
func nullString(s string) driver.Value {
	if s == "" {
		return nil
	}
	return s
}
