package tools

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Lanes of host tools: the host runs "main" calls on its main thread (Maya's UI thread) and
// "worker" calls on a pool of its choosing.
const (
	LaneMain   = "main"
	LaneWorker = "worker"
)

// IsLane reports whether lane is LaneMain or LaneWorker.
func IsLane(lane string) bool { return lane == LaneMain || lane == LaneWorker }

// PendingCall is a host tool call waiting for the host, as handed out by Pull.
type PendingCall struct {
	ID       uint64         `json:"id"`
	Lane     string         `json:"lane"`
	Tool     string         `json:"tool"`
	RunID    string         `json:"run_id"`
	StepKey  string         `json:"step_key"`
	Args     map[string]any `json:"args"` // must not be modified
	Attempt  int            `json:"attempt"`
	Deadline time.Time      `json:"deadline,omitzero"` // zero = none
}

// Host is the queue between the engine and the process that runs host tools (Python). A step
// calling a host tool enqueues the call on its lane and waits; the host pulls calls with Pull
// (host_pull.go), runs them on the thread it chooses and answers with Complete (the C ABI's
// dccflow_calls_complete can pull the next calls in the same crossing). No goroutine is
// started per call.
//
// A call whose step context ends (cancel, timeout) is withdrawn: if it was not pulled yet it is
// never handed out; if it was, Cancelled reports true and a later Complete is rejected and
// its result dropped.
type Host struct {
	mu      sync.Mutex
	closed  bool
	closeCh chan struct{}
	nextID  uint64
	lanes   map[string]*lane
	calls   map[uint64]*pending // queued or pulled, not yet answered or withdrawn
	dropped dropLog
	// pullers are the open puller ids (OpenPuller); a call pulled by one is handed back to its
	// lane when the puller releases it or closes.
	pullers    map[uint64]struct{}
	nextPuller uint64
	// abandoned is a lock-free stack of calls whose step gave up on them (cancel, timeout):
	// a burst of cancellations does not contend for mu. They are withdrawn under mu, in a batch,
	// by the next locked operation or by a goroutine started by the first one abandoned.
	abandoned atomic.Pointer[pending]
	// lastAnswer is when Complete last took an answer, in nanoseconds since hostEpoch (0:
	// never); Pull spins only shortly after one (spinWindow).
	lastAnswer atomic.Int64
	yields     atomic.Int64 // how many times Pull yielded while spinning (tests read it)
}

// hostEpoch is the origin of Host.lastAnswer (a monotonic reading).
var hostEpoch = time.Now()

// answeredWithin reports whether Complete took an answer less than d ago.
func (h *Host) answeredWithin(d time.Duration) bool {
	last := h.lastAnswer.Load()
	return last != 0 && time.Since(hostEpoch)-time.Duration(last) < d
}

type pendingState uint8

const (
	stateQueued pendingState = iota
	statePulled
	stateGone // answered or withdrawn
)

type pending struct {
	call      PendingCall
	ancestors []string     // Call.Ancestors: the runs above call.RunID (lane.go)
	reporter  Reporter     // the step's, or nil
	state     pendingState // queue bookkeeping, under Host.mu
	// puller holds the call while it is pulled and unanswered (0: pulled without a puller).
	puller uint64
	gen    uint32          // how many times it was handed back: tells its live queue entries (lane.go)
	done   chan answer     // buffered 1; receives the answer
	ctx    context.Context // the step's; its cause becomes the drop reason, computed lazily
	// claim decides, once, between the answer and the step giving up: claimOpen, then
	// claimAnswered (Complete won) or claimAbandoned (Call's context ended first).
	claim atomic.Uint32
	next  *pending // in Host.abandoned
}

// answer is what a waiting Call receives: the host's result, or ErrClosed.
type answer struct {
	res Result
	err error
}

const (
	claimOpen uint32 = iota
	claimAnswered
	claimAbandoned
)

// NewHost returns a host with the lanes "main" and "worker".
func NewHost() *Host {
	h := &Host{
		closeCh: make(chan struct{}),
		lanes:   map[string]*lane{},
		calls:   map[uint64]*pending{},
		dropped: newDropLog(4096),
		pullers: map[uint64]struct{}{},
	}
	for _, name := range []string{LaneMain, LaneWorker} {
		h.lanes[name] = newLane()
	}
	return h
}

// Call enqueues call on lane and waits for the host's answer or the end of ctx (it then
// returns ctx.Err(); context.Cause(ctx) says why). An answer that arrives before Call notices
// the end of ctx is returned.
func (h *Host) Call(ctx context.Context, laneName string, call Call) (Result, error) {
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	p := &pending{done: make(chan answer, 1), ctx: ctx}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return Result{}, ErrClosed
	}
	ln := h.lanes[laneName]
	if ln == nil {
		h.mu.Unlock()
		return Result{}, fmt.Errorf("host tool %s: unknown lane %q", call.Tool, laneName)
	}
	h.nextID++
	p.call = PendingCall{ID: h.nextID, Lane: laneName, Tool: call.Tool, RunID: call.RunID, StepKey: call.StepKey,
		Args: call.Args, Attempt: call.Attempt, Deadline: call.Deadline}
	p.ancestors = call.Ancestors
	p.reporter = call.Reporter
	h.calls[p.call.ID] = p
	ln.enqueue(p, false)
	h.mu.Unlock()

	// Only two channels: the shared ctx.Done() and a private one (Close answers through it). A
	// third shared channel would make a thousand calls woken at once contend for its lock.
	select {
	case a := <-p.done:
		return a.res, a.err
	case <-ctx.Done():
	}
	if !p.claim.CompareAndSwap(claimOpen, claimAbandoned) {
		if p.claim.Load() == claimAnswered {
			a := <-p.done // answered concurrently: the answer is on its way
			return a.res, a.err
		}
		return Result{}, ctx.Err() // Complete saw the context end first and withdrew the call
	}
	// No lock and no context.Cause here (it takes the context's mutex): a thousand calls of a
	// cancelled run return at the same moment.
	h.abandon(p)
	return Result{}, ctx.Err()
}

// abandon queues p for withdrawal without taking mu; the first call abandoned into an empty
// stack starts a goroutine that withdraws the batch.
func (h *Host) abandon(p *pending) {
	for {
		old := h.abandoned.Load()
		p.next = old
		if h.abandoned.CompareAndSwap(old, p) {
			if old == nil {
				go func() {
					h.mu.Lock()
					h.drainLocked()
					h.mu.Unlock()
				}()
			}
			return
		}
	}
}

func dropReason(ctx context.Context) string {
	if cause := context.Cause(ctx); cause != nil {
		return cause.Error()
	}
	return "cancelled"
}

// drainLocked withdraws the abandoned calls.
func (h *Host) drainLocked() {
	for p := h.abandoned.Swap(nil); p != nil; {
		next := p.next
		p.next = nil
		if p.state != stateGone {
			h.withdrawLocked(p, dropReason(p.ctx))
		}
		p = next
	}
}

// withdrawLocked forgets p (not answered) and remembers why, for a late Complete.
func (h *Host) withdrawLocked(p *pending, reason string) {
	queued := p.state == stateQueued
	h.forgetLocked(p, reason)
	if queued {
		h.lanes[p.call.Lane].left(p, true)
	}
}

// forgetLocked marks p gone (neither queued nor pulled) and remembers why, for a late Complete.
// A queued p leaves dead entries in its lane; the caller tells the lane (lane.left).
func (h *Host) forgetLocked(p *pending, reason string) {
	p.state = stateGone
	p.puller = 0
	delete(h.calls, p.call.ID)
	h.dropped.add(p.call.ID, reason)
}

// takeLocked marks the queued call p pulled by puller, or forgets it when its step has already
// given up on it (cancel, timeout) without having withdrawn it yet: a cancelled call is never
// handed out. It reports whether p was taken; either way p has left the queue.
func (h *Host) takeLocked(p *pending, puller uint64) bool {
	if p.ctx.Err() != nil || p.claim.Load() != claimOpen {
		h.forgetLocked(p, dropReason(p.ctx))
		return false
	}
	p.state = statePulled
	p.puller = puller
	return true
}

// popLocked takes up to max queued calls of run runID ("" = any run) from ln for puller, oldest
// first, and marks them pulled.
func (h *Host) popLocked(ln *lane, runID string, max int, puller uint64) []PendingCall {
	var out []PendingCall
	for len(out) < max {
		p := ln.next(runID)
		if p == nil {
			break
		}
		taken := h.takeLocked(p, puller)
		ln.left(p, false)
		if taken {
			if out == nil {
				out = make([]PendingCall, 0, max)
			}
			out = append(out, p.call)
		}
	}
	return out
}

// requeueLocked hands the pulled, unanswered call p back to the front of its lane, so the next
// puller gets it first, and wakes a waiting puller. A call whose step has given up is withdrawn
// instead.
func (h *Host) requeueLocked(p *pending) {
	p.puller = 0
	if p.ctx.Err() != nil || p.claim.Load() != claimOpen {
		h.forgetLocked(p, dropReason(p.ctx))
		return
	}
	p.state = stateQueued
	p.gen++
	h.lanes[p.call.Lane].enqueue(p, true)
}

// ErrDropped is the cause of Complete's error for a late result: the call is no longer pending
// (its step was cancelled or timed out, or it was already answered) and the result was dropped.
// Test for it with errors.Is; the error is a *run.Error with code invalid_state whose message
// says why ("attempt 1 timed out after 5s") and whose details are {"call_id", "reason"?}.
var ErrDropped = errors.New("the tool call is no longer pending; its result was dropped")

// droppedError is Complete's error for a late result of call id; reason is "" when unknown
// (the drop log forgot it).
func droppedError(id uint64, reason string) error {
	if reason == "" {
		return &run.Error{Code: run.CodeInvalidState, Message: fmt.Sprintf("call %d is no longer pending; its result was dropped", id),
			Details: map[string]any{"call_id": id}, Err: ErrDropped}
	}
	return &run.Error{Code: run.CodeInvalidState, Message: fmt.Sprintf("call %d is no longer pending (%s); its result was dropped", id, reason),
		Details: map[string]any{"call_id": id, "reason": reason}, Err: ErrDropped}
}

// Complete answers the pulled call id. It fails, and the result is dropped, when the call is
// unknown (code not_found), not pulled yet (code invalid_state) or no longer wanted because its
// step was cancelled or timed out or it was already answered (code invalid_state, wrapping
// ErrDropped).
func (h *Host) Complete(id uint64, res Result) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drainLocked()
	p, ok := h.calls[id]
	if !ok {
		if reason, known := h.dropped.get(id); known {
			return droppedError(id, reason)
		}
		if id > 0 && id <= h.nextID {
			return droppedError(id, "")
		}
		return &run.Error{Code: run.CodeNotFound, Message: fmt.Sprintf("no tool call with id %d", id), Details: map[string]any{"call_id": id}}
	}
	if p.state == stateQueued {
		return &run.Error{Code: run.CodeInvalidState, Message: fmt.Sprintf("call %d was not pulled yet", id), Details: map[string]any{"call_id": id}}
	}
	if p.ctx.Err() != nil {
		// The step gave up (its goroutine may not have noticed yet): the answer is late.
		p.claim.CompareAndSwap(claimOpen, claimAbandoned)
	}
	if !p.claim.CompareAndSwap(claimOpen, claimAnswered) {
		// Abandoned an instant ago; the batch withdrawal has not run yet.
		reason := dropReason(p.ctx)
		h.withdrawLocked(p, reason)
		return droppedError(id, reason)
	}
	p.state = stateGone
	p.puller = 0
	delete(h.calls, id)
	h.dropped.add(id, "already completed")
	h.lastAnswer.Store(int64(time.Since(hostEpoch)) | 1) // | 1: never 0
	p.done <- answer{res: res}
	return nil
}

// Cancelled reports whether the call's step no longer wants its result: its context ended, or
// the call was answered or withdrawn. Unknown ids report true. Hosts poll it from long tools.
func (h *Host) Cancelled(id uint64) bool {
	h.mu.Lock()
	p, ok := h.calls[id]
	h.mu.Unlock()
	return !ok || p.claim.Load() == claimAbandoned || p.ctx.Err() != nil
}

// Report passes a report of the pulled call id to its step. It returns false, and drops the
// report, when the call is not running: unknown, answered, withdrawn, or cancelled.
func (h *Host) Report(id uint64, rep Report) bool {
	h.mu.Lock()
	p, ok := h.calls[id]
	running := ok && p.state == statePulled
	h.mu.Unlock()
	if !running || p.claim.Load() != claimOpen || p.ctx.Err() != nil {
		return false
	}
	if p.reporter != nil {
		p.reporter.Report(rep)
	}
	return true
}

// Running returns the top-level runs (a child run's outermost ancestor) that have a call the
// host pulled and has not answered: calls a host runs on, whether or not it honours a cancel.
func (h *Host) Running() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drainLocked()
	out := map[string]bool{}
	for _, p := range h.calls {
		if p.state != statePulled {
			continue
		}
		if len(p.ancestors) > 0 {
			out[p.ancestors[0]] = true
		} else {
			out[p.call.RunID] = true
		}
	}
	return out
}

// Pending returns the number of calls queued or pulled and not answered.
func (h *Host) Pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drainLocked()
	return len(h.calls)
}

// Close wakes every blocked Pull (they return code closed) and every waiting Call (they return
// ErrClosed). Closing twice is harmless.
func (h *Host) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	h.closed = true
	close(h.closeCh)
	h.drainLocked()
	for _, p := range h.calls {
		if p.claim.CompareAndSwap(claimOpen, claimAnswered) {
			p.done <- answer{err: ErrClosed}
		}
	}
	clear(h.calls)
}

// dropLog remembers why recent calls were dropped, for Complete's error; bounded.
type dropLog struct {
	reasons map[uint64]string
	order   []uint64
	next    int
}

func newDropLog(n int) dropLog {
	return dropLog{reasons: make(map[uint64]string, n), order: make([]uint64, n)}
}

func (d *dropLog) add(id uint64, reason string) {
	if old := d.order[d.next]; old != 0 {
		delete(d.reasons, old)
	}
	d.order[d.next] = id
	d.next = (d.next + 1) % len(d.order)
	d.reasons[id] = reason
}

func (d *dropLog) get(id uint64) (string, bool) {
	r, ok := d.reasons[id]
	return r, ok
}

// eachRun calls fn with the run id of p's call and the id of each run above it.
func (p *pending) eachRun(fn func(id string)) {
	fn(p.call.RunID)
	for _, a := range p.ancestors {
		fn(a)
	}
}

// Queued returns the number of calls of lane laneName waiting to be pulled (queued, not yet
// taken by a puller); 0 for an unknown lane.
func (h *Host) Queued(laneName string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	ln := h.lanes[laneName]
	if ln == nil {
		return 0
	}
	return len(ln.all.s) - ln.all.head - ln.dead
}
