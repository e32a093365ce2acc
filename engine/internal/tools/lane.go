package tools

import (
	"slices"
	"sync/atomic"
	"time"
)

// lane is the queue of one lane's calls. Calls are kept twice, in the order they were queued:
// in all (for pulls of any run) and in byRun (for pulls of one run), so either pull takes the
// oldest matching call in time independent of how many other runs have calls queued.
//
// Entries are deleted lazily: a call taken, withdrawn or handed back leaves dead entries (see
// slot.live) that the queues drop when they reach the head, or all at once when dead entries
// make up most of all (compact).
//
// Pullers of a lane are either searching (in Pull and about to look at the queue: spinning,
// or woken and not yet looking) or parked (blocked in Pull, in parked). A call queued wakes
// one parked puller that may take it, and only when no puller of any run is searching the
// lane (the searcher takes it); see Host.handOnLocked for the hand-on that keeps a wake-up from
// being lost, and Host.deferWakeLocked for a wake-up that waits for a quick taker.
type lane struct {
	all   fifo
	dead  int              // dead entries in all
	byRun map[string]*fifo // live or dead entries by run id; a run without entries has none
	// parked are the pullers blocked in Pull on this lane, the most recently parked last (woken
	// first after the lane's last taker, lastTaker: their threads are the likeliest to be warm).
	parked []*waiter
	// searching counts the pullers of any run (PullRequest.RunID "") in Pull on this lane that
	// are not parked: each will look at the queue again before it parks or leaves.
	searching int
	// lastTake is when an open puller, lastTaker, last took calls of this lane (pulling for run
	// lastTakerRun, "" = any), in nanoseconds since hostEpoch; 0 once that puller pulls again (it
	// is no longer busy with them).
	lastTake     int64
	lastTaker    uint64
	lastTakerRun string
	// holdAvg is a moving average of how long pullers hold a call of this lane, from the pull to
	// its answer, in nanoseconds (0: none answered yet): Host.deferWakeLocked.
	holdAvg int64
	// deferred is set while deferTimer is armed to wake a parked puller for calls queued while
	// the last taker was expected back (Host.deferWakeLocked).
	deferred   bool
	deferTimer *time.Timer
	// spinning counts the Pulls of this lane spinning without yielding for the next call (under
	// Host.mu), and sleeper is set while a Call of this lane sleeps for its answer in the kernel:
	// the handshake (handshake.go).
	spinning int
	sleeper  atomic.Bool
	// turnAvg is a moving average of the engine's turnaround on this lane, from an answer to the
	// next call queued, in nanoseconds (answeredAt: the last answer's time, 0 once a call was
	// queued after it); a host thread spins for the next call only while it is short
	// (handshake.go). Under Host.mu.
	turnAvg    int64
	answeredAt int64
	// spinHistory holds the outcome of the lane's last 8 busy spins, the newest in bit 0: a bit
	// set for a spin that waited more than slowSpin for its call. While spins are stopped,
	// spinSkips counts the pulls since the last try, probeEvery how many to leave out before the
	// next, and probeLeft the spins left in a try under way (handshake.go,
	// lane.spinPaysLocked). Under Host.mu.
	spinHistory uint8
	spinSkips   int
	probeEvery  int
	probeLeft   int
}

func newLane() *lane {
	return &lane{byRun: map[string]*fifo{}, probeEvery: firstProbe}
}

// waiter is a puller parked in Pull, on each lane of lanes (at most two).
type waiter struct {
	wake  chan struct{} // buffered 1: receives the one wake-up
	runID string        // the run it pulls for ("" = any)
	lanes []*lane
	woken bool // under Host.mu: woken (and taken off every lane's parked list)
	// puller is the Pull's PullRequest.Puller (0: none): the lane's last taker is woken first.
	puller uint64
}

// wants reports whether w would take a call of p's run (or, p nil, whether it pulls for any
// run or for a run with a call queued on ln).
func (w *waiter) wants(ln *lane, p *pending) bool {
	if w.runID == "" {
		return true
	}
	if p == nil {
		return ln.next(w.runID) != nil
	}
	return p.ofRun(w.runID)
}

// ofRun reports whether p is a call of run id or of a run below it (Call.Ancestors).
func (p *pending) ofRun(id string) bool {
	if p.call.RunID == id {
		return true
	}
	return slices.Contains(p.ancestors, id)
}

// unpark takes w off ln's parked list (if it is on it).
func (ln *lane) unpark(w *waiter) {
	for i, x := range ln.parked {
		if x == w {
			copy(ln.parked[i:], ln.parked[i+1:])
			ln.parked[len(ln.parked)-1] = nil
			ln.parked = ln.parked[:len(ln.parked)-1]
			return
		}
	}
}

// slot is a queue entry: live while its call is queued under the generation it was queued with
// (a call handed back is queued again under the next generation, so its old entries stay dead).
type slot struct {
	p   *pending
	gen uint32
}

func (s slot) live() bool { return s.p != nil && s.p.state == stateQueued && s.p.gen == s.gen }

// fifo is a queue of slots from head.
type fifo struct {
	s    []slot
	head int
}

func (f *fifo) push(p *pending) { f.s = append(f.s, slot{p, p.gen}) }

func (f *fifo) pushFront(p *pending) {
	if f.head > 0 {
		f.head--
		f.s[f.head] = slot{p, p.gen}
		return
	}
	f.s = append(f.s, slot{})
	copy(f.s[1:], f.s)
	f.s[0] = slot{p, p.gen}
}

// trim drops the dead entries at the head and returns how many it dropped; the fifo is empty
// when front returns nil.
func (f *fifo) trim() int {
	n := 0
	for f.head < len(f.s) && !f.s[f.head].live() {
		f.s[f.head] = slot{}
		f.head++
		n++
	}
	if f.head == len(f.s) {
		f.s, f.head = f.s[:0], 0
	} else if f.head > 64 && f.head*2 > len(f.s) { // give the dropped prefix back
		k := copy(f.s, f.s[f.head:])
		clear(f.s[k:])
		f.s, f.head = f.s[:k], 0
	}
	return n
}

// front returns the first live call after trim, or nil.
func (f *fifo) front() *pending {
	if f.head < len(f.s) {
		return f.s[f.head].p
	}
	return nil
}

// enqueue adds p at the back (handedBack false) or the front (true) of the lane: in all, and
// in byRun under its run and under each run above it (Call.Ancestors: a sub-workflow's call is
// also a call of its parent run, for a host thread that drives the parent). The caller wakes a
// puller (Host.wakeLocked).
func (ln *lane) enqueue(p *pending, handedBack bool) {
	if handedBack {
		ln.all.pushFront(p)
	} else {
		ln.all.push(p)
	}
	p.eachRun(func(id string) {
		rq := ln.byRun[id]
		if rq == nil {
			rq = &fifo{}
			ln.byRun[id] = rq
		}
		if handedBack {
			rq.pushFront(p)
		} else {
			rq.push(p)
		}
	})
}

// left records that the queued call p has left the queue (taken, withdrawn): its entries are
// dead now. It drops dead heads, forgets a run without entries and, when compact is true and
// dead entries make up most of the queue, rebuilds it.
func (ln *lane) left(p *pending, compact bool) {
	ln.dead++
	ln.dead -= ln.all.trim()
	p.eachRun(func(id string) {
		if rq := ln.byRun[id]; rq != nil {
			if rq.trim(); rq.front() == nil {
				delete(ln.byRun, id)
			}
		}
	})
	if compact && ln.dead > 64 && ln.dead*2 > len(ln.all.s)-ln.all.head {
		live := ln.all.s[:0]
		for _, s := range ln.all.s[ln.all.head:] {
			if s.live() {
				live = append(live, s)
			}
		}
		clear(ln.all.s[len(live):])
		ln.all.s, ln.all.head, ln.dead = live, 0, 0
	}
}

// queuedAtMost returns a bound on how many calls of run runID ("" = any) are queued on ln: the
// entries of its queue, dead ones included (0 when the run has none).
func (ln *lane) queuedAtMost(runID string) int {
	f := &ln.all
	if runID != "" {
		if f = ln.byRun[runID]; f == nil {
			return 0
		}
	}
	return len(f.s) - f.head
}

// next returns the oldest queued call of run runID ("" = any run), or nil.
func (ln *lane) next(runID string) *pending {
	if runID == "" {
		ln.dead -= ln.all.trim()
		return ln.all.front()
	}
	rq := ln.byRun[runID]
	if rq == nil {
		return nil
	}
	rq.trim()
	return rq.front()
}
