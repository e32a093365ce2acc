package memcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The durable queue of tool calls (store.CallQueue), as the PostgreSQL store keeps it
// (postgres/queue.go, the tables tool_calls and tool_call_reports), on the DB's clock. Wake-ups
// go to every ListenCalls of every handle, in the order of the changes, never lost.

// Call statuses.
const (
	callQueued    = "queued"
	callClaimed   = "claimed"
	callDone      = "done"
	callCancelled = "cancelled"
)

// Housekeeping (ExpireCalls): the calls finished more than callsKept ago go, with their
// reports; the reports written more than reportsKept ago go.
const (
	callsKept   = 24 * time.Hour
	reportsKept = time.Hour
)

// call is one row of the queue.
type call struct {
	c          store.QueuedCall // ID, RunID, StepKey, Attempt, Tool, Remote, Args, Nonce, Traceparent
	status     string
	claimedBy  string
	leaseUntil time.Time // zero unless claimed
	doneAt     time.Time // zero until done or cancelled
	result     *string   // the output of a success (JSON text), nil otherwise
	out        store.CallOutcome
	reports    []report // by seq
}

type report struct {
	seq      int
	progress []byte // JSON, nil: unchanged
	lines    []byte // a JSON array
	dropped  int
	at       time.Time
}

// text is s as PostgreSQL's TEXT keeps it: valid UTF-8 without NUL (as the PostgreSQL store's
// text).
func text(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// argsText is a call's Args as stored: "{}" when empty.
func argsText(a json.RawMessage) string {
	if len(a) == 0 {
		return "{}"
	}
	return text(string(a))
}

// EnqueueCall adds c, queued, and wakes the listeners ("q:TOOL", "r:REMOTE"); a nonce already
// on a call returns that call's id and adds nothing.
func (s *Store) EnqueueCall(ctx context.Context, c store.QueuedCall) (int64, error) {
	if _, err := s.attached(); err != nil {
		return 0, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if c.Nonce != "" {
		if id, ok := db.nonces[text(c.Nonce)]; ok {
			return id, nil
		}
	}
	db.lastCall++
	id := db.lastCall
	row := &call{c: store.QueuedCall{ID: id, RunID: text(c.RunID), StepKey: text(c.StepKey), Attempt: c.Attempt, Tool: c.Tool,
		Remote: text(c.Remote), Args: json.RawMessage(argsText(c.Args)), Nonce: text(c.Nonce), Traceparent: text(c.Traceparent)},
		status: callQueued}
	db.calls[id] = row
	if row.c.Nonce != "" {
		db.nonces[row.c.Nonce] = id
	}
	if row.c.Remote == "" {
		db.notify("q:" + row.c.Tool)
	} else {
		db.notify("r:" + row.c.Remote)
	}
	return id, nil
}

// AdoptCall finds the newest call still queued or claimed of c's run, step, tool, remote and
// args, else, when c.Interrupted > 0, the step's newest call if it is done and of attempt
// c.Interrupted or c.Attempt; the call's attempt becomes c.Attempt, and a queued call's
// traceparent c.Traceparent (when not "").
func (s *Store) AdoptCall(ctx context.Context, c store.QueuedCall) (int64, bool, error) {
	if _, err := s.attached(); err != nil {
		return 0, false, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	runID, stepKey, remote, args := text(c.RunID), text(c.StepKey), text(c.Remote), argsText(c.Args)
	var newest int64 // the step's newest call, whatever its tool and status
	for id, row := range db.calls {
		if row.c.RunID == runID && row.c.StepKey == stepKey && id > newest {
			newest = id
		}
	}
	var live, done *call
	for id, row := range db.calls {
		if row.c.RunID != runID || row.c.StepKey != stepKey || row.c.Tool != c.Tool || row.c.Remote != remote || string(row.c.Args) != args {
			continue
		}
		switch {
		case row.status == callQueued || row.status == callClaimed:
			if live == nil || id > live.c.ID {
				live = row
			}
		case row.status == callDone && c.Interrupted > 0 && (row.c.Attempt == c.Interrupted || row.c.Attempt == c.Attempt) && id == newest:
			done = row
		}
	}
	found := live
	if found == nil {
		found = done
	}
	if found == nil {
		return 0, false, nil
	}
	found.c.Attempt = c.Attempt
	if found.status == callQueued && c.Traceparent != "" {
		found.c.Traceparent = text(c.Traceparent)
	}
	return found.c.ID, true, nil
}

// ClaimCall claims the oldest queued call of one of tools (a host-tool call) or of one of
// remotes (a call of a remote), with a lease of the engine's.
func (s *Store) ClaimCall(ctx context.Context, tools, remotes []string) (*store.QueuedCall, error) {
	a, err := s.attached()
	if err != nil {
		return nil, err
	}
	if len(tools) == 0 && len(remotes) == 0 {
		return nil, nil
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	var oldest *call
	for _, row := range db.calls {
		if row.status != callQueued || oldest != nil && row.c.ID > oldest.c.ID {
			continue
		}
		if row.c.Remote == "" && slices.Contains(tools, row.c.Tool) || row.c.Remote != "" && slices.Contains(remotes, row.c.Remote) {
			oldest = row
		}
	}
	if oldest == nil {
		return nil, nil
	}
	oldest.status, oldest.claimedBy, oldest.leaseUntil = callClaimed, a.id, db.now().Add(a.lease)
	c := oldest.c
	c.Nonce = ""
	return &c, nil
}

// CompleteCall records the outcome of a call this engine holds claimed and wakes the listeners
// ("d:ID"); false (nothing recorded) when the call is not this engine's claim.
func (s *Store) CompleteCall(ctx context.Context, id int64, out store.CallOutcome) (bool, error) {
	a, err := s.attached()
	if err != nil {
		return false, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	row := db.calls[id]
	if row == nil || row.status != callClaimed || row.claimedBy != a.id {
		return false, nil
	}
	row.result = nil
	if out.ErrorKind == "" {
		r := "null"
		if len(out.Output) > 0 {
			r = text(string(out.Output))
		}
		row.result = &r
	}
	logs := text(string(out.Logs))
	if logs == "" {
		logs = "[]"
	}
	files := text(string(out.Files))
	if files == "" {
		files = "[]"
	}
	var env json.RawMessage // NULL for none, as the PostgreSQL store's env column
	if len(out.Env) > 0 {
		env = json.RawMessage(text(string(out.Env)))
	}
	row.out = store.CallOutcome{ErrorKind: text(out.ErrorKind), ErrorMessage: text(out.ErrorMessage), ErrorTrace: text(out.ErrorTrace),
		Worker: text(out.Worker), Logs: json.RawMessage(logs), LogsDropped: out.LogsDropped, Files: json.RawMessage(files), Env: env}
	row.status, row.leaseUntil, row.doneAt = callDone, time.Time{}, db.now()
	db.notify(fmt.Sprintf("d:%d", id))
	return true, nil
}

// CallStatus returns a call's status, the Seq of its newest report and, once done, its outcome.
func (s *Store) CallStatus(ctx context.Context, id int64) (string, store.CallOutcome, error) {
	if err := s.check(); err != nil {
		return "", store.CallOutcome{}, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	row := db.calls[id]
	if row == nil {
		return "", store.CallOutcome{}, store.ErrNotFound
	}
	out := row.out
	if row.result != nil {
		out.Output = json.RawMessage(*row.result)
	}
	if string(out.Logs) == "[]" {
		out.Logs = nil
	}
	if string(out.Files) == "[]" {
		out.Files = nil
	}
	if out.Worker == "" {
		out.Worker = row.claimedBy
	}
	if n := len(row.reports); n > 0 {
		out.LastReport = row.reports[n-1].seq
	}
	return row.status, out, nil
}

// CancelCall marks a queued or claimed call cancelled and wakes the listeners ("c:ID").
func (s *Store) CancelCall(ctx context.Context, id int64) error {
	if err := s.check(); err != nil {
		return err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	db.cancel(db.calls[id], db.now())
	return nil
}

// cancel cancels row when it is queued or claimed. db.mu is held.
func (db *DB) cancel(row *call, now time.Time) {
	if row == nil || row.status != callQueued && row.status != callClaimed {
		return
	}
	row.status, row.leaseUntil, row.doneAt = callCancelled, time.Time{}, now
	db.notify(fmt.Sprintf("c:%d", row.c.ID))
}

// cancelRunCalls cancels the calls of run id still queued or claimed (a Write ended the run),
// in id order. db.mu is held.
func (db *DB) cancelRunCalls(id string, now time.Time) {
	var rows []*call
	for _, row := range db.calls {
		if row.c.RunID == id {
			rows = append(rows, row)
		}
	}
	slices.SortFunc(rows, func(a, b *call) int { return int(a.c.ID - b.c.ID) })
	for _, row := range rows {
		db.cancel(row, now)
	}
}

// RenewCalls extends the leases of the calls of ids this engine still holds claimed, and
// returns those, in the order of ids.
func (s *Store) RenewCalls(ctx context.Context, ids []int64) ([]int64, error) {
	a, err := s.attached()
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	held := []int64{}
	for _, id := range ids {
		row := db.calls[id]
		if row == nil || row.status != callClaimed || row.claimedBy != a.id || slices.Contains(held, id) {
			continue
		}
		row.leaseUntil = now.Add(a.lease)
		held = append(held, id)
	}
	return held, nil
}

// ExpireCalls deletes the calls finished more than a day ago and the reports written more than
// an hour ago, then fails each claimed call whose lease expired with kind worker_lost, waking
// the listeners ("d:ID"), and returns their ids in order.
func (s *Store) ExpireCalls(ctx context.Context) ([]int64, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	var expired []int64
	for id, row := range db.calls {
		if !row.doneAt.IsZero() && row.doneAt.Before(now.Add(-callsKept)) {
			delete(db.calls, id)
			if row.c.Nonce != "" {
				delete(db.nonces, row.c.Nonce)
			}
			continue
		}
		row.reports = slices.DeleteFunc(row.reports, func(r report) bool { return r.at.Before(now.Add(-reportsKept)) })
		if row.status == callClaimed && row.leaseUntil.Before(now) {
			expired = append(expired, id)
		}
	}
	slices.Sort(expired)
	for _, id := range expired {
		row := db.calls[id]
		by := row.claimedBy
		if by == "" {
			by = "?"
		}
		row.status, row.leaseUntil, row.doneAt = callDone, time.Time{}, now
		row.result = nil
		row.out = store.CallOutcome{ErrorKind: "worker_lost", Logs: json.RawMessage("[]"),
			ErrorMessage: "engine " + by + " claimed this call and stopped renewing its claim (it died, hung or lost the database)"}
		db.notify(fmt.Sprintf("d:%d", id))
	}
	return expired, nil
}

// ReportCall records report r of a call this engine holds claimed and wakes the listeners
// ("p:ID"); false (nothing written) when the call is not this engine's claim. A Seq the call
// has a report of already is an error, as PostgreSQL's primary key makes it.
func (s *Store) ReportCall(ctx context.Context, id int64, r store.CallReport) (bool, error) {
	a, err := s.attached()
	if err != nil {
		return false, err
	}
	var progress []byte
	if r.Progress != nil {
		if progress, err = json.Marshal(r.Progress); err != nil {
			return false, fmt.Errorf("recording a report of queued tool call %d: the progress: %w", id, err)
		}
	}
	lines := []byte("[]")
	if len(r.Lines) > 0 {
		if lines, err = json.Marshal(r.Lines); err != nil {
			return false, fmt.Errorf("recording a report of queued tool call %d: the log lines: %w", id, err)
		}
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	row := db.calls[id]
	if row == nil || row.status != callClaimed || row.claimedBy != a.id {
		return false, nil
	}
	i, dup := slices.BinarySearchFunc(row.reports, r.Seq, func(x report, seq int) int { return x.seq - seq })
	if dup {
		return false, fmt.Errorf("recording report %d of queued tool call %d: it has report %d already", r.Seq, id, r.Seq)
	}
	row.reports = slices.Insert(row.reports, i, report{seq: r.Seq, progress: progress, lines: lines, dropped: max(r.Dropped, 0), at: db.now()})
	db.notify(fmt.Sprintf("p:%d", id))
	return true, nil
}

// CallReports returns the reports of call id numbered past after, in Seq order.
func (s *Store) CallReports(ctx context.Context, id int64, after int) ([]store.CallReport, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	var kept []report
	if row := db.calls[id]; row != nil {
		for _, r := range row.reports {
			if r.seq > after {
				kept = append(kept, r)
			}
		}
	}
	db.mu.Unlock()
	var out []store.CallReport
	for _, k := range kept {
		r := store.CallReport{Seq: k.seq, Dropped: k.dropped}
		if k.progress != nil {
			var p run.StepProgress
			if json.Unmarshal(k.progress, &p) == nil {
				r.Progress = &p
			}
		}
		if json.Unmarshal(k.lines, &r.Lines) != nil {
			r.Lines = nil
		}
		out = append(out, r)
	}
	return out, nil
}

// listener is one ListenCalls: the wake-ups not yet handed to its fn.
type listener struct {
	mu   sync.Mutex
	q    []string
	wake chan struct{} // 1 buffered: q has wake-ups
}

// notify queues payload for every listener. db.mu is held, so listeners see the changes'
// order; it never blocks.
func (db *DB) notify(payload string) {
	for l := range db.listeners {
		l.mu.Lock()
		l.q = append(l.q, payload)
		l.mu.Unlock()
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// Listening reports how many ListenCalls are registered now: a test waits for its engines'
// listeners before it queues a call whose wake-up it counts on.
func (db *DB) Listening() int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return len(db.listeners)
}

// ListenCalls calls fn with each wake-up of the DB's queue, on the calling goroutine, until ctx
// ends (it returns ctx's error), the handle is closed (store.ErrClosed) or fails (Fail's error:
// the wake-ups meanwhile are lost, as a dropped connection loses them; call it again). It listens from
// before its first wait, and calls ready (when not nil) once it listens: a change made after it
// was called may be missed only by a call that has not yet registered, which a test rules out
// by waiting for ready or a first wake-up (a probe).
func (s *Store) ListenCalls(ctx context.Context, ready func(), fn func(payload string)) error {
	if err := s.check(); err != nil {
		return err
	}
	cut, _ := s.failing()
	db := s.db
	l := &listener{wake: make(chan struct{}, 1)}
	db.mu.Lock()
	db.listeners[l] = struct{}{}
	db.mu.Unlock()
	defer func() {
		db.mu.Lock()
		delete(db.listeners, l)
		db.mu.Unlock()
	}()
	if ready != nil {
		ready()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return store.ErrClosed
		case <-cut:
			if err := s.check(); err != nil {
				return err
			}
			return errors.New("store: the handle failed and recovered while listening (Fail)")
		case <-l.wake:
		}
		l.mu.Lock()
		q := l.q
		l.q = nil
		l.mu.Unlock()
		for _, p := range q {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			fn(p)
		}
	}
}
