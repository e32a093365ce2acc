package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// checkWrite is check for the methods that write: a read-only store refuses them.
func (s *Store) checkWrite() error {
	if err := s.check(); err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly
	}
	return nil
}

const runColumns = `id, name, spec_json, spec_hash, inputs, status, error, origin, env_allow, trigger,
	` + progressColumns + `, created_at, updated_at, finished_at, parent_run_id, parent_step_key, priority`

// progressColumns are the progress of a run as committed (store.Store: Run.Progress): the
// stored counts of a finished run; for a run still going, its step rows in a finished status
// (a count over the run's rows, on the read side, so the write path of a step pays nothing)
// and the total of its newest event (through the run_id index, whose entries are in seq order).
const progressColumns = `CASE WHEN status IN ('completed', 'failed', 'cancelled', 'interrupted') THEN completed
		ELSE (SELECT count(*) FROM workflow_steps s WHERE s.run_id = workflows.id AND ` + stepFinished + `) END,
	CASE WHEN status IN ('completed', 'failed', 'cancelled', 'interrupted') THEN total
		ELSE coalesce((SELECT e.total FROM workflow_events e WHERE e.run_id = workflows.id ORDER BY e.seq DESC LIMIT 1), total) END`

// stepFinished selects the step rows (alias s) in a finished status.
const stepFinished = `s.status IN ('completed', 'failed', 'cancelled', 'skipped', 'interrupted')`

// GetRun returns the run, or store.ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	if err := s.check(); err != nil {
		return store.Run{}, err
	}
	r, err := sqlrow.Run(s.r.QueryRowContext(ctx, `SELECT `+runColumns+` FROM workflows WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return r, err
}

// ListRuns returns the runs matching f, newest first.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var where []string
	var args []any
	if len(f.Statuses) > 0 {
		marks := make([]string, len(f.Statuses))
		for i, st := range f.Statuses {
			marks[i] = "?"
			args = append(args, string(st))
		}
		where = append(where, "status IN ("+strings.Join(marks, ",")+")")
	}
	if f.Name != "" {
		where = append(where, "name = ?")
		args = append(args, f.Name)
	}
	if f.ParentRunID != "" {
		where = append(where, "parent_run_id = ?")
		args = append(args, f.ParentRunID)
	}
	if !f.Since.IsZero() {
		where = append(where, "created_at >= ?")
		args = append(args, nanos(f.Since))
	}
	if !f.Until.IsZero() {
		where = append(where, "created_at < ?")
		args = append(args, nanos(f.Until))
	}
	w, a := searchWhere(&f, s.denseProbe(ctx))
	where, args = append(where, w...), append(args, a...)
	if f.After != nil {
		// A row value comparison: SQLite walks workflows_created (created_at DESC, id DESC)
		// from the cursor instead of reading every run before it.
		where = append(where, "(created_at, id) < (?, ?)")
		args = append(args, nanos(f.After.CreatedAt), f.After.ID)
	}
	q := `SELECT ` + runColumns + ` FROM workflows`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at DESC, id DESC"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		r, err := sqlrow.Run(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListSteps returns the step instances of a run in the order each was first written.
func (s *Store) ListSteps(ctx context.Context, runID string) ([]store.Step, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+sqlrow.StepColumns+` FROM workflow_steps WHERE run_id = ? ORDER BY ord`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Step
	for rows.Next() {
		st, err := sqlrow.Step(rows, runID)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if out == nil {
		if _, err := s.GetRun(ctx, runID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

var _ store.AttemptLog = (*Store)(nil)

// sqlResumes lists a run's workflow_resumed events through the partial index
// workflow_events_resumed (migration 0010): the type is a literal, so the planner can use it.
const sqlResumes = `SELECT ` + sqlrow.EventColumns + ` FROM workflow_events
		WHERE run_id = ? AND type = 'workflow_resumed' ORDER BY seq`

// Resumes implements store.AttemptLog, through the partial index workflow_events_resumed.
func (s *Store) Resumes(ctx context.Context, runID string) ([]run.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, sqlResumes, runID)
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
	q := `SELECT ` + sqlrow.AttemptColumns + ` FROM step_attempts WHERE run_id = ?`
	args := []any{runID}
	if stepKey != "" {
		q += ` AND step_key = ?`
		args = append(args, stepKey)
	}
	rows, err := s.r.QueryContext(ctx, q+` ORDER BY step_key, attempt`, args...)
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

// ListEvents returns events with Seq > f.AfterSeq in order.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]run.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	q := `SELECT ` + sqlrow.EventColumns + ` FROM workflow_events
		WHERE seq > ?`
	args := []any{int64(f.AfterSeq)}
	if f.RunID != "" {
		q += " AND run_id = ?"
		args = append(args, f.RunID)
	}
	if len(f.Types) > 0 {
		// No index has type: with a run id, the run's rows (index workflow_events_run) are read
		// and the others dropped by SQLite, not decoded nor returned.
		q += " AND type IN (?" + strings.Repeat(", ?", len(f.Types)-1) + ")"
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	// Only what is committed is listed, in order: the committer assigns seq inside its
	// transaction, so no later commit can add a smaller seq.
	q += " ORDER BY seq"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
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

// LastSeq returns the largest event sequence number committed.
func (s *Store) LastSeq(context.Context) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	return s.seq.Load(), nil
}

// GetIdempotency returns the entry for (scope, runID, key) if it is live at now.
func (s *Store) GetIdempotency(ctx context.Context, scope, runID, key string, now time.Time) (store.IdempotencyEntry, bool, error) {
	if err := s.check(); err != nil {
		return store.IdempotencyEntry{}, false, err
	}
	e := store.IdempotencyEntry{Scope: scope, RunID: runID, Key: key}
	var output, fileRefs []byte
	var created, expires int64
	err := s.r.QueryRowContext(ctx, `SELECT output, file_refs, created_at, expires_at FROM workflow_idempotency
		WHERE scope = ? AND run_id = ? AND key = ?`, scope, runID, key).Scan(&output, &fileRefs, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return e, false, nil
	}
	if err != nil {
		return e, false, err
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
	res, err := s.w.ExecContext(ctx, `DELETE FROM workflow_idempotency WHERE expires_at != 0 AND expires_at <= ?`, nanos(now))
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// MarkInterrupted turns every non-terminal run and its non-terminal steps into interrupted,
// and appends each run's interrupted event, in one transaction (see store.Store).
func (s *Store) MarkInterrupted(ctx context.Context, now time.Time, in store.Interruption) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.readOnly {
		return nil, ErrReadOnly
	}
	runErr, err := runErrorJSON(in.Error)
	if err != nil {
		return nil, err
	}
	// The transaction holds the one writer connection, so the group committer, which reads
	// s.seq once it has that connection, numbers its events after these.
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, s.fault(err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id FROM workflows WHERE status IN ('pending', 'running', 'waiting')`)
	if err != nil {
		return nil, s.fault(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, s.fault(err)
		}
		ids = append(ids, id)
	}
	rows.Close()
	sort.Strings(ids)
	seq := s.seq.Load()
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `UPDATE workflow_steps SET status = 'interrupted', updated_at = ?
			WHERE run_id = ? AND status IN ('pending', 'running', 'retrying', 'waiting_approval', 'waiting_resources')`, nanos(now), id); err != nil {
			return nil, s.fault(err)
		}
		// The run's progress as its dead process committed it (see progressColumns), now
		// that its steps in flight are interrupted.
		if _, err := tx.ExecContext(ctx, `UPDATE workflows SET status = 'interrupted', error = ?, updated_at = ?, finished_at = ?,
			completed = (SELECT count(*) FROM workflow_steps s WHERE s.run_id = workflows.id AND `+stepFinished+`),
			total = coalesce((SELECT e.total FROM workflow_events e WHERE e.run_id = workflows.id ORDER BY e.seq DESC LIMIT 1), total)
			WHERE id = ?`, runErr, nanos(now), nanos(now), id); err != nil {
			return nil, s.fault(err)
		}
		// The total is at least the steps finished (as memstore counts it); the event carries
		// the run's progress.
		var completed, total int64
		if err := tx.QueryRowContext(ctx, `UPDATE workflows SET total = max(total, completed) WHERE id = ?
			RETURNING completed, total`, id).Scan(&completed, &total); err != nil {
			return nil, s.fault(err)
		}
		seq++
		var detail any
		if in.Detail != nil {
			detail = []byte(in.Detail)
		}
		if _, err := tx.ExecContext(ctx, sqlEventInsert, int64(seq), id, nanos(now), run.EventInterrupted, "",
			string(run.StatusInterrupted), 0, completed, total, detail); err != nil {
			return nil, s.fault(fmt.Errorf("appending the interrupted event of run %s: %w", id, err))
		}
	}
	// A paused run stays paused (Unpause resumes it); its steps that were in flight when its
	// process died are interrupted.
	if _, err := tx.ExecContext(ctx, `UPDATE workflow_steps SET status = 'interrupted', updated_at = ?
		WHERE status IN ('pending', 'running', 'retrying', 'waiting_approval', 'waiting_resources')
		AND run_id IN (SELECT id FROM workflows WHERE status = 'paused')`, nanos(now)); err != nil {
		return nil, s.fault(err)
	}
	if len(ids) > 0 {
		// Before the commit, while the connection is held: a commit that fails leaves a gap in
		// the numbers, never a number used twice.
		s.seq.Store(seq)
	}
	if err := tx.Commit(); err != nil {
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
	var blob any = data
	if len(data) == 0 {
		blob = "" // an empty []byte would be stored as NULL
	}
	if _, err := s.w.ExecContext(ctx, `INSERT OR IGNORE INTO artefacts (sha256, size, data) VALUES (?, ?, CAST(? AS BLOB))`, h, len(data), blob); err != nil {
		return "", err
	}
	return h, nil
}

// GetArtefact returns the bytes stored under sha256, or store.ErrNotFound.
func (s *Store) GetArtefact(ctx context.Context, sum string) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var data []byte
	err := s.r.QueryRowContext(ctx, `SELECT data FROM artefacts WHERE sha256 = ?`, strings.ToLower(sum)).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("artefact %s: %w", sum, store.ErrNotFound)
	}
	if data == nil && err == nil {
		data = []byte{}
	}
	return data, err
}

// denseEntries is where a search term stops being answered from its index and is checked on
// the newest runs instead (searchWhere): a term whose index holds this many entries or more.
// Collecting K entries costs K; walking the newest runs until a page of 50 matches costs about
// 50·runs/K checks, so the two meet near √(50·runs): 2,000 at 100,000 runs.
const denseEntries = 2000

// searchTerm is one search field as SQL: from is the table (the subquery's FROM) and cond its
// condition on the rows that match (one run may have several).
type searchTerm struct {
	parts []searchPart // matched when any part is (UNION ALL, OR EXISTS)
	walk  bool         // no index holds it: always checked run by run
}

type searchPart struct {
	from, cond string
	args       []any
}

// searchWhere returns the terms of f's search fields (store.RunFilter), each answered from an
// index of migration 0011 (TestSearchQueriesUseIndexes): a term is either collected from its
// index first (id IN (SELECT run_id …)), so the search costs what it matches and not the number
// of runs, or, when dense reports that the index holds denseEntries or more of it (a common tool,
// a whole pool, completed steps), checked run by run from the newest (EXISTS … run_id = id),
// which stops at the page's limit. dense may be nil: every term is collected.
func searchWhere(f *store.RunFilter, dense func(part searchPart) bool) (where []string, args []any) {
	var terms []searchTerm
	one := func(from, cond string, a ...any) searchTerm {
		return searchTerm{parts: []searchPart{{from, cond, a}}}
	}
	keys := make([]string, 0, len(f.Inputs))
	for k := range f.Inputs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		terms = append(terms, one("run_inputs", `key = ? AND value = ?`, k, f.Inputs[k]))
	}
	if f.Tool != "" {
		terms = append(terms, one("step_attempts", `tool = ?`, f.Tool))
	}
	if f.Worker != "" {
		// The worker itself, or every process of that pool ("POOL/…"): one range of the
		// index, [W, W + "0"), holds both ('0' follows '/').
		terms = append(terms, one("step_attempts", `worker >= ? AND worker < ? AND (worker = ? OR substr(worker, 1, ?) = ?)`,
			f.Worker, f.Worker+"0", f.Worker, len([]rune(f.Worker))+1, f.Worker+"/"))
	}
	if f.ErrorKind != "" {
		terms = append(terms, searchTerm{parts: []searchPart{
			{"step_attempts", `error_kind = ?`, []any{f.ErrorKind}},
			{"workflow_steps", `error_kind = ? AND error_message <> ''`, []any{f.ErrorKind}},
			{"run_errors", `kind = ?`, []any{f.ErrorKind}}, // the run's own (migration 0012)
		}})
	}
	if f.ErrorText != "" {
		// LIKE ignores ASCII case; the pattern's own %, _ and \ are escaped.
		pat := "%" + store.EscapeLike(f.ErrorText) + "%"
		terms = append(terms, searchTerm{parts: []searchPart{
			{"step_attempts", `error_kind IS NOT NULL AND error_message LIKE ? ESCAPE '\'`, []any{pat}},
			{"workflow_steps", `error_message <> '' AND error_message LIKE ? ESCAPE '\'`, []any{pat}},
			{"run_errors", `message LIKE ? ESCAPE '\'`, []any{pat}},
		}})
	}
	if len(f.StepStatuses) > 0 {
		marks := strings.Repeat(",?", len(f.StepStatuses))[1:]
		var a []any
		for _, st := range f.StepStatuses {
			a = append(a, string(st))
		}
		if slices.Contains(f.StepStatuses, run.StepCompleted) { // most step rows: not indexed
			t := one("workflow_steps", `status IN (`+marks+`)`, a...)
			t.walk = true
			terms = append(terms, t)
		} else { // with the partial index's own condition, for the planner
			terms = append(terms, one("workflow_steps", `status IN (`+marks+`) AND status <> 'completed'`, a...))
		}
	}
	for _, t := range terms {
		walk := t.walk
		for _, p := range t.parts {
			walk = walk || (dense != nil && dense(p))
		}
		var sub []string
		for _, p := range t.parts {
			if walk {
				sub = append(sub, `EXISTS (SELECT 1 FROM `+p.from+` x WHERE x.run_id = workflows.id AND `+p.cond+`)`)
			} else {
				sub = append(sub, `SELECT run_id FROM `+p.from+` WHERE `+p.cond)
			}
			args = append(args, p.args...)
		}
		if walk {
			where = append(where, `(`+strings.Join(sub, " OR ")+`)`)
		} else {
			where = append(where, `id IN (`+strings.Join(sub, " UNION ALL ")+`)`)
		}
	}
	return where, args
}

// denseProbe reports whether the index of part holds denseEntries or more entries (searchWhere).
func (s *Store) denseProbe(ctx context.Context) func(part searchPart) bool {
	return func(p searchPart) bool {
		var n int
		err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+p.from+` WHERE `+p.cond+
			fmt.Sprintf(` LIMIT %d)`, denseEntries), p.args...).Scan(&n)
		return err == nil && n >= denseEntries
	}
}
