// Package sqlrow decodes the rows of the SQL stores (SQLite and PostgreSQL) into store values:
// both stores select the same columns in the same order and hand each row here, so a column
// is read one way whichever database holds it. Times are Unix nanoseconds, 0 for the zero time;
// NULL text columns read as "".
package sqlrow

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Scanner is a row: *sql.Row, *sql.Rows, pgx.Row or pgx.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Run reads a run row of the columns id, name, spec_json, spec_hash, inputs, status, error,
// origin, env_allow, trigger, completed, total, created_at, updated_at, finished_at,
// parent_run_id, parent_step_key, priority (each store computes completed and total with its own SQL). A stored error or env_allow that is not valid JSON is an
// error naming the run; Progress.Total is at least Progress.Completed.
func Run(sc Scanner) (store.Run, error) {
	var r store.Run
	var status string
	var specJSON, inputs, errJSON, envAllow, trigger []byte
	var created, updated, finished int64
	var parent, parentKey *string
	var priority *int64
	if err := sc.Scan(&r.ID, &r.Name, &specJSON, &r.SpecHash, &inputs, &status, &errJSON, &r.Origin, &envAllow,
		&trigger, &r.Progress.Completed, &r.Progress.Total, &created, &updated, &finished, &parent, &parentKey, &priority); err != nil {
		return r, err
	}
	if priority != nil {
		p := int(*priority)
		r.Priority = &p
	}
	r.ParentRunID, r.ParentStepKey = deref(parent), deref(parentKey)
	r.Status = run.Status(status)
	r.SpecJSON, r.Inputs, r.Trigger = Raw(specJSON), Raw(inputs), Raw(trigger)
	if errJSON != nil {
		r.Error = &store.RunError{}
		if err := json.Unmarshal(errJSON, r.Error); err != nil {
			return r, fmt.Errorf("run %s: decoding its error: %w", r.ID, err)
		}
	}
	if envAllow != nil {
		r.EnvAllow = []string{}
		if err := json.Unmarshal(envAllow, &r.EnvAllow); err != nil {
			return r, fmt.Errorf("run %s: decoding env_allow: %w", r.ID, err)
		}
	}
	r.CreatedAt, r.UpdatedAt, r.FinishedAt = FromNanos(created), FromNanos(updated), FromNanos(finished)
	r.Progress.Total = max(r.Progress.Total, r.Progress.Completed)
	return r, nil
}

// StepColumns lists, in order, the columns of workflow_steps that Step reads.
const StepColumns = "key, step_id, kind, status, attempt, output, file_refs, error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at, worker, logs, logs_dropped, progress"

// Step reads a step row (StepColumns) of run runID. Empty logs and progress read as nil.
func Step(sc Scanner, runID string) (store.Step, error) {
	st := store.Step{RunID: runID}
	var status string
	var output, fileRefs []byte
	var started, finished, updated int64
	var worker, logs, progress *string
	if err := sc.Scan(&st.Key, &st.StepID, &st.Kind, &status, &st.Attempt, &output, &fileRefs, &st.ErrorKind,
		&st.ErrorMessage, &st.ErrorTrace, &st.Cached, &started, &finished, &updated, &worker, &logs, &st.LogsDropped, &progress); err != nil {
		return st, err
	}
	st.Status = run.StepStatus(status)
	st.Worker = deref(worker)
	if l := deref(logs); l != "" {
		st.Logs = []byte(l)
	}
	if p := deref(progress); p != "" {
		st.Progress = []byte(p)
	}
	st.Output, st.FileRefs = Raw(output), Raw(fileRefs)
	st.StartedAt, st.FinishedAt, st.UpdatedAt = FromNanos(started), FromNanos(finished), FromNanos(updated)
	return st, nil
}

// AttemptColumns lists, in order, the columns of step_attempts that Attempt reads.
const AttemptColumns = "run_id, step_key, attempt, tool, status, started_at, finished_at, args, worker, host, pid, error_kind, error_message, error_trace, exit, env"

// Attempt reads an attempt row (AttemptColumns). NULL texts read as "", a NULL pid as 0, a NULL
// args or env as nil.
func Attempt(sc Scanner) (store.Attempt, error) {
	var a store.Attempt
	var status string
	var started, finished int64
	var args, worker, host, kind, msg, trace, exit, env *string
	var pid *int64
	if err := sc.Scan(&a.RunID, &a.StepKey, &a.Attempt, &a.Tool, &status, &started, &finished, &args, &worker, &host,
		&pid, &kind, &msg, &trace, &exit, &env); err != nil {
		return a, err
	}
	a.Status = run.StepStatus(status)
	a.StartedAt, a.FinishedAt = FromNanos(started), FromNanos(finished)
	if args != nil {
		a.Args = json.RawMessage(*args)
	}
	if env != nil {
		a.Env = json.RawMessage(*env)
	}
	a.Worker, a.Host = deref(worker), deref(host)
	if pid != nil {
		a.PID = int(*pid)
	}
	a.ErrorKind, a.ErrorMessage, a.ErrorTrace, a.Exit = deref(kind), deref(msg), deref(trace), deref(exit)
	return a, nil
}

// FileColumns lists, in order, the columns of file_records that File reads.
const FileColumns = "id, run_id, step_key, attempt, role, path, state, size, mod_time, dev, ino, hash, error, recorded_at, verified_at"

// File reads a file record row (FileColumns). dev and ino are stored as the int64 of the same
// bits (a uint64 past the largest int64 is negative in the database); a NULL hash or error
// reads as "".
func File(sc Scanner) (store.FileRecord, error) {
	var f store.FileRecord
	var role, state string
	var modTime, dev, ino, recorded, verified int64
	var hash, errText *string
	if err := sc.Scan(&f.ID, &f.RunID, &f.StepKey, &f.Attempt, &role, &f.Path, &state, &f.Size, &modTime, &dev, &ino,
		&hash, &errText, &recorded, &verified); err != nil {
		return f, err
	}
	f.Role, f.State = store.FileRole(role), store.FileState(state)
	f.ModTime, f.RecordedAt, f.VerifiedAt = FromNanos(modTime), FromNanos(recorded), FromNanos(verified)
	f.Dev, f.Ino = uint64(dev), uint64(ino)
	f.Hash, f.Error = deref(hash), deref(errText)
	return f, nil
}

// CacheColumns lists, in order, the columns of cache_entries that Cache reads.
const CacheColumns = "key, tool, step_id, workflow, run_id, step_key, attempt, parts, output, file_refs, created_at, expires_at"

// Cache reads a cache entry row (CacheColumns). NULL JSON columns read as nil.
func Cache(sc Scanner) (store.CacheEntry, error) {
	var e store.CacheEntry
	var parts, output, fileRefs []byte
	var created, expires int64
	if err := sc.Scan(&e.Key, &e.Tool, &e.StepID, &e.Workflow, &e.RunID, &e.StepKey, &e.Attempt, &parts, &output,
		&fileRefs, &created, &expires); err != nil {
		return e, err
	}
	e.Parts, e.Output, e.FileRefs = Raw(parts), Raw(output), Raw(fileRefs)
	e.CreatedAt, e.ExpiresAt = FromNanos(created), FromNanos(expires)
	return e, nil
}

// EventColumns lists, in order, the columns of workflow_events that Event reads.
const EventColumns = "seq, run_id, time, type, step_key, status, attempt, completed, total, detail"

// Event reads an event row (EventColumns).
func Event(sc Scanner) (run.Event, error) {
	var ev run.Event
	var seq, t int64
	var detail []byte
	if err := sc.Scan(&seq, &ev.RunID, &t, &ev.Type, &ev.StepKey, &ev.Status, &ev.Attempt,
		&ev.Progress.Completed, &ev.Progress.Total, &detail); err != nil {
		return ev, err
	}
	ev.Seq, ev.Time, ev.Detail = uint64(seq), FromNanos(t), Raw(detail)
	return ev, nil
}

// Raw returns b as JSON, nil for a NULL column.
func Raw(b []byte) json.RawMessage {
	if b == nil {
		return nil
	}
	return json.RawMessage(b)
}

// FromNanos turns a stored time (Unix nanoseconds, 0 for none) into a UTC time.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
