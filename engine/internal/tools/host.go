package tools

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Lanes of host tools: the host runs "main" calls on its main thread (Maya's UI thread) and
// "worker" calls on a pool of its choosing.
const (
	LaneMain   = flowtype.LaneMain
	LaneWorker = flowtype.LaneWorker
)

// IsLane reports whether lane is LaneMain or LaneWorker.
func IsLane(lane string) bool { return lane == LaneMain || lane == LaneWorker }

// PendingCall is a host tool call waiting for the host, as handed out by Pull
// (flowtype.PendingCall).
type PendingCall = flowtype.PendingCall

// DefaultInterruptGrace is how long a timed-out host call is given to stop (the host interrupts
// the tool) before its attempt is abandoned: SetInterruptGrace.
const DefaultInterruptGrace = 2 * time.Second

// Host is the queue between the engine and the process that runs host tools (Python). A step
// calling a host tool enqueues the call on its lane and waits; the host pulls calls with Pull
// (host_pull.go), runs them on the thread it chooses and answers with Complete (the C ABI's
// dccflow_calls_complete can pull the next calls in the same crossing). No goroutine is
// started per call.
//
// A call whose step context ends (cancel) is withdrawn: if it was not pulled yet it is never
// handed out; if it was, Cancelled reports true and a later Complete is rejected and its result
// dropped.
//
// Timeouts (Call.Timeout) count from the pull: a call waiting in its lane for a busy thread has
// not started. When the deadline passes, Cancelled reports true (the host interrupts the tool)
// and the Host waits the interrupt grace for the host's answer, which ends the attempt as timed
// out (a result is dropped); without an answer by then the attempt is abandoned
// (*AbandonedError) and the step moves on. A call the host took stays in flight until the host
// answers it, hands it back or closes its puller, whether or not its step still waits for it;
// while it is, no other call of the same step instance is handed out (Call waits): two
// attempts of one step never run at once in one host.
type Host struct {
	mu      sync.Mutex
	closed  bool
	held    bool        // Hold: no call is handed out any more
	gate    func() bool // SetGate: no call is handed out while it reports false
	closeCh chan struct{}
	nextID  uint64
	lanes   map[string]*lane
	calls   map[uint64]*pending // queued or pulled, not yet answered or withdrawn
	dropped dropLog
	// pullers are the open puller ids (OpenPuller) with the names their threads gave; a call
	// pulled by one is handed back to its lane when the puller releases it or closes.
	pullers    map[uint64]string
	nextPuller uint64
	// answeredBy is when each open puller last had an answer taken, as lastAnswer: Pull spins
	// for a puller only shortly after its own answer (spinForLocked).
	answeredBy map[uint64]int64
	// inflight are the calls a puller took and the host has not answered or handed back, by id,
	// including those whose step gave up on them (cancelled, abandoned): the host may still be
	// running them. busy indexes them by step instance.
	inflight map[uint64]*pending
	busy     map[stepRef]*pending
	clock    clock.Clock  // times the attempts' deadlines (NewRouter sets the engine's)
	grace    atomic.Int64 // SetInterruptGrace, in nanoseconds
	// abandoned is a lock-free stack of calls whose step gave up on them (cancel, timeout):
	// a burst of cancellations does not contend for mu. They are withdrawn under mu, in a batch,
	// by the next locked operation or by a goroutine started by the first one abandoned.
	abandoned atomic.Pointer[pending]
	// lastAnswer is when Complete last took an answer, in nanoseconds since hostEpoch (0:
	// never); Pull spins only shortly after one (spinWindow).
	lastAnswer atomic.Int64
	yields     atomic.Int64 // how many times Pull yielded while spinning (tests read it)
	// queued counts the calls queued (handed back ones too): a Pull spinning without yielding
	// watches it (handshake.go). busySpins counts those spins, handshakeSleeps the Calls that
	// slept for their answer there, handshakesWoken those woken by it (tests read them).
	queued          atomic.Uint64
	busySpins       atomic.Int64
	handshakeSleeps atomic.Int64
	handshakesWoken atomic.Int64
	// spinning is how many Pulls are spinning (at most one: see Pull), under mu.
	spinning int
	// spinAlways makes a host thread spin for the next call whatever its lane's last spins
	// took (lane.spinPaysLocked): for tests of the handshake on a busy machine, where spins
	// stop. Set before the Host is used.
	spinAlways bool
}

// hostEpoch is the origin of Host.lastAnswer (a monotonic reading).
var hostEpoch = time.Now()

// answeredWithin reports whether Complete took an answer less than d ago.
func (h *Host) answeredWithin(d time.Duration) bool {
	last := h.lastAnswer.Load()
	return last != 0 && time.Since(hostEpoch)-time.Duration(last) < d
}

// spinForLocked reports whether a Pull of puller should spin before it parks: when that puller
// had an answer taken less than spinWindow ago (it answers and asks for the next call of a run
// going step after step), or, for puller 0, when any answer was. A puller that was idle, or
// woken for a call another puller took, parks at once: each of its yields would be a thread
// hand-off (a Pull from a host thread is a cgo callback), and with several idle threads of a
// fan-out every queued call woke them all into such a spin. Under h.mu (Pull holds it anyway).
func (h *Host) spinForLocked(puller uint64) bool {
	if puller == 0 {
		return h.answeredWithin(spinWindow)
	}
	last := h.answeredBy[puller]
	return last != 0 && time.Since(hostEpoch)-time.Duration(last) < spinWindow
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
	gen    uint32      // how many times it was handed back: tells its live queue entries (lane.go)
	done   chan answer // buffered 1; receives the answer
	// answered is woken with every send on done: a Call sleeping for the answer in the kernel
	// (the handshake, handshake.go) wakes.
	answered wakeWord
	ctx      context.Context // the step's; its cause becomes the drop reason, computed lazily
	// timeout is the attempt's limit from the pull (0: none) and timeoutErr the error of its end.
	timeout    time.Duration
	timeoutErr error
	// expired is closed, and expiredFlag set, when the deadline passes while the call is pulled
	// (under Host.mu); nil without a timeout. timer fires it.
	expired     chan struct{}
	expiredFlag atomic.Bool
	timer       clock.Timer
	// letGo, made when a later call of the same step waits, is closed when the host lets go of
	// the call (answer, hand-back, puller closed).
	letGo chan struct{}
	// pulled is set when a host thread first pulls the call: the attempt began; started is
	// Call.Started, called then.
	pulled  atomic.Bool
	started func()
	// takenAt is when a puller last took it, in nanoseconds since hostEpoch (0: never; under
	// Host.mu): the hold time Complete averages (lane.holdAvg).
	takenAt int64
	// claim decides, once, between the answer and the step giving up: claimOpen, then
	// claimAnswered (Complete won) or claimAbandoned (Call's context ended first).
	claim atomic.Uint32
	next  *pending // in Host.abandoned
}

// answer is what a waiting Call receives: the host's result, or ErrClosed. late marks an
// answer that came after the call's deadline (its result is dropped); errNotRun marks a
// timed-out call handed back without being run.
type answer struct {
	res  Result
	err  error
	late bool
}

// errNotRun answers a timed-out call that its puller handed back: the host did not run it.
var errNotRun = errors.New("handed back without being run")

// stepRef names a step instance of a run: calls of one ref never run at once in one host.
type stepRef struct{ run, key string }

// AbandonedError ends an attempt whose call timed out and whose host did not stop it within the
// interrupt grace: the step moves on (a retry waits until the host lets go of the call), and a
// result the tool returns later is dropped. It wraps the timeout's error, so errors.As on that
// error's type still tells a timeout.
type AbandonedError struct {
	CallID  uint64
	Attempt int
	Tool    string
	Thread  string // the name the puller's thread gave (OpenPuller); "" when unknown
	Puller  uint64
	Grace   time.Duration
	Err     error // the attempt's timeout
}

func (e *AbandonedError) Error() string {
	who := "the host thread running it"
	if e.Thread != "" {
		who = fmt.Sprintf("thread %q", e.Thread)
	}
	return fmt.Sprintf("%v; tool %s did not stop within %s of being interrupted, so attempt %d was abandoned: "+
		"%s is still in it (blocked outside Python code, e.g. in time.sleep or a C library, where it cannot be "+
		"interrupted); what it returns will be dropped", e.Err, e.Tool, e.Grace, e.Attempt, who)
}

func (e *AbandonedError) Unwrap() error { return e.Err }

const (
	claimOpen uint32 = iota
	claimAnswered
	claimAbandoned
)

// NewHost returns a host with the lanes "main" and "worker".
func NewHost() *Host {
	h := &Host{
		closeCh:    make(chan struct{}),
		lanes:      map[string]*lane{},
		calls:      map[uint64]*pending{},
		dropped:    newDropLog(4096),
		pullers:    map[uint64]string{},
		answeredBy: map[uint64]int64{},
		inflight:   map[uint64]*pending{},
		busy:       map[stepRef]*pending{},
		clock:      clock.New(),
	}
	h.grace.Store(int64(DefaultInterruptGrace))
	for _, name := range []string{LaneMain, LaneWorker} {
		h.lanes[name] = newLane()
	}
	return h
}

// SetInterruptGrace sets how long a timed-out call is given to stop before its attempt is
// abandoned (DefaultInterruptGrace until set); d ≤ 0 abandons it as soon as it times out. A
// call that has already timed out keeps the grace it was given.
func (h *Host) SetInterruptGrace(d time.Duration) { h.grace.Store(int64(max(d, 0))) }

// Call enqueues call on lane and waits for the host's answer or the end of ctx (it then
// returns ctx.Err(); context.Cause(ctx) says why). An answer that arrives before Call notices
// the end of ctx is returned.
//
// With call.Timeout, the attempt times out that long after a host thread pulls it: Call then
// waits the interrupt grace for the host to stop the tool and returns call.TimeoutErr (a
// result the host sends now is dropped), or an *AbandonedError when the host did not answer
// within the grace. While an earlier call of the same step instance is still in flight (the
// host has not let go of an abandoned or cancelled attempt), Call waits for it first.
func (h *Host) Call(ctx context.Context, laneName string, call Call) (Result, error) {
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	ref := stepRef{call.RunID, call.StepKey}
	p := &pending{done: make(chan answer, 1), ctx: ctx}
	if call.Timeout > 0 {
		p.timeout, p.timeoutErr, p.expired = call.Timeout, call.TimeoutErr, make(chan struct{})
		if p.timeoutErr == nil {
			p.timeoutErr = fmt.Errorf("attempt %d timed out after %s", call.Attempt, call.Timeout)
		}
	}
	h.mu.Lock()
	for {
		if h.closed {
			h.mu.Unlock()
			return Result{}, ErrClosed
		}
		prev := h.busy[ref]
		if prev == nil {
			break
		}
		wait := prev.letGoLocked()
		h.mu.Unlock()
		select { // an earlier attempt of this step is still running here: never two at once
		case <-wait:
		case <-ctx.Done():
			return Result{NotStarted: true}, ctx.Err()
		case <-h.closeCh:
		}
		h.mu.Lock()
	}
	ln := h.lanes[laneName]
	if ln == nil {
		h.mu.Unlock()
		return Result{}, fmt.Errorf("host tool %s: unknown lane %q", call.Tool, laneName)
	}
	h.nextID++
	p.call = PendingCall{ID: h.nextID, Lane: laneName, Tool: call.Tool, RunID: call.RunID, StepKey: call.StepKey,
		Args: call.Args, Attempt: call.Attempt, Traceparent: call.Traceparent}
	if call.Timeout <= 0 {
		p.call.Deadline = call.Deadline
	}
	p.ancestors = call.Ancestors
	p.reporter = call.Reporter
	p.started = call.Started
	h.calls[p.call.ID] = p
	h.queueLocked(ln, p, false)
	sleep := h.handshakeLocked(ln)
	h.mu.Unlock()
	if sleep > 0 {
		h.awaitHandshake(ln, p, sleep)
	}

	// Only two channels: the shared ctx.Done() and a private one (Close answers through it). A
	// third shared channel would make a thousand calls woken at once contend for its lock.
	select {
	case a := <-p.done:
		if a.late { // expired and answered before this goroutine got to its select
			return Result{}, p.timeoutErr
		}
		return a.res, a.err
	case <-ctx.Done():
	case <-p.expired: // nil without a timeout
		return h.expiredCall(ctx, p)
	}
	return h.giveUp(ctx, p)
}

// deliver hands p's step its answer: on done, and by waking a Call that sleeps for it in the
// kernel (the handshake, handshake.go). At most once per call (done holds one).
func (p *pending) deliver(a answer) {
	p.done <- a
	p.answered.wake()
}

// giveUp ends the wait of a call whose ctx ended: it returns an answer that won the race, else
// withdraws the call and returns ctx.Err().
func (h *Host) giveUp(ctx context.Context, p *pending) (Result, error) {
	if !p.claim.CompareAndSwap(claimOpen, claimAbandoned) {
		if p.claim.Load() == claimAnswered {
			a := <-p.done // answered concurrently: the answer is on its way
			if a.late {
				return Result{}, p.timeoutErr
			}
			return a.res, a.err
		}
		return Result{}, ctx.Err() // Complete saw the context end first and withdrew the call
	}
	// No lock and no context.Cause here (it takes the context's mutex): a thousand calls of a
	// cancelled run return at the same moment.
	h.abandon(p)
	return Result{NotStarted: !p.pulled.Load()}, ctx.Err()
}

// expiredCall waits, after p's deadline passed while the host ran it, for the host to stop it
// (Cancelled reports true now, so the host interrupts the tool) for at most the interrupt grace.
func (h *Host) expiredCall(ctx context.Context, p *pending) (Result, error) {
	select {
	case a := <-p.done: // answered already: no grace timer
		return p.lateAnswer(a)
	default:
	}
	d := time.Duration(h.grace.Load())
	grace := h.clock.NewTimer(d)
	defer grace.Stop()
	select {
	case a := <-p.done:
		return p.lateAnswer(a)
	case <-ctx.Done():
		return h.giveUp(ctx, p)
	case <-grace.C():
	}
	if !p.claim.CompareAndSwap(claimOpen, claimAbandoned) {
		if p.claim.Load() != claimAnswered {
			// The step gave up meanwhile (a cancel) and Complete withdrew the call: no answer comes.
			return Result{}, ctx.Err()
		}
		return p.lateAnswer(<-p.done) // answered (or handed back) at the last moment
	}
	h.mu.Lock()
	thread := h.pullers[p.puller]
	reason := fmt.Sprintf("%v; abandoned after %s", p.timeoutErr, d)
	if p.state != stateGone {
		h.withdrawLocked(p, reason)
	}
	h.mu.Unlock()
	return Result{}, &AbandonedError{CallID: p.call.ID, Attempt: p.call.Attempt, Tool: p.call.Tool, Thread: thread,
		Puller: p.puller, Grace: d, Err: p.timeoutErr}
}

// lateAnswer is what a Call whose deadline passed returns for the answer a: the timeout (a result
// is dropped), an answer that beat the deadline, or ErrClosed.
func (p *pending) lateAnswer(a answer) (Result, error) {
	switch {
	case !a.late && a.err == nil:
		return a.res, nil // answered in time; the timer fired an instant later
	case errors.Is(a.err, ErrClosed):
		return a.res, a.err
	default:
		return Result{}, p.timeoutErr
	}
}

// expire is p's timer for its pull number gen: the deadline passed. A call still pulled (by
// that pull, not handed back and pulled again since) and unanswered is marked expired
// (Cancelled reports true) and its Call told.
func (h *Host) expire(p *pending, gen uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.gen == gen && p.state == statePulled && !p.expiredFlag.Load() && p.claim.Load() == claimOpen {
		p.expiredFlag.Store(true)
		close(p.expired)
	}
}

// letGoLocked returns the channel closed when the host lets go of the in-flight call p.
func (p *pending) letGoLocked() <-chan struct{} {
	if p.letGo == nil {
		p.letGo = make(chan struct{})
	}
	return p.letGo
}

// releaseLocked records that the host let go of the pulled call p (it answered it, handed it
// back, or its puller closed): it is no longer in flight, and a later call of its step may run.
func (h *Host) releaseLocked(p *pending) {
	if h.inflight[p.call.ID] != p {
		return
	}
	delete(h.inflight, p.call.ID)
	ref := stepRef{p.call.RunID, p.call.StepKey}
	if h.busy[ref] == p {
		delete(h.busy, ref)
	}
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.letGo != nil {
		close(p.letGo)
		p.letGo = nil // pulled again after a hand-back, it gets a new one
	}
}

// InFlight reports whether a call of step instance key of run runID is in flight in the host
// (pulled and not let go of: see Host); the channel is closed when the host lets go of it, and
// thread names the puller's thread ("" when unknown).
func (h *Host) InFlight(runID, key string) (letGo <-chan struct{}, attempt int, thread string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.busy[stepRef{runID, key}]
	if p == nil {
		return nil, 0, "", false
	}
	return p.letGoLocked(), p.call.Attempt, h.pullers[p.puller], true
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
// A pulled p stays in flight (Host.inflight) until the host lets go of it.
func (h *Host) forgetLocked(p *pending, reason string) {
	p.state = stateGone
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
	if !p.pulled.Swap(true) && p.started != nil {
		p.started()
	}
	h.inflight[p.call.ID] = p
	h.busy[stepRef{p.call.RunID, p.call.StepKey}] = p
	if p.timeout > 0 { // the attempt starts now
		p.call.Deadline = h.clock.Now().Add(p.timeout)
		gen := p.gen // a hand-back bumps it: this timer is of this pull only
		p.timer = h.clock.AfterFunc(p.timeout, func() { h.expire(p, gen) })
	}
	return true
}

// popLocked takes up to max queued calls of run runID ("" = any run) from ln for puller, oldest
// first, and marks them pulled.
func (h *Host) popLocked(ln *lane, runID string, max int, puller uint64) []PendingCall {
	if h.held || h.gate != nil && !h.gate() {
		return nil
	}
	var out []PendingCall
	var now int64
	for len(out) < max {
		p := ln.next(runID)
		if p == nil {
			break
		}
		taken := h.takeLocked(p, puller)
		ln.left(p, false)
		if taken {
			if out == nil {
				// p (already off the queue) and what is still queued, at most: a pull asks
				// for up to 8 or 16 calls and mostly gets one, and each slot is 128 bytes to
				// allocate and clear.
				out = make([]PendingCall, 0, min(max, 1+ln.queuedAtMost(runID)))
				now = int64(time.Since(hostEpoch)) | 1
			}
			p.takenAt = now
			out = append(out, p.call)
		}
	}
	if out != nil && puller != 0 {
		ln.lastTake, ln.lastTaker, ln.lastTakerRun = now, puller, runID
	}
	return out
}

// requeueLocked hands the pulled, unanswered call p back to the front of its lane, so the next
// puller gets it first, and wakes a waiting puller. A call whose step has given up is withdrawn
// instead.
func (h *Host) requeueLocked(p *pending) {
	h.releaseLocked(p)
	p.puller = 0
	if p.timeout > 0 {
		p.call.Deadline = time.Time{} // set again when pulled again
		if p.expiredFlag.Load() && p.claim.CompareAndSwap(claimOpen, claimAnswered) {
			// Timed out while held, and handed back unrun: the attempt ends as timed out.
			h.forgetLocked(p, p.timeoutErr.Error())
			p.deliver(answer{err: errNotRun, late: true})
			return
		}
	}
	if p.ctx.Err() != nil || p.claim.Load() != claimOpen {
		h.forgetLocked(p, dropReason(p.ctx))
		return
	}
	p.state = stateQueued
	p.gen++
	h.queueLocked(h.lanes[p.call.Lane], p, true)
}

// queueLocked queues p on ln (at the front when handedBack) and wakes a parked puller for it
// (wakeLocked), unless a new call is likely to be taken soon by the puller that last took calls
// of ln (deferWakeLocked). A call handed back wakes one at once: its puller is busy.
func (h *Host) queueLocked(ln *lane, p *pending, handedBack bool) {
	ln.enqueue(p, handedBack)
	h.queued.Add(1)
	if ln.answeredAt != 0 && !handedBack { // the engine's turnaround, from an answer to this call
		ln.turnAvg += (int64(time.Since(hostEpoch)) - ln.answeredAt - ln.turnAvg) / 8
		ln.answeredAt = 0
	}
	if !handedBack && ln.searching == 0 && len(ln.parked) > 0 && h.deferWakeLocked(ln, p) {
		return
	}
	h.wakeLocked(ln, p)
}

// ErrDropped is the cause of Complete's error for a late result (flowtype.ErrDropped): the
// call is no longer pending (its step was cancelled or timed out, or it was already answered)
// and the result was dropped. Test for it with errors.Is.
var ErrDropped = flowtype.ErrDropped

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
		if q := h.inflight[id]; q != nil {
			h.releaseLocked(q) // the answer of a call its step gave up on: the host let go of it
		}
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
		h.releaseLocked(p)
		return droppedError(id, reason)
	}
	p.state = stateGone
	delete(h.calls, id)
	h.releaseLocked(p)
	if p.expiredFlag.Load() { // after the deadline: the attempt timed out, the result is dropped
		reason := p.timeoutErr.Error()
		h.dropped.add(id, reason)
		p.deliver(answer{res: res, late: true})
		return droppedError(id, reason)
	}
	h.dropped.add(id, "already completed")
	now := int64(time.Since(hostEpoch)) | 1 // | 1: never 0
	h.lastAnswer.Store(now)
	ln := h.lanes[p.call.Lane]
	if p.takenAt != 0 && p.puller != 0 {
		ln.holdAvg += (now - p.takenAt - ln.holdAvg) / 8
	}
	ln.answeredAt = now
	if _, open := h.pullers[p.puller]; open {
		h.answeredBy[p.puller] = now
	}
	p.deliver(answer{res: res})
	return nil
}

// Cancelled reports whether the call's step no longer wants its result: its context ended, or
// the call was answered or withdrawn. Unknown ids report true. Hosts poll it from long tools.
func (h *Host) Cancelled(id uint64) bool {
	h.mu.Lock()
	p, ok := h.calls[id]
	h.mu.Unlock()
	return !ok || p.claim.Load() == claimAbandoned || p.ctx.Err() != nil || p.expiredFlag.Load()
}

// CancelledOf returns those of ids whose calls Cancelled reports true for, in the order given:
// one lock for the calls a host runs at once (its watchdog polls them).
func (h *Host) CancelledOf(ids []uint64) []uint64 {
	out := []uint64{}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		p, ok := h.calls[id]
		if !ok || p.claim.Load() == claimAbandoned || p.ctx.Err() != nil || p.expiredFlag.Load() {
			out = append(out, id)
		}
	}
	return out
}

// Report passes a report of the pulled call id to its step. It returns false, and drops the
// report, when the call is not running: unknown, answered, withdrawn, or cancelled. A call
// whose attempt timed out reports until it stops or is abandoned.
func (h *Host) Report(id uint64, rep Report) bool {
	h.mu.Lock()
	p, ok := h.calls[id]
	running := ok && p.state == statePulled
	h.mu.Unlock()
	if !running || p.claim.Load() != claimOpen || p.ctx.Err() != nil {
		return false // a call that timed out still reports until it stops: its last lines explain it
	}
	if p.reporter != nil {
		p.reporter.Report(rep)
	}
	return true
}

// Hold stops handing out calls, for good: Pull (and the next calls of a Complete) find none,
// and wait as for an empty lane. Calls already pulled are still answered, reported and handed
// back as before. A closing engine holds its host while the calls in flight finish
// (Engine.Close), so that no new call starts on it.
func (h *Host) Hold() {
	h.mu.Lock()
	h.held = true
	h.mu.Unlock()
}

// SetGate makes the host hand out calls only while open reports true; nil (the default) hands
// them out always. An engine on a shared database gates its host on the freshness of its leases
// (cluster.Membership.Fresh): once no heartbeat has renewed them for a whole lease (the process
// was suspended, the database is away), other engines may have taken its runs over and completed
// the steps whose calls are queued here, so a puller that comes back first must not start them.
// Pullers wait as for an empty lane; Reopen wakes them once the gate may be open again. open is
// called with the host's lock held: it must be quick and must not call the host.
func (h *Host) SetGate(open func() bool) {
	h.mu.Lock()
	h.gate = open
	h.mu.Unlock()
}

// Reopen wakes the pullers waiting on every lane, so that they look again at the queued calls
// (the gate of SetGate may be open again).
func (h *Host) Reopen() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ln := range h.lanes {
		for len(ln.parked) > 0 {
			h.wakeWaiterLocked(ln.parked[len(ln.parked)-1])
		}
	}
}

// LetGoOf returns, for each call in flight in the host (pulled and not let go of, whether or
// not its step still waits for it) of a run whose top-level run (a child run's outermost
// ancestor) is in runs, the channel closed when the host lets go of it.
func (h *Host) LetGoOf(runs map[string]bool) []<-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []<-chan struct{}
	for _, p := range h.inflight {
		top := p.call.RunID
		if len(p.ancestors) > 0 {
			top = p.ancestors[0]
		}
		if runs[top] {
			out = append(out, p.letGoLocked())
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
			p.deliver(answer{err: ErrClosed})
		}
	}
	clear(h.calls)
	for _, p := range h.inflight {
		h.releaseLocked(p)
	}
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
