package tools

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// maxSpins is how many times Pull yields the processor, checking for a call, before it blocks.
// Measured from Python on 2 vCPUs: 300 yields beat parking at once (about 100 vs 110 µs per
// sequential step) and a busy wait without yielding (135+ µs).
const maxSpins = 300

// spinWindow is how recent the puller's own last answer (any answer, for puller 0) must be for
// Pull to spin before it blocks (Host.spinForLocked):
// the spin pays off only while a run is going step after step (the engine queues the next call
// a few microseconds after an answer). An idle host parks at once: a Pull from a host thread
// is a cgo callback, locked to its OS thread, so every yield there hands the processor to
// another thread and back; 300 of them on each 100 ms idle poll cost an idle `dcc-flow serve`
// 17% of a core (20,000 futex calls a second) before this window.
const spinWindow = 5 * time.Millisecond

// PullRequest selects the calls Pull hands out (flowtype.PullRequest).
type PullRequest = flowtype.PullRequest

// Pull hands out up to req.Max queued calls of req.Lanes (the first lane first), optionally of
// one run only, and marks them pulled (by req.Puller, if any): it returns as soon as at least
// one matching call is queued, or with none once Timeout elapses, ctx ends or Stop is closed.
// Errors: an unknown lane (code invalid_request), a closed host (code closed).
//
// Wake-ups: a call queued wakes one parked puller that would take it, and none while a puller
// of any run is searching its lane (lane.searching); a puller that leaves Pull while calls it
// could have taken are still queued (it took its Max, its wait ended, ctx or Stop ended it)
// wakes the next parked one (handOnLocked), so no call waits for a puller that was not woken.
// At most one puller spins at a time (Host.spinning): the others park at once.
func (h *Host) Pull(ctx context.Context, req PullRequest) ([]PendingCall, error) {
	names := req.Lanes
	if len(names) == 0 {
		names = []string{LaneMain}
	}
	max := req.Max
	if max <= 0 {
		max = 1
	}
	timeout := req.Timeout
	spins := 0
	busy := false // spin without yielding, once, for a sequential step's handshake (handshake.go)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	h.mu.Lock()
	if !h.spinForLocked(req.Puller) {
		spins = maxSpins // idle: park at once
	}
	var laneBuf [2]*lane // no allocation: only two lanes exist
	lanes := laneBuf[:0]
	for _, name := range names {
		ln := h.lanes[name]
		if ln == nil {
			h.mu.Unlock()
			return nil, run.Errorf(run.CodeInvalidRequest, "unknown lane %q; use %q or %q", name, LaneMain, LaneWorker)
		}
		if !slices.Contains(lanes, ln) { // a repeated name is looked at once
			lanes = append(lanes, ln)
		}
	}
	anyRun := req.RunID == ""
	h.searchingLocked(lanes, anyRun, 1)
	for _, ln := range lanes {
		if req.Puller != 0 && ln.lastTaker == req.Puller {
			ln.lastTake = 0 // back for more: its calls no longer keep a puller from being woken
		}
		if ln == h.lanes[LaneMain] {
			busy = handshakes && req.LockedThread && spins < maxSpins && ln.quickTurns() && (h.spinAlways || ln.spinPaysLocked())
		}
	}
	spinning := false // this Pull counts in h.spinning (and, busy, in its lanes' spinning)
	stopSpinning := func() {
		spinning = false
		h.spinning--
		if busy {
			for _, ln := range lanes {
				ln.spinning--
			}
		}
	}
	// leave ends the Pull (h.mu held, and released): it stops searching and hands the wake-up on.
	leave := func(out []PendingCall, err error) ([]PendingCall, error) {
		if spinning {
			stopSpinning()
		}
		h.searchingLocked(lanes, anyRun, -1)
		h.handOnLocked(lanes)
		h.mu.Unlock()
		return out, err
	}
	for {
		if h.closed {
			return leave(nil, run.Errorf(run.CodeClosed, "the engine is closed"))
		}
		if err := h.checkPullerLocked(req.Puller); err != nil {
			return leave(nil, err)
		}
		h.drainLocked()
		var out []PendingCall
		for _, ln := range lanes {
			if h.leaveToTakerLocked(ln, req) {
				continue
			}
			if got := h.popLocked(ln, req.RunID, max-len(out), req.Puller); out == nil {
				out = got // the one lane's calls: no second copy
			} else {
				out = append(out, got...)
			}
			if len(out) >= max {
				break
			}
		}
		if len(out) > 0 {
			return leave(out, nil)
		}
		stopped := false
		if req.Stop != nil {
			select {
			case <-req.Stop:
				stopped = true
			default:
			}
		}
		if timeout <= 0 || ctx.Err() != nil || stopped {
			return leave(nil, nil)
		}
		if spins < maxSpins && (spinning || h.spinning == 0) {
			// A host answering a call usually makes the engine queue the next one within a few
			// microseconds: yield a little before parking, which saves a thread wake-up. One
			// puller at a time: the yields of a host thread are thread hand-offs (a cgo
			// callback is locked to its thread), and the one spinning takes what is queued.
			if !spinning {
				spinning = true
				h.spinning++
				if busy {
					for _, ln := range lanes {
						ln.spinning++
					}
				}
			}
			spins++
			h.yields.Add(1)
			if busy {
				// The handshake: the Call of the run's next step sleeps in the kernel while this
				// spins, and the call is taken the moment it is queued. One spin, then park.
				spins = maxSpins
				seq := h.queued.Load()
				h.mu.Unlock()
				h.busySpins.Add(1)
				spun := spinForQueued(&h.queued, seq, busySpin)
				h.mu.Lock()
				h.lanes[LaneMain].spunLocked(spun)
				continue
			}
			h.mu.Unlock()
			runtime.Gosched()
			h.mu.Lock()
			continue
		}
		if spinning {
			stopSpinning()
		}
		// Park on every lane until woken for a call, or the wait ends.
		w := &waiter{wake: make(chan struct{}, 1), runID: req.RunID, lanes: slices.Clone(lanes), puller: req.Puller}
		for _, ln := range lanes {
			ln.parked = append(ln.parked, w)
		}
		h.searchingLocked(lanes, anyRun, -1)
		h.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(timeout)
		}
		expired := false
		select {
		case <-w.wake:
		case <-req.Stop:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
			expired = true
		case <-h.closeCh:
		}
		h.mu.Lock()
		if !w.woken { // woken, it searches already (wakeWaiterLocked)
			for _, ln := range lanes {
				ln.unpark(w)
			}
			h.searchingLocked(lanes, anyRun, 1)
		}
		if expired {
			timeout = 0 // one last poll, then return
		}
	}
}

// searchingLocked adds d to the searching count of each of lanes, for a Pull of any run.
func (h *Host) searchingLocked(lanes []*lane, anyRun bool, d int) {
	if !anyRun {
		return
	}
	for _, ln := range lanes {
		ln.searching += d
	}
}

// wakeLocked wakes one puller parked on ln that would take the queued call p (p nil: any
// call queued on ln), the lane's last taker first, then the most recently parked, unless a
// puller of any run searches ln (it takes the call).
func (h *Host) wakeLocked(ln *lane, p *pending) {
	if ln.searching > 0 {
		return
	}
	var pick *waiter
	for i := len(ln.parked) - 1; i >= 0; i-- {
		if w := ln.parked[i]; w.wants(ln, p) {
			if w.puller != 0 && w.puller == ln.lastTaker {
				pick = w // the lane's last taker: its thread ran the lane's calls last
				break
			}
			if pick == nil {
				pick = w
			}
		}
	}
	if pick != nil {
		h.wakeWaiterLocked(pick)
	}
}

// wakeWaiterLocked wakes the parked puller w: it leaves every lane's parked list and searches
// them from now on.
func (h *Host) wakeWaiterLocked(w *waiter) {
	w.woken = true
	for _, ln := range w.lanes {
		ln.unpark(w)
		if w.runID == "" {
			ln.searching++
		}
	}
	w.wake <- struct{}{}
}

// Deferred wake-ups: a host thread that took calls of a lane and answers them quickly comes
// back for the calls queued meanwhile (the engine queues the next items of a fan-out as the
// answers arrive). Waking a parked thread for them instead costs a thread wake-up, and in
// Python two threads then take turns at the interpreter lock: the 4-thread fan-out of trivial
// calls ran at half the speed of one thread. So while the last taker is expected back (within
// twice the lane's average hold, plus deferSlack, of its take), and the lane's holds are quick
// (≤ maxDeferHold), a queued call it would take wakes nobody at once: a timer wakes a parked
// puller at that point if the calls are still queued and nobody searches the lane. Slow calls (a render, a blocking lookup) wake
// a parked puller at once, as do calls handed back (their puller is busy).
const (
	maxDeferHold = time.Millisecond
	deferSlack   = 50 * time.Microsecond
)

// takerDue returns when ln's last taker is due back, in nanoseconds since hostEpoch (twice the
// lane's average hold, plus deferSlack, after its last take), and whether calls queued at now wait
// for it: it took calls (and has not come back for more with a wait since), the lane's holds are
// quick (≤ maxDeferHold), and that time has not come.
func (ln *lane) takerDue(now int64) (int64, bool) {
	hold := ln.holdAvg
	if ln.lastTake == 0 || hold <= 0 || hold > int64(maxDeferHold) {
		return 0, false
	}
	until := ln.lastTake + 2*hold + int64(deferSlack)
	return until, now < until
}

// deferWakeLocked reports whether the wake-up for the call p queued on ln waits for ln's last
// taker (see above; a taker pulling for another run than p's would not take it), arming ln's
// timer when it does.
func (h *Host) deferWakeLocked(ln *lane, p *pending) bool {
	if ln.lastTakerRun != "" && !p.ofRun(ln.lastTakerRun) {
		return false
	}
	return h.waitForTakerLocked(ln)
}

// leaveToTakerLocked reports whether a Pull for req should leave the calls queued on ln to the
// lane's last taker, due back soon (takerDue), as if the lane were empty: a puller of any run
// that is not the taker (an idle serve_tools thread whose wait ended) would otherwise take them,
// and two Python threads would then take turns at the interpreter lock for the rest of the
// fan-out. The lane's timer (armed here) hands the calls on to a parked puller if the taker is
// not back by then, so a call waits at most about 2 × maxDeferHold + deferSlack for it. A call
// handed back (at the front of the lane) is taken at once: its puller was busy.
func (h *Host) leaveToTakerLocked(ln *lane, req PullRequest) bool {
	if req.RunID != "" || req.Puller == 0 || req.Puller == ln.lastTaker || ln.lastTakerRun != "" {
		return false
	}
	if p := ln.next(""); p == nil || p.gen > 0 {
		return false
	}
	return h.waitForTakerLocked(ln)
}

// waitForTakerLocked reports whether ln's last taker is due back (takerDue), arming ln's timer
// for the moment it is overdue when it is.
func (h *Host) waitForTakerLocked(ln *lane) bool {
	now := int64(time.Since(hostEpoch))
	until, due := ln.takerDue(now)
	if due {
		h.armDeferLocked(ln, time.Duration(until-now))
	}
	return due
}

// armDeferLocked arms ln's timer to hand the lane's queued calls on in d (deferEnded), unless it
// is armed already.
func (h *Host) armDeferLocked(ln *lane, d time.Duration) {
	if ln.deferred {
		return
	}
	ln.deferred = true
	if ln.deferTimer == nil {
		ln.deferTimer = time.AfterFunc(d, func() { h.deferEnded(ln) })
	} else {
		ln.deferTimer.Reset(d)
	}
}

// deferEnded is ln's timer: with no call queued it stops (the taker took them); when the last
// taker (one that takes any run's calls) took calls again meanwhile, it waits for it again, from
// that take on; else it wakes a parked puller for the calls still queued. So it fires about
// once per wait of a call, not every window while a fan-out runs.
func (h *Host) deferEnded(ln *lane) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ln.next("") == nil {
		ln.deferred = false
		return
	}
	now := int64(time.Since(hostEpoch))
	if until, due := ln.takerDue(now); due && ln.lastTakerRun == "" {
		ln.deferTimer.Reset(time.Duration(until - now))
		return
	}
	ln.deferred = false
	h.handOnLocked([]*lane{ln})
}

// handOnLocked is called by a Pull that leaves: for each of its lanes that still has calls
// queued that can be handed out, and no puller searching it, it wakes a parked puller that
// would take one. So a wake-up is never lost: a puller woken for a call (or searching when it
// was queued) that leaves without it (it took its Max, its wait ended, its run filter, Stop)
// hands it on.
func (h *Host) handOnLocked(lanes []*lane) {
	for _, ln := range lanes {
		if ln.searching > 0 || len(ln.parked) == 0 || ln.deferred || ln.next("") == nil {
			continue // (deferred: the lane's timer hands its calls on when their taker is late)
		}
		if h.held || h.closed || h.gate != nil && !h.gate() {
			return // nothing can be handed out: Reopen wakes them
		}
		h.wakeLocked(ln, nil)
	}
}

// OpenPuller returns a new puller id for PullRequest.Puller: a host thread that takes calls.
// name is the thread's name ("MainThread"), used in messages about the calls it runs ("" =
// none). Errors: a closed host (code closed).
func (h *Host) OpenPuller(name string) (uint64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return 0, run.Errorf(run.CodeClosed, "the engine is closed")
	}
	h.nextPuller++
	h.pullers[h.nextPuller] = name
	return h.nextPuller, nil
}

// ClosePuller hands back every call puller holds (see Release) and forgets the puller; it
// returns how many calls went back to their lanes. Closing an unknown or closed puller, or
// puller 0, returns 0.
func (h *Host) ClosePuller(puller uint64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.pullers[puller]; !ok {
		return 0
	}
	delete(h.pullers, puller)
	delete(h.answeredBy, puller)
	h.notBackSoonLocked(puller)
	var held []*pending
	for _, p := range h.inflight {
		if p.puller != puller {
			continue
		}
		if p.state == statePulled {
			held = append(held, p)
		} else {
			h.releaseLocked(p) // given up on by its step: the thread that ran it has ended
		}
	}
	h.requeueAllLocked(held)
	return len(held)
}

// Release hands back calls that puller pulled and has not answered or started: each goes back
// to the front of its lane, to be pulled again, or is withdrawn if its step has given up on it
// meanwhile. Ids that puller does not hold (answered, withdrawn, held by another puller,
// unknown) are skipped: a call is never handed out twice at once. A call its step gave up on
// meanwhile is withdrawn and counted as handed back. It returns how many calls were handed
// back. Errors: a puller that is not open (code not_found).
func (h *Host) Release(puller uint64, ids []uint64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.checkPullerLocked(puller); err != nil {
		return 0, err
	}
	h.drainLocked()
	h.notBackSoonLocked(puller)
	var held []*pending
	n := 0
	for _, id := range ids {
		p, ok := h.inflight[id]
		if !ok || p.puller != puller {
			continue
		}
		n++
		if p.state == statePulled {
			held = append(held, p)
			p.puller = 0 // a repeated id is handed back once
		} else {
			h.releaseLocked(p) // its step gave up on it: it is withdrawn, and no longer in flight
		}
	}
	h.requeueAllLocked(held)
	return n, nil
}

// notBackSoonLocked ends puller's expected return to the lanes it last took calls of (takerDue):
// a puller that closes, or hands calls back (a slow batch, a blocked tool), is not back soon,
// and the calls queued meanwhile go to the pullers waiting for them at once.
func (h *Host) notBackSoonLocked(puller uint64) {
	for _, ln := range h.lanes {
		if ln.lastTaker == puller {
			ln.lastTake = 0
		}
	}
}

// requeueAllLocked hands calls back to the front of their lanes in the order they were first
// queued (call ids grow with it), so a handed-back batch is pulled again in its order.
func (h *Host) requeueAllLocked(ps []*pending) {
	slices.SortFunc(ps, func(a, b *pending) int { return cmp.Compare(b.call.ID, a.call.ID) })
	for _, p := range ps {
		h.requeueLocked(p)
	}
}

// checkPullerLocked fails with not_found unless puller is 0 or open.
func (h *Host) checkPullerLocked(puller uint64) error {
	if puller == 0 {
		return nil
	}
	if _, ok := h.pullers[puller]; !ok {
		return &run.Error{Code: run.CodeNotFound, Message: fmt.Sprintf("no open puller %d: open one with dccflow_puller_open", puller),
			Details: map[string]any{"puller": puller}}
	}
	return nil
}
