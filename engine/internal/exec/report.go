package exec

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// reporter takes what one attempt of a host or remote tool step reports about itself while it
// runs (current_call().progress and .log, docs/reference/python/README.md) and writes it, throttled:
//
//   - at most one write of events per run.ReportInterval: a step_progress event with the latest
//     progress (the ones in between are replaced, never queued) and a step_log event with the
//     lines logged since the last write, at most run.MaxLogLinesPerFlush of them, the newest (the
//     others are counted in the event's dropped: the live view skips them);
//   - every line on the step record, within its caps (run.CapLogs: the newest
//     run.MaxStepLogLines lines and run.MaxStepLogBytes), as a pool worker's output is kept;
//     lines past those, and those the tool's side did not send, count in its logs_dropped;
//   - the step record while the call runs: its progress at most once per run.ReportRowInterval,
//     its lines at most once per run.ReportLogsRowInterval (a record is written whole, and up to
//     256 KiB of lines rewritten every second would cost more than the events that carry them);
//     all of it with the step's next write when the call ends (endReport), and on the record a
//     cancel writes (seal).
//
// Report never writes: the first report starts a flush in a goroutine, later ones within the
// interval wait for a timer on the engine clock, so a tool calling progress() in a tight loop
// pays for a mutex and a few fields, not for a commit. Whatever is pending when the call ends is
// written by end before the step's own next write, so the last value is never lost and the
// events of an attempt precede its step_exit or step_retry. A reporter is made per attempt and
// never reused: a report that arrives after end is dropped.
type reporter struct {
	in      *inst
	attempt int

	mu     sync.Mutex // serialises flushes; guards st and active
	active bool
	st     *reportState // made by the first report: a call that reports nothing costs no more

	// The record's progress and lines as of the last flush, for seal (which must not wait for
	// mu: a flush holds mu while it waits for the seal lock). snapLogs shares st.logs' array:
	// later flushes only append beyond its length.
	snapMu      sync.Mutex
	snapLogs    []run.LogLine
	snapDropped int
	snapProg    *run.StepProgress
	snapSet     bool
}

// reportState is what a reporter holds once its call reported something.
type reportState struct {
	base      store.Step        // the running row at the attempt's start
	progress  *run.StepProgress // the latest reported
	progDirty bool              // progress not written as an event yet
	lines     []run.LogLine     // logged, not written as an event yet (the newest MaxLogLinesPerFlush)
	lost      int               // lines logged past MaxLogLinesPerFlush since the last write
	rec       []run.LogLine     // logged, not on the record yet (the newest MaxStepLogLines)
	recLost   int               // lines the record will not keep: past MaxStepLogLines, or never sent
	logs      []run.LogLine     // the record's lines: the row's, then the ones written
	dropped   int               // the record's logs_dropped
	rowDirty  bool              // the record's progress lags behind the events
	logsDirty bool              // the record's lines lag behind the events
	rowLogs   []byte            // the lines as last written on the record (JSON)
	rowDrop   int               // the logs_dropped last written on the record
	lastEvent time.Time
	lastRow   time.Time
	lastLogs  time.Time   // when the lines were last written on the record
	scheduled bool        // a flush is due (timer, or a goroutine about to run)
	timer     clock.Timer // the pending timer, or nil
	due       time.Time   // when the pending timer fires
}

// startReport returns the reporter of the attempt about to be made, or nil when the step's
// row is not written yet (an inline built-in tool, which reports nothing).
func (in *inst) startReport(attempt int) *reporter {
	if in.enterPending {
		return nil
	}
	in.row.Progress = nil // a new attempt starts with no progress
	p := &reporter{in: in, attempt: attempt, active: true}
	in.rep.Store(p)
	return p
}

// endReport ends the attempt's reporting: it writes the events still pending and moves the
// reported progress and lines onto the instance's row, for its next write.
func (in *inst) endReport(p *reporter) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.active = false
	st := p.st
	if st != nil {
		if st.timer != nil {
			st.timer.Stop()
			st.timer = nil
		}
		p.flushLocked(in.r.now(), true)
	}
	p.mu.Unlock()
	in.rep.Store(nil)
	if st == nil {
		return
	}
	in.row.Logs, in.row.LogsDropped = encodeLogs(st.logs), st.dropped
	in.row.Progress = nil
	if st.progress != nil {
		in.row.Progress, _ = json.Marshal(st.progress)
	}
}

// Report implements tools.Reporter.
func (p *reporter) Report(rp tools.Report) {
	if rp.Progress == nil && len(rp.Logs) == 0 && rp.Dropped <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active {
		return
	}
	st := p.st
	if st == nil {
		// The step goroutine does not touch its row while the call runs: reading it is safe.
		st = &reportState{base: p.in.row, dropped: p.in.row.LogsDropped, rowLogs: p.in.row.Logs, rowDrop: p.in.row.LogsDropped}
		if len(st.base.Logs) > 0 {
			_ = json.Unmarshal(st.base.Logs, &st.logs) // written by the engine: valid
		}
		p.st = st
	}
	if rp.Progress != nil {
		pr := *rp.Progress
		pr.Message = run.Clip(pr.Message, run.MaxProgressMessageBytes)
		pr.Attempt = p.attempt
		st.progress, st.progDirty = &pr, true
	}
	st.lost += max(rp.Dropped, 0)
	st.recLost += max(rp.Dropped, 0)
	for _, l := range rp.Logs {
		l.Attempt = p.attempt
		st.lines = append(st.lines, l)
		st.rec = append(st.rec, l)
	}
	// Keep the newest: the lines a tool wrote just before it failed, or returned, matter most
	// (and the step record keeps the newest too).
	if over := len(st.lines) - run.MaxLogLinesPerFlush; over > 0 {
		st.lines = append(st.lines[:0], st.lines[over:]...)
		st.lost += over
	}
	if over := len(st.rec) - run.MaxStepLogLines; over > 0 {
		st.rec = append(st.rec[:0], st.rec[over:]...)
		st.recLost += over
	}
	now := p.in.r.now()
	if st.timer != nil && st.due.After(st.lastEvent.Add(run.ReportInterval)) && st.timer.Stop() {
		// The pending timer is a later write of the record alone (up to ReportRowInterval
		// away): the events of this report must not wait for it.
		st.scheduled, st.timer = false, nil
	}
	p.scheduleLocked(now)
}

// scheduleLocked arranges the next flush, if something waits for one and none is arranged.
func (p *reporter) scheduleLocked(now time.Time) {
	st := p.st
	if st.scheduled || !p.active {
		return
	}
	var due time.Time
	switch {
	case st.progDirty || len(st.lines) > 0 || st.lost > 0:
		due = st.lastEvent.Add(run.ReportInterval)
	case st.rowDirty:
		due = st.lastRow.Add(run.ReportRowInterval)
	case st.logsDirty:
		due = later(st.lastRow.Add(run.ReportRowInterval), st.lastLogs.Add(run.ReportLogsRowInterval))
	default:
		return
	}
	st.scheduled = true
	if d := due.Sub(now); d > 0 {
		st.timer, st.due = p.in.r.x.cfg.Clock.AfterFunc(d, p.fire), due
		return
	}
	go p.fire() // never write on the reporting thread (a Python tool's)
}

// fire is a scheduled flush.
func (p *reporter) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.active {
		return
	}
	p.st.scheduled, p.st.timer = false, nil
	now := p.in.r.now()
	p.flushLocked(now, false)
	p.scheduleLocked(now)
}

// flushLocked writes the pending events, and the step record when it is due; final (the call
// ended) writes the events only: the step's own next write carries the record.
func (p *reporter) flushLocked(now time.Time, final bool) {
	r, st := p.in.r, p.st
	var evs []run.Event
	key := st.base.Key
	status := string(run.StepRunning)
	if st.progDirty {
		detail, _ := json.Marshal(st.progress)
		evs = append(evs, r.event(now, run.EventStepProgress, key, status, p.attempt, detail))
		st.progDirty, st.rowDirty = false, true
	}
	if len(st.lines) > 0 || st.lost > 0 {
		detail, _ := json.Marshal(logDetail{Lines: st.lines, Dropped: st.lost})
		evs = append(evs, r.event(now, run.EventStepLog, key, status, p.attempt, detail))
		var cut int
		st.logs, cut = run.CapLogs(append(st.logs, st.rec...))
		st.dropped += cut + st.recLost
		st.lines, st.lost, st.rec, st.recLost, st.logsDirty = nil, 0, nil, 0, true
	}
	p.snapMu.Lock()
	p.snapLogs, p.snapDropped, p.snapProg, p.snapSet = st.logs, st.dropped, st.progress, true
	p.snapMu.Unlock()
	b := store.Batch{Events: evs}
	rowDue := now.Sub(st.lastRow) >= run.ReportRowInterval
	logsDue := st.logsDirty && rowDue && now.Sub(st.lastLogs) >= run.ReportLogsRowInterval
	if !final && ((st.rowDirty && rowDue) || logsDue) {
		if logsDue {
			st.rowLogs, st.rowDrop, st.logsDirty, st.lastLogs = encodeLogs(st.logs), st.dropped, false, now
		}
		row := st.base
		row.Logs, row.LogsDropped, row.UpdatedAt = st.rowLogs, st.rowDrop, now
		row.Progress = nil
		if st.progress != nil {
			row.Progress, _ = json.Marshal(st.progress)
		}
		b.Steps = []store.Step{row}
		st.rowDirty, st.lastRow = false, now
	}
	if len(b.Events) == 0 && len(b.Steps) == 0 {
		return
	}
	if len(evs) > 0 {
		st.lastEvent = now
		r.touch(now)
	}
	if err := r.writeFor(nil, &b, writePlain); err != nil {
		p.active = false // the run ended (sealed) or its store failed: nothing more is written
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// snapshot returns the record's progress and logs as last computed; ok is false when the
// attempt reported nothing yet.
func (p *reporter) snapshot() (logs []byte, dropped int, progress []byte, ok bool) {
	p.snapMu.Lock()
	lines, dropped, prog, ok := p.snapLogs, p.snapDropped, p.snapProg, p.snapSet
	p.snapMu.Unlock()
	if !ok {
		return nil, 0, nil, false
	}
	if prog != nil {
		progress, _ = json.Marshal(prog)
	}
	return encodeLogs(lines), dropped, progress, true
}

// logDetail is the detail of a step_log event.
type logDetail struct {
	Lines []run.LogLine `json:"lines"`
	// Dropped counts the lines logged since the last event that this one does not carry (past
	// MaxLogLinesPerFlush): the live view skips them; the step record keeps them (within its caps).
	Dropped int `json:"dropped,omitempty"`
}

func encodeLogs(lines []run.LogLine) []byte {
	if len(lines) == 0 {
		return nil
	}
	b, _ := json.Marshal(lines)
	return b
}
