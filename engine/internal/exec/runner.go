package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// KindInternal is the error kind of a step that failed because of a bug in the engine (or a
// panic in Go tool code).
const KindInternal = tools.KindInternal

// outcome is how a step instance or a step list ended.
type outcome struct {
	status run.StepStatus // completed, failed, cancelled or interrupted
	err    *run.StepError // the first failure (a leaf step's), when failed
}

// inst is a step instance being run: its row, and buffers reused by its writes.
type inst struct {
	r     *runner
	f     *frame
	sp    *stepPlan
	row   store.Step
	batch store.Batch
	steps [1]store.Step
	evs   [3]run.Event

	// enter is the step_enter event of a tool or approve step, held back (enterPending) until
	// the instance's next write, which carries it: a step that completes at once (an inline
	// built-in tool) is written once, as an insert of its terminal row with both events, in one
	// commit. A step that may block writes its step_enter before the call (see deferEnter).
	// enterPending changes under runner.sealMu (read-locked) and seal reads it write-locked.
	enter        run.Event
	enterPending bool

	// The run's registry of instances in flight (see seal), under runner.liveMu.
	prev, next *inst
	linked     bool
	// liveAttempt is the last attempt that started (a host call starts when a thread pulls
	// it): what a seal records. Atomic: the tools.Host sets it under its own lock.
	liveAttempt atomic.Int32
	// hosting is set while a host thread runs the instance's call, and until its outcome is
	// written (runner.hosting counts these instances).
	hosting atomic.Bool
	// rep is the reporter of the attempt in progress (report.go), or nil.
	rep atomic.Pointer[reporter]
	// final is set, under runner.sealMu, once the instance's terminal row is written.
	final bool

	// att is the record of the attempt in progress or last made (attempt.go), written with the
	// instance's next write while attPending; atts is its batch buffer.
	att        store.Attempt
	attPending bool
	atts       [1]store.Attempt
	// attFiles are the files of att (assets.go), written with it once.
	attFiles []store.FileRecord
	// pulledAt is when a host thread took the attempt's call (Unix ns; 0: not a host call, or not
	// taken yet): the attempt record's start. Atomic: set on the host's side.
	pulledAt atomic.Int64
	// argsBuf holds the JSON of att.Args (stores copy it), reused by the next step instance
	// when small.
	argsBuf []byte
	// span is the span of the attempt in progress (trace.go); nil when tracing is off.
	span *tracing.Attempt
}

// instPool recycles instances: nothing keeps an inst once its step has finished (stores copy
// what they are given).
var instPool = sync.Pool{New: func() any { return new(inst) }}

// stepEnd is what a step driver reports; runStep writes it.
type stepEnd struct {
	status     run.StepStatus
	output     any
	hasOutput  bool
	outputJSON json.RawMessage // the output as JSON when the driver has it already
	lazy       bool            // output is not set: decode outputJSON when a template needs it
	fileRefs   []any
	refsJSON   json.RawMessage
	cached     bool
	errKind    string
	errMsg     string
	errTrace   string
	cause      *run.StepError // for failures of control steps: the failing leaf
	idem       *store.IdempotencyEntry
	resolved   json.RawMessage // approve: the detail of an approve_resolved event written with the exit
	// cacheHit is the step_exit detail of a step served from the content cache (cacheFrom);
	// cacheEntry the entry a completed attempt leaves (assets.go).
	cacheHit   json.RawMessage
	cacheEntry *store.CacheEntry
}

func (r *runner) now() time.Time { return r.x.cfg.Clock.Now() }

// save writes the instance's row with one event (or none when typ is "").
func (in *inst) save(typ string, detail json.RawMessage) error {
	return in.saveAt(in.r.now(), typ, detail)
}

func (in *inst) saveAt(now time.Time, typ string, detail json.RawMessage) error {
	in.row.UpdatedAt = now
	in.steps[0] = in.row
	in.batch = store.Batch{Steps: in.steps[:]}
	n := 0
	if in.enterPending {
		in.evs[n] = in.enter
		n++
	}
	if typ != "" {
		in.evs[n] = in.r.event(now, typ, in.row.Key, string(in.row.Status), in.row.Attempt, detail)
		n++
		in.r.touch(now)
	}
	if n > 0 {
		in.batch.Events = in.evs[:n]
	}
	in.pendingAttempt(&in.batch, now)
	how := writePlain
	if !in.linked {
		how = writeLink
	}
	err := in.r.writeFor(in, &in.batch, how)
	in.row.Insert = false // only the first write inserts
	return err
}

// deferEnter registers the instance as in flight and holds its step_enter back for its next
// write (see inst.enter), instead of writing it now. errSealed when the run has ended.
func (in *inst) deferEnter(now time.Time) error {
	r := in.r
	in.enter = r.event(now, run.EventStepEnter, in.row.Key, string(in.row.Status), in.row.Attempt, nil)
	r.touch(now)
	r.sealMu.RLock()
	defer r.sealMu.RUnlock()
	if r.sealed {
		return errSealed
	}
	in.enterPending = true
	r.link(in)
	return nil
}

// flushEnter writes the instance's running row with its held-back step_enter, if any: before a
// call that may block, so that a step in flight is visible as running.
func (in *inst) flushEnter() error {
	if !in.enterPending {
		return nil
	}
	return in.save("", nil)
}

// setAttempt records the attempt in progress, also for the registry.
func (in *inst) setAttempt(n int) {
	in.row.Attempt = n
	in.liveAttempt.Store(int32(n))
}

// main runs the root list, then the on_failure steps if the run failed, and writes the
// terminal state.
func (r *runner) main() {
	var o outcome
	func() {
		defer func() {
			if p := recover(); p != nil {
				o = outcome{status: run.StepFailed, err: &run.StepError{RunID: r.id, Kind: KindInternal,
					Message: fmt.Sprintf("internal error (a bug in dcc-flow): %v", p), Trace: string(debug.Stack())}}
			}
		}()
		if e := r.onFailureOnly; e != nil {
			r.reuseAll()
			o = outcome{status: run.StepFailed, err: &run.StepError{RunID: r.id, StepKey: e.StepKey, Kind: e.Kind, Message: e.Message, Trace: e.Trace}}
			return
		}
		o = r.runList(r.ctx, r.root, r.plan.root, false)
	}()
	if r.plan.handler != nil && o.status == run.StepFailed && o.err != nil && r.ctx.Err() == nil {
		r.runOnFailure(o.err)
	}
	r.flushConfirms() // assets.go
	r.finish(o)
}

// runOnFailure runs the on_failure steps of a failed run once, with its error as {{run.error}}.
// How they end is recorded (their rows, events and the workflow_terminal detail) but does not
// change the run's outcome: a failing handler never replaces the run's error.
func (r *runner) runOnFailure(cause *run.StepError) {
	rerr := &store.RunError{Kind: cause.Kind, Message: cause.Message, StepKey: cause.StepKey, Trace: cause.Trace}
	if rerr.Kind == "" {
		rerr.Kind = run.KindError
	}
	// The run's other steps have all returned: nothing reads runDoc while it is replaced.
	doc := make(map[string]any, len(r.runDoc)+1)
	for k, v := range r.runDoc {
		doc[k] = v
	}
	doc["error"] = map[string]any{"kind": rerr.Kind, "message": rerr.Message, "step_key": rerr.StepKey}
	r.runDoc = doc
	r.failing.Store(rerr)
	r.total.Add(int64(len(r.plan.handlerFrame.owned)))
	r.tree.addInstances(len(r.plan.handlerFrame.owned), false)
	now := r.now()
	ev := r.event(now, run.EventOnFailureStarted, "", string(run.StatusRunning), 0,
		jsonDetail(map[string]any{"error": rerr}))
	r.touch(now)
	if err := r.write(&store.Batch{Events: []run.Event{ev}}); err != nil {
		return
	}
	var o outcome
	func() {
		defer func() {
			if p := recover(); p != nil {
				o = outcome{status: run.StepFailed}
			}
		}()
		o = r.runList(r.ctx, r.root.onFailure(r.plan.handlerFrame), r.plan.handler, false)
	}()
	r.mu.Lock()
	r.onFailureEnd = o.status
	r.mu.Unlock()
}

// reuseAll publishes the completed instances of an earlier execution of the run's steps (not
// the on_failure ones), for on_failure steps resumed on their own (Params.OnFailureOnly).
func (r *runner) reuseAll() {
	for _, sp := range r.plan.rootFrame.owned {
		if p, ok := r.prior[sp.id]; ok {
			r.root.publish(sp, priorResult(p))
		}
	}
}

// finish writes the run's terminal status and its workflow_terminal event, unless a
// cancellation has sealed the run already.
func (r *runner) finish(o outcome) {
	r.mu.Lock()
	r.sealMu.Lock()
	if sc := r.stopCause.Load(); !r.sealed && sc != nil && sc.abandon {
		r.sealed, r.finished, r.status = true, true, sc.run // abandoned: nothing more is written
	}
	if !r.sealed {
		status := run.StatusCompleted
		var rerr *store.RunError
		var sc *stopCause
		if o.status != run.StepCompleted {
			switch {
			case errors.As(context.Cause(r.ctx), &sc) && sc.run != "":
				status, rerr = sc.run, &store.RunError{Kind: sc.kind, Message: sc.msg}
			case o.err != nil:
				status = run.StatusFailed
				rerr = &store.RunError{Kind: o.err.Kind, Message: o.err.Message, StepKey: o.err.StepKey, Trace: o.err.Trace}
			default:
				status = run.StatusFailed
				rerr = &store.RunError{Kind: KindInternal, Message: "the run stopped without a recorded cause"}
			}
		}
		b := &store.Batch{}
		if sc := r.stopCause.Load(); sc != nil {
			r.liveMu.Lock()
			r.addUnwrittenLocked(b, sc, r.now(), nil) // a store failure's steps: not left running
			r.liveMu.Unlock()
		}
		r.writeTerminal(b, status, rerr)
	}
	final := r.status
	r.sealMu.Unlock()
	r.mu.Unlock()
	r.endTrace(final, o) // trace.go
	r.cancelCtx(context.Canceled)
	r.closeDone()
	if r.onDone != nil {
		r.onDone(r.handle)
	}
}

// writeTerminal adds the run's terminal update and workflow_terminal event to b, writes it and
// seals the run. The caller holds r.mu and r.sealMu.
func (r *runner) writeTerminal(b *store.Batch, status run.Status, rerr *store.RunError) {
	now := r.now()
	detail := map[string]any{"status": status}
	if rerr != nil {
		detail["error"] = rerr
	}
	if r.failing.Load() != nil {
		// How the on_failure steps ended: completed, failed, cancelled or interrupted (still
		// running when the run was stopped).
		end := r.onFailureEnd
		if end == "" {
			end = run.StepInterrupted
			if status == run.StatusFailed {
				end = run.StepCancelled
			}
		}
		detail["on_failure"] = end
	}
	b.RunUpdates = append(b.RunUpdates, store.RunUpdate{ID: r.id, Status: status, Error: rerr, Progress: r.progress(), UpdatedAt: now, FinishedAt: now})
	b.Events = append(b.Events, r.event(now, run.EventWorkflowTerminal, "", string(status), 0, jsonDetail(detail)))
	if err := r.writeRetrying(b); errors.Is(err, store.ErrConnectionLost) {
		// The terminal record may or may not be stored: write nothing more and leave the run
		// to the takeover path (a stored end makes it finished; else its lease expires and an
		// engine resumes it, running no completed step again), as an abandoned run.
		r.stopCause.CompareAndSwap(nil, errConnectionLost)
		status = errConnectionLost.run
	} else if err != nil {
		// The run has ended all the same: its waiters, its pull loops and Status see the
		// terminal state kept in memory (Unsaved), with an error of kind storage.
		u := b.RunUpdates[len(b.RunUpdates)-1]
		u.Error = unsavedError(status, rerr, err)
		r.unsaved = &u
		r.unsavedSteps = append([]store.Step(nil), b.Steps...) // not left running when it is written
	}
	r.x.notify() // also when unsaved: waiters on events look at the run's state again
	r.sealed, r.finished, r.status = true, true, status
	if r.stallTimer != nil {
		r.stallTimer.Stop()
	}
}

// terminalRetries are the pauses before the second and later attempts of a run's terminal
// write (real time: the write blocks Cancel and Status of this run meanwhile, never longer
// than their sum, 0.55 s).
var terminalRetries = []time.Duration{50 * time.Millisecond, 500 * time.Millisecond}

// writeRetrying writes b (a terminal batch), retrying after each pause of terminalRetries
// while the store fails (a full disk may get space back; a closed store will not).
func (r *runner) writeRetrying(b *store.Batch) error {
	err := r.x.cfg.Store.Write(context.Background(), b)
	for _, d := range terminalRetries {
		if err == nil || errors.Is(err, store.ErrClosed) || errors.Is(err, store.ErrConnectionLost) {
			break
		}
		time.Sleep(d)
		err = r.x.cfg.Store.Write(context.Background(), b)
	}
	return err
}

// unsavedError is the run error of a run whose terminal record could not be written: kind
// storage, saying how the run ended (and its own error) and what the database shows.
func unsavedError(status run.Status, rerr *store.RunError, err error) *store.RunError {
	e := &store.RunError{Kind: run.KindStorage}
	msg := fmt.Sprintf("the run ended %s but writing that to the database failed: %v", status, err)
	if rerr != nil {
		e.StepKey, e.Trace = rerr.StepKey, rerr.Trace
		if rerr.Kind == run.KindStorage {
			msg = rerr.Message + "; writing the run's end failed too"
		} else {
			msg += fmt.Sprintf(" (the run's own error: %s: %s)", rerr.Kind, rerr.Message)
		}
	}
	e.Message = msg + ". Until the engine writes it (it retries when the database takes writes again), " +
		"the database shows the run as running, and the next engine to open it marks it interrupted: " +
		"free disk space or fix the storage, then resume the run if needed"
	return e
}

// seal ends a cancelled or stopped run at once: every step instance still in flight is
// written as sc says (cancelled, interrupted), with the run's terminal record, in one batch,
// and Done is closed. The goroutines of those steps unwind afterwards and write nothing more,
// so the terminal state does not wait for hundreds of goroutines to be scheduled.
func (r *runner) seal() {
	sc := r.stopCause.Load()
	if sc == nil {
		return
	}
	r.mu.Lock()
	// An engine stop leaves a paused run paused (pause.go); read before sealMu (lock order).
	keepPaused := sc == ErrEngineStop.(*stopCause) && r.isPaused()
	r.sealMu.Lock()
	if !r.sealed && sc.abandon {
		// Another engine holds the run now: write nothing (its steps' writes see sealed).
		r.sealed, r.finished, r.status = true, true, sc.run
		if r.stallTimer != nil {
			r.stallTimer.Stop()
		}
	}
	if !r.sealed {
		now := r.now()
		detail := errorJSON(sc.kind, sc.msg)
		r.liveMu.Lock()
		n := 0
		for in := r.liveHead; in != nil; in = in.next {
			n++
		}
		b := &store.Batch{Steps: make([]store.Step, 0, n+len(r.unwritten)), Events: make([]run.Event, 0, 2*n+len(r.unwritten)+1)}
		var inFlight map[string]bool // the keys below, when an unwritten row may repeat one
		if len(r.unwritten) > 0 {
			inFlight = map[string]bool{}
		}
		for in := r.liveTail; in != nil; in = in.prev {
			if in.final {
				continue
			}
			if inFlight != nil {
				inFlight[in.row.Key] = true
			}
			row := store.Step{RunID: r.id, Key: in.row.Key, StepID: in.row.StepID, Kind: in.row.Kind, Status: sc.step,
				Attempt: int(in.liveAttempt.Load()), ErrorKind: sc.kind, ErrorMessage: sc.msg, StartedAt: in.row.StartedAt,
				FinishedAt: now, UpdatedAt: now}
			if rep := in.rep.Load(); rep != nil { // what the running tool reported stays on the record
				if logs, dropped, prog, ok := rep.snapshot(); ok {
					row.Logs, row.LogsDropped, row.Progress = logs, dropped, prog
				}
			}
			b.Steps = append(b.Steps, row)
			if in.enterPending {
				b.Events = append(b.Events, in.enter)
			}
			r.completed.Add(1)
			b.Events = append(b.Events, r.event(now, run.EventStepExit, row.Key, string(sc.step), row.Attempt, detail))
		}
		r.addUnwrittenLocked(b, sc, now, inFlight)
		r.liveMu.Unlock()
		if keepPaused {
			r.sealPaused(b)
		} else {
			status, rerr := sc.run, &store.RunError{Kind: sc.kind, Message: sc.msg}
			if failing := r.failing.Load(); failing != nil && sc.run == run.StatusCancelled {
				// Cancelled while its on_failure steps ran: the run had failed, and stays failed
				// with its own error; those steps end cancelled.
				status, rerr = run.StatusFailed, failing
			}
			r.writeTerminal(b, status, rerr)
		}
	}
	r.sealMu.Unlock()
	r.mu.Unlock()
	r.closeDone()
}

func (r *runner) closeDone() { r.doneOnce.Do(func() { close(r.done) }) }

// Ways writeFor treats the instance it writes for.
const (
	writePlain        = iota
	writeLink         // the instance's first write: register it as in flight
	writeFinal        // the instance's terminal row: count it as completed
	writeTerminalRows // terminal rows of instances never started (skipped): count each event
)

// errSealed: the run's terminal record is written; nothing more is.
var errSealed = errors.New("the run has ended")

// write writes b, unless the run is sealed (errSealed). A failed store write stops the run
// (it then fails with the store error).
func (r *runner) write(b *store.Batch) error { return r.writeFor(nil, b, writePlain) }

func (r *runner) writeFor(in *inst, b *store.Batch, how int) error {
	r.sealMu.RLock()
	defer r.sealMu.RUnlock()
	if r.sealed {
		return errSealed
	}
	if how == writeFinal || how == writeTerminalRows {
		// Counted here, under the seal lock: a sealed run has counted its steps in flight
		// itself, and a step refused after the seal must not count twice.
		for i := range b.Events {
			if t := b.Events[i].Type; t == run.EventStepExit || t == run.EventStepSkipped {
				n := int(r.completed.Add(1))
				b.Events[i].Progress.Completed = n
				if i > 0 && b.Events[i-1].Type == run.EventApproveResolved {
					b.Events[i-1].Progress.Completed = n
				}
			}
		}
	}
	if err := r.x.cfg.Store.Write(context.Background(), b); err != nil {
		switch {
		case errors.Is(err, store.ErrLeaseLost):
			r.cancel(errLeaseRefused) // another engine runs it now: stop, writing nothing more
		case errors.Is(err, store.ErrConnectionLost):
			r.cancel(errConnectionLost) // applied or not: the takeover path finds out
		default:
			r.cancel(storeFailure(err))
		}
		return err
	}
	if in != nil {
		in.enterPending = false // carried by b
		if len(b.Attempts) > 0 {
			in.attPending = false
			r.attemptEnded(b)
		}
	}
	switch how {
	case writeLink:
		r.link(in)
	case writeFinal:
		in.final = true
	}

	if len(b.Events) > 0 {
		r.x.notify()
	}
	return nil
}

// link adds an instance to the registry of instances in flight. The caller holds r.sealMu.
func (r *runner) link(in *inst) {
	r.liveMu.Lock()
	in.linked, in.prev, in.next = true, r.liveTail, nil
	if r.liveTail != nil {
		r.liveTail.next = in
	} else {
		r.liveHead = in
	}
	r.liveTail = in
	in.liveAttempt.Store(int32(in.row.Attempt))
	r.liveMu.Unlock()
}

// addUnwrittenLocked adds to b the terminal rows of the instances that left the registry with
// no terminal row written (keepUnwritten), ended as sc says, with their step_exit events (but
// those whose keys are in skip: the seal wrote them from the registry), and forgets them. Their
// rows carry none of what a refused row held (its output may be what did not fit). The caller
// holds r.liveMu.
func (r *runner) addUnwrittenLocked(b *store.Batch, sc *stopCause, now time.Time, skip map[string]bool) {
	if len(r.unwritten) == 0 {
		return
	}
	detail := errorJSON(sc.kind, sc.msg)
	for _, u := range r.unwritten {
		if skip[u.Key] {
			continue
		}
		row := u
		row.Status, row.ErrorKind, row.ErrorMessage, row.FinishedAt, row.UpdatedAt = sc.step, sc.kind, sc.msg, now, now
		b.Steps = append(b.Steps, row)
		b.Events = append(b.Events, r.event(now, run.EventStepExit, row.Key, string(sc.step), row.Attempt, detail))
	}
	r.unwritten = nil
}

// keepUnwritten keeps the row of an instance that leaves the registry with no terminal row
// written while a store failure stops the run (its own terminal write failed, or a write before
// it), for the seal to write as the run ends: the seal has not run yet (it would have written
// the instance from the registry), and no step may stay running in an ended run.
func (r *runner) keepUnwritten(in *inst) {
	sc := r.stopCause.Load()
	if sc == nil || sc.kind != run.KindStorage || sc.abandon {
		return
	}
	r.sealMu.RLock()
	defer r.sealMu.RUnlock()
	if r.sealed {
		return
	}
	r.liveMu.Lock()
	r.unwritten = append(r.unwritten, store.Step{RunID: r.id, Key: in.row.Key, StepID: in.row.StepID,
		Kind: in.row.Kind, Attempt: int(in.liveAttempt.Load()), StartedAt: in.row.StartedAt})
	r.liveMu.Unlock()
}

// hostStarted records that a host thread took the instance's call (tools.Call.Started).
func (in *inst) hostStarted() {
	if in.hosting.CompareAndSwap(false, true) {
		in.r.hosting.Add(1)
	}
}

// unhost records that the outcome of the instance's host call is settled: written, or a failed
// attempt that the step retries.
func (in *inst) unhost() {
	if in.hosting.CompareAndSwap(true, false) {
		in.r.hosting.Add(-1)
	}
}

// unlink removes a finished instance from the registry.
func (r *runner) unlink(in *inst) {
	if !in.linked {
		return
	}
	if !in.final {
		r.keepUnwritten(in)
	}
	r.liveMu.Lock()
	if in.prev != nil {
		in.prev.next = in.next
	} else {
		r.liveHead = in.next
	}
	if in.next != nil {
		in.next.prev = in.prev
	} else {
		r.liveTail = in.prev
	}
	in.prev, in.next, in.linked = nil, nil, false
	r.liveMu.Unlock()
}

// runList runs one step list: in order when every step waits for the one before it, else as a
// DAG where ready steps start together. Dependents of a failed step are skipped. With abort
// (parallel on_any_fail: abort), a failure cancels the siblings in flight and skips the rest.
func (r *runner) runList(ctx context.Context, f *frame, lp *listPlan, abort bool) outcome {
	if lp.linear {
		for i, sp := range lp.steps {
			o := r.runStep(ctx, f, sp)
			switch o.status {
			case run.StepCompleted:
				continue
			case run.StepFailed:
				var skip []*stepPlan
				for _, s := range lp.steps[i+1:] {
					skip = append(skip, s.subtree...)
				}
				r.skip(f, skip, dependencyEnded(f.key(sp), o))
			}
			return o
		}
		return outcome{status: run.StepCompleted}
	}
	return r.runDAG(ctx, f, lp, abort)
}

// dependencyEnded is the reason a step is skipped after the step key it waited for did not
// complete: "step a was cancelled" when its last attempt ended with kind cancelled (a tool
// interrupted by Ctrl-C, a remote call cancelled), else "step a failed (timeout)".
func dependencyEnded(key string, o outcome) string {
	switch {
	case o.err == nil:
		return fmt.Sprintf("step %s failed", key)
	case o.err.Kind == run.KindCancelled:
		return fmt.Sprintf("step %s was cancelled", key)
	}
	return fmt.Sprintf("step %s failed (%s)", key, o.err.Kind)
}

type indexedOutcome struct {
	i int
	o outcome
}

func (r *runner) runDAG(ctx context.Context, f *frame, lp *listPlan, abort bool) outcome {
	n := len(lp.steps)
	const (
		waiting = iota
		started
		skipped
	)
	state := make([]uint8, n)
	indeg := make([]int, n)
	for i := range indeg {
		indeg[i] = len(lp.deps[i])
	}
	lctx, cancel := ctx, context.CancelCauseFunc(nil)
	if abort {
		lctx, cancel = context.WithCancelCause(ctx)
		defer cancel(nil)
	}
	results := make(chan indexedOutcome, n)
	running := 0
	// The first step in flight runs without a slot; each other one holds a slot of the tree's
	// max_tree_parallel (tree.go), taken without waiting, as a foreach's workers do: a ready step
	// that finds none waits in ready (still state waiting) until a step of this list ends. So
	// the goroutines of a tree of parallel sub-workflows are bounded as those of foreaches, and
	// no list waits for another's slots.
	slotted := make([]bool, n)
	var ready []int
	start := func(i int) {
		if running > 0 {
			if !r.tree.takeSlot() {
				ready = append(ready, i)
				return
			}
			slotted[i] = true
		}
		state[i] = started
		running++
		go func() { results <- indexedOutcome{i, r.runStepSafe(lctx, f, lp.steps[i])} }()
	}
	var first *run.StepError
	aborted := false
	startReady := func() {
		for len(ready) > 0 && !aborted && lctx.Err() == nil {
			i := ready[0]
			if running > 0 && !r.tree.takeSlot() {
				return
			}
			ready = ready[1:]
			if running > 0 {
				slotted[i] = true
			}
			state[i] = started
			running++
			go func() { results <- indexedOutcome{i, r.runStepSafe(lctx, f, lp.steps[i])} }()
		}
	}
	for i := range n {
		if indeg[i] == 0 {
			start(i)
		}
	}
	for running > 0 {
		d := <-results
		running--
		if slotted[d.i] {
			slotted[d.i] = false
			r.tree.giveSlot()
		}
		switch d.o.status {
		case run.StepCompleted:
			for _, j := range lp.dependents[d.i] {
				indeg[j]--
				if indeg[j] == 0 && state[j] == waiting && !aborted && lctx.Err() == nil {
					ready = append(ready, j)
				}
			}
		case run.StepFailed:
			if first == nil {
				first = d.o.err
			}
			var skip []*stepPlan
			var mark func(i int)
			mark = func(i int) {
				for _, j := range lp.dependents[i] {
					if state[j] == waiting {
						state[j] = skipped
						skip = append(skip, lp.steps[j].subtree...)
						mark(j)
					}
				}
			}
			mark(d.i)
			r.skip(f, skip, dependencyEnded(f.key(lp.steps[d.i]), d.o))
			if abort && !aborted {
				aborted = true
				cancel(siblingAbort(f.key(lp.steps[d.i])))
			}
		}
		startReady()
	}
	if aborted {
		var skip []*stepPlan
		for i := range n {
			if state[i] == waiting {
				state[i] = skipped
				skip = append(skip, lp.steps[i].subtree...)
			}
		}
		r.skip(f, skip, "a sibling failed and on_any_fail is abort")
	}
	switch {
	case first != nil:
		return outcome{status: run.StepFailed, err: first}
	case ctx.Err() != nil:
		st, _, _ := r.stopped(ctx)
		return outcome{status: st}
	}
	return outcome{status: run.StepCompleted}
}

// runStepSafe is runStep for a goroutine of its own: a panic fails the step instead of the
// process.
func (r *runner) runStepSafe(ctx context.Context, f *frame, sp *stepPlan) (o outcome) {
	defer func() {
		if p := recover(); p != nil {
			o = outcome{status: run.StepFailed, err: &run.StepError{RunID: r.id, StepKey: f.key(sp), Kind: KindInternal,
				Message: fmt.Sprintf("internal error (a bug in dcc-flow): %v", p), Trace: string(debug.Stack())}}
		}
	}()
	return r.runStep(ctx, f, sp)
}

// runStep runs one step instance: step_enter, the kind's driver, step_exit. A step whose
// context has ended is not started and leaves no record.
func (r *runner) runStep(ctx context.Context, f *frame, sp *stepPlan) outcome {
	if ctx.Err() != nil {
		st, _, _ := r.stopped(ctx)
		return outcome{status: st}
	}
	key := f.key(sp)
	if r.prior != nil {
		if p, ok := r.prior[key]; ok {
			return r.reuse(f, sp, p)
		}
	}
	// A paused run starts nothing: wait at the gate, and register the instance under it.
	if r.enterGate(ctx) != nil {
		st, _, _ := r.stopped(ctx)
		return outcome{status: st}
	}
	in := instPool.Get().(*inst)
	defer instPool.Put(in)
	defer r.unlink(in)
	defer in.unhost() // after its terminal row is written (finish)
	err := func() error {
		defer r.pauseMu.RUnlock()
		now := r.now()
		buf := in.argsBuf // an earlier instance's, reused
		*in = inst{r: r, f: f, sp: sp, row: store.Step{RunID: r.id, Key: key, StepID: sp.id, Kind: string(sp.kind),
			Status: run.StepRunning, StartedAt: now, Insert: !r.rowKeys[key]}}
		in.argsBuf = buf[:0]
		if sp.kind == spec.KindTool || sp.kind == spec.KindToolRemote || sp.kind == spec.KindWorkflow {
			in.row.Attempt = 1
		}
		switch sp.kind {
		case spec.KindTool, spec.KindToolRemote, spec.KindApprove:
			// Written with the step's next write: its exit, its approve_requested, or the
			// running row runTool writes before a call that may block.
			return in.deferEnter(now)
		}
		// A control step's step_enter comes before its children's events.
		return in.saveAt(now, run.EventStepEnter, nil)
	}()
	if err != nil {
		if errors.Is(err, errSealed) {
			st, _, _ := r.stopped(ctx)
			return outcome{status: st}
		}
		return outcome{status: run.StepFailed, err: &run.StepError{RunID: r.id, StepKey: key, Kind: run.KindError, Message: err.Error(), Err: err}}
	}
	var end stepEnd
	switch sp.kind {
	case spec.KindTool, spec.KindToolRemote:
		end = r.runTool(ctx, in)
	case spec.KindApprove:
		end = r.runApprove(ctx, in)
	case spec.KindWorkflow:
		end = r.runWorkflow(ctx, in)
	default:
		end = r.runControl(ctx, in)
	}
	return in.finish(end)
}

// runControl runs a foreach, parallel or branch step under its whole-step timeout.
func (r *runner) runControl(ctx context.Context, in *inst) stepEnd {
	sp := in.sp
	sctx := ctx
	var timeoutCause *stopCause
	if sp.timeout > 0 {
		var cancel context.CancelFunc
		timeoutCause = stepTimeout(in.row.Key, sp.timeout)
		sctx, cancel = clock.WithTimeout(ctx, r.x.cfg.Clock, sp.timeout, timeoutCause)
		defer cancel()
	}
	var end stepEnd
	switch sp.kind {
	case spec.KindForeach:
		end = r.runForeach(sctx, in)
	case spec.KindParallel:
		end = r.runParallel(sctx, in)
	case spec.KindBranch:
		end = r.runBranch(sctx, in)
	}
	if timeoutCause != nil && ctx.Err() == nil && context.Cause(sctx) == timeoutCause && end.status != run.StepCompleted {
		end.status, end.errKind = run.StepFailed, run.KindTimeout
		end.errMsg = fmt.Sprintf("step %s timed out after %s", in.row.Key, sp.timeout)
		end.cause = nil
	}
	return end
}

// stoppedEnd is the end of a step whose context ended.
func (r *runner) stoppedEnd(ctx context.Context) stepEnd {
	st, kind, msg := r.stopped(ctx)
	return stepEnd{status: st, errKind: kind, errMsg: msg}
}

// stopped describes how a step whose context ended (or whose run was sealed) stops. When the
// run itself is stopping, its cause applies, read without context.Cause (whose lock a thousand
// steps stopping at once would contend for).
func (r *runner) stopped(ctx context.Context) (run.StepStatus, string, string) {
	if sc := r.stopCause.Load(); sc != nil {
		return sc.step, sc.kind, sc.msg
	}
	return stopped(ctx)
}

// cachedJSON is the detail of the step_exit of a step served from the idempotency cache.
var cachedJSON = json.RawMessage(`{"cached":true}`)

// errorJSON is the detail of the step_exit of a step that did not complete:
// {"error":{"kind":…,"message":…}}.
func errorJSON(kind, msg string) json.RawMessage {
	b := make([]byte, 0, 32+len(kind)+len(msg))
	b = append(b, `{"error":{"kind":`...)
	b = appendString(b, kind)
	b = append(b, `,"message":`...)
	b = appendString(b, msg)
	return append(b, "}}"...)
}

type errorDetail struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// finish writes the instance's terminal row and step_exit event, then publishes its result.
func (in *inst) finish(end stepEnd) outcome {
	r := in.r
	if end.hasOutput && end.outputJSON == nil {
		b, err := marshalJSON(end.output)
		if err != nil {
			end = stepEnd{status: run.StepFailed, errKind: run.KindError, errMsg: "the output is not JSON-encodable: " + err.Error()}
		} else {
			end.outputJSON = b
		}
	}
	now := r.now()
	row := &in.row
	row.Status, row.Output, row.FileRefs, row.Cached = end.status, end.outputJSON, end.refsJSON, end.cached
	row.ErrorKind, row.ErrorMessage, row.ErrorTrace = end.errKind, end.errMsg, end.errTrace
	row.FinishedAt, row.UpdatedAt = now, now

	var detail json.RawMessage
	switch {
	case end.status != run.StepCompleted:
		detail = errorJSON(end.errKind, end.errMsg)
	case end.cacheHit != nil:
		detail = end.cacheHit
	case end.cached:
		detail = cachedJSON
	}
	in.steps[0] = *row
	in.batch = store.Batch{Steps: in.steps[:]}
	n := 0
	if in.enterPending {
		in.evs[n] = in.enter
		n++
	}
	if end.resolved != nil {
		in.evs[n] = r.event(now, run.EventApproveResolved, row.Key, string(end.status), 0, end.resolved)
		n++
	}
	in.evs[n] = r.event(now, run.EventStepExit, row.Key, string(end.status), row.Attempt, detail)
	in.batch.Events = in.evs[:n+1]
	if end.idem != nil {
		in.batch.Idempotency = []store.IdempotencyEntry{*end.idem}
	}
	if end.cacheEntry != nil {
		in.batch.CacheEntries = []store.CacheEntry{*end.cacheEntry}
	}
	in.pendingAttempt(&in.batch, now)
	r.touch(now)
	// A failed write cancels the run; a refused one means the run was sealed. Either way the
	// step's outcome stands for the steps still running.
	_ = r.writeFor(in, &in.batch, writeFinal)
	res := &result{status: end.status, output: end.output, fileRefs: end.fileRefs, attempts: row.Attempt}
	if end.status == run.StepCompleted {
		res.raw, res.lazy = end.outputJSON, end.lazy
	}
	in.f.publish(in.sp, res)

	o := outcome{status: end.status}
	if end.status == run.StepFailed {
		o.err = end.cause
		if o.err == nil {
			o.err = &run.StepError{RunID: r.id, StepKey: row.Key, Attempt: row.Attempt, Kind: end.errKind, Message: end.errMsg, Trace: end.errTrace}
		}
	}
	return o
}

// skip records the given step instances as skipped (one write), because of reason.
func (r *runner) skip(f *frame, sps []*stepPlan, reason string) {
	if len(sps) == 0 {
		return
	}
	now := r.now()
	detail := jsonDetail(map[string]string{"reason": reason})
	b := &store.Batch{Steps: make([]store.Step, 0, len(sps)), Events: make([]run.Event, 0, len(sps))}
	res := &result{status: run.StepSkipped}
	for _, sp := range sps {
		key := f.key(sp)
		b.Steps = append(b.Steps, store.Step{RunID: r.id, Key: key, StepID: sp.id, Kind: string(sp.kind), Status: run.StepSkipped,
			ErrorMessage: reason, FinishedAt: now, UpdatedAt: now, Insert: !r.rowKeys[key]})
		b.Events = append(b.Events, r.event(now, run.EventStepSkipped, key, string(run.StepSkipped), 0, detail))
	}
	r.touch(now)
	_ = r.writeFor(nil, b, writeTerminalRows)
	for _, sp := range sps {
		f.publish(sp, res)
	}
}

// reuse takes over a completed instance of an earlier execution of the run (resume) without
// running it, with the instances of its frame nested under it.
func (r *runner) reuse(f *frame, sp *stepPlan, p store.Step) outcome {
	for _, s := range sp.subtree {
		prev := p
		if s != sp {
			var ok bool
			if prev, ok = r.prior[f.key(s)]; !ok {
				continue
			}
		}
		f.publish(s, priorResult(prev))
	}
	// The iterations of a reused foreach are not expanded: count their instances as done.
	inside := 0
	for _, s := range sp.subtree {
		inside += r.priorInside[f.key(s)]
	}
	r.total.Add(int64(inside))
	r.completed.Add(int64(len(sp.subtree) + inside))
	return outcome{status: run.StepCompleted}
}

// priorResult is the result of a completed instance of an earlier execution.
func priorResult(p store.Step) *result {
	res := &result{status: run.StepCompleted, attempts: p.Attempt}
	if len(p.Output) > 0 {
		res.raw, res.lazy = p.Output, true
	}
	if len(p.FileRefs) > 0 {
		_ = json.Unmarshal(p.FileRefs, &res.fileRefs)
	}
	return res
}

// leafStart and leafEnd bracket a tool step; with approvals open they switch the run between
// running and waiting.
func (r *runner) leafStart() {
	r.leaf.Add(1)
	if r.open.Load() > 0 {
		r.refreshStatus()
	}
}

func (r *runner) leafEnd() {
	r.leaf.Add(-1)
	if r.open.Load() > 0 {
		r.refreshStatus()
	}
}

// refreshStatus writes running or waiting (an approval is open and no tool step is in flight)
// when it changed; a paused run stays paused.
func (r *runner) refreshStatus() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	want := r.statusWanted(r.isPaused())
	if want == r.status {
		return
	}
	r.status = want
	now := r.now()
	_ = r.write(&store.Batch{RunUpdates: []store.RunUpdate{{ID: r.id, Status: want, Progress: r.progress(), UpdatedAt: now}}})
}

// armStall starts stall detection.
func (r *runner) armStall() {
	d := r.x.cfg.StallAfter
	if d <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.finished {
		r.stallTimer = r.x.cfg.Clock.AfterFunc(d, r.checkStall)
	}
}

// checkStall emits stall_detected when the run, running (not waiting for an approval, nor with
// every tool attempt in flight waiting for its resources), has written nothing for StallAfter;
// once per quiet period.
func (r *runner) checkStall() {
	d := r.x.cfg.StallAfter
	now := r.now()
	last := r.lastActivity.Load()
	quiet := now.Sub(time.Unix(0, last))
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	next := d - quiet
	if next <= 0 {
		next = d
	}
	r.stallTimer = r.x.cfg.Clock.AfterFunc(next, r.checkStall)
	if quiet < d || r.stallMarked == last || r.status != run.StatusRunning {
		return
	}
	if n := r.resWaiting.Load(); n > 0 && n >= r.leaf.Load() {
		return // waiting for licences or GPUs is not a stall
	}
	r.stallMarked = last
	detail := jsonDetail(map[string]any{"quiet_ms": quiet.Milliseconds(), "tool_steps_in_flight": r.leaf.Load(),
		"last_activity": time.Unix(0, last).In(now.Location())})
	_ = r.write(&store.Batch{Events: []run.Event{r.event(now, run.EventStallDetected, "", string(r.status), 0, detail)}})
}
