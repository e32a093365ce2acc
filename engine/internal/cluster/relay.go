package cluster

import (
	"context"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The reports of queued calls (docs/operations/cluster.md, "The tool-call queue"): what a call claimed
// from the queue reports while it runs (current_call().progress and .log, docs/reference/python/README.md) is
// relayed through the database to the engine that orchestrates its run, which feeds it to the
// step as the reports of a local call.

// relayInterval is the shortest time between two report rows of one queued call: at most 5
// rows a second per call, however often the tool reports.
const relayInterval = 200 * time.Millisecond

// relay is the tools.Reporter of a call this engine claimed from the queue. Report never
// writes: it keeps the latest progress and buffers up to run.MaxLogLinesPerFlush lines (the
// lines beyond are counted as dropped), and a write is made at most once per relayInterval, in
// a goroutine of its own (never on the tool's thread). finish writes what is pending before the
// call's outcome is written, so every line reaches the orchestrator before the outcome does.
// Once a write finds the call no longer claimed by this engine (cancelled, lost), nothing more
// is written.
type relay struct {
	q     store.CallQueue
	id    int64
	clock clock.Clock

	wmu sync.Mutex // serialises writes: rows are written in Seq order
	seq int        // the last Seq handed out

	mu        sync.Mutex // guards what follows
	active    bool
	progress  *run.StepProgress // the latest, not written yet
	lines     []run.LogLine     // not written yet
	dropped   int               // lines not relayed since the last row
	last      time.Time         // when the last row was taken for writing
	scheduled bool
	timer     clock.Timer
}

func newRelay(q store.CallQueue, id int64, c clock.Clock) *relay {
	return &relay{q: q, id: id, clock: c, active: true}
}

// Report implements tools.Reporter.
func (r *relay) Report(rp tools.Report) {
	if rp.Progress == nil && len(rp.Logs) == 0 && rp.Dropped <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.active {
		return
	}
	if rp.Progress != nil {
		p := *rp.Progress
		p.Message = run.Clip(p.Message, run.MaxProgressMessageBytes)
		r.progress = &p
	}
	r.dropped += max(rp.Dropped, 0)
	for _, l := range rp.Logs {
		if len(r.lines) >= run.MaxLogLinesPerFlush {
			r.dropped++
			continue
		}
		r.lines = append(r.lines, boundLine(l))
	}
	if r.scheduled {
		return
	}
	r.scheduled = true
	if d := r.last.Add(relayInterval).Sub(r.clock.Now()); d > 0 {
		r.timer = r.clock.AfterFunc(d, r.fire)
		return
	}
	go r.fire()
}

// fire is a scheduled write.
func (r *relay) fire() {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.Lock()
	if !r.active { // finish writes what is pending
		r.mu.Unlock()
		return
	}
	r.scheduled, r.timer = false, nil
	rep, ok := r.takeLocked()
	r.mu.Unlock()
	if ok {
		r.write(rep, false)
	}
}

// finish stops relaying and writes what is pending; it returns once every row of the call is
// written (or failed).
func (r *relay) finish() {
	r.mu.Lock()
	r.active = false
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	r.mu.Unlock()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.mu.Lock()
	rep, ok := r.takeLocked()
	r.mu.Unlock()
	if ok {
		r.write(rep, true)
	}
}

// takeLocked takes what is pending as the next report; false when nothing is. Called with wmu
// and mu held.
func (r *relay) takeLocked() (store.CallReport, bool) {
	if r.progress == nil && len(r.lines) == 0 && r.dropped == 0 {
		return store.CallReport{}, false
	}
	r.seq++
	rep := store.CallReport{Seq: r.seq, Progress: r.progress, Lines: r.lines, Dropped: r.dropped}
	r.progress, r.lines, r.dropped = nil, nil, 0
	r.last = r.clock.Now()
	return rep, true
}

// write writes rep. A write the database refused (it is away) is not lost silently: its lines
// are counted as dropped in the next row, and its progress is written with it unless a newer
// one came. A call no longer claimed by this engine gets nothing more.
func (r *relay) write(rep store.CallReport, final bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	ok, err := r.q.ReportCall(ctx, r.id, rep)
	cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err == nil && !ok:
		r.active = false
		r.progress, r.lines, r.dropped = nil, nil, 0
	case err != nil:
		r.dropped += len(rep.Lines) + rep.Dropped
		if r.progress == nil {
			r.progress = rep.Progress
		}
		if !final && r.active && !r.scheduled {
			r.scheduled = true
			r.timer = r.clock.AfterFunc(relayInterval, r.fire)
		}
	}
}

// boundLine keeps a relayed line within the limits of a local one (run.MaxLogLineBytes of
// text, run.MaxLogFieldsBytes of fields).
func boundLine(l run.LogLine) run.LogLine {
	if len(l.Text) <= run.MaxLogLineBytes && len(l.Fields) <= run.MaxLogFieldsBytes {
		return l
	}
	b := run.LogLineOf(l.Text, l.Fields)
	if l.Stream != "" {
		b.Stream = l.Stream
	}
	b.Attempt, b.Level, b.Logger = l.Attempt, l.Level, l.Logger
	return b
}

// feedReports passes the reports of queued call id numbered past *after to rep, as one report
// (the latest progress, the lines in order), and moves *after on. Lines past
// run.MaxLogLinesPerFlush in one row (not written by a dcc-flow engine) are counted as dropped.
func (cq *Queue) feedReports(ctx context.Context, id int64, rep tools.Reporter, after *int) error {
	if rep == nil {
		return nil
	}
	rs, err := cq.q.CallReports(ctx, id, *after)
	if err != nil {
		return err
	}
	var merged tools.Report
	for _, r := range rs {
		*after = r.Seq
		if r.Progress != nil && r.Progress.Check() == "" {
			merged.Progress = r.Progress
		}
		merged.Dropped += max(r.Dropped, 0)
		for i, l := range r.Lines {
			if i >= run.MaxLogLinesPerFlush {
				merged.Dropped += len(r.Lines) - i
				break
			}
			merged.Logs = append(merged.Logs, boundLine(l))
		}
	}
	rep.Report(merged) // a report with nothing in it is ignored
	return nil
}
