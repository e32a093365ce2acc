package tools

import (
	"sync/atomic"
	"time"
)

// The handshake of a sequential host step (docs/design/performance.md, "The sequential step's
// thread switches"). A host thread answering a run's steps one after another is a cgo callback,
// locked to its OS thread; the run's goroutine cannot run on that thread. Parking the callback
// for the next call and waking it again cost two thread switches through the Go scheduler and
// two more threads woken for nothing each step (4–6× the floor of a locked-thread round trip).
// Where the kernel has a futex (handshakes), the two sides meet halfway instead:
//
//   - the Pull of the main lane by a host thread (PullRequest.LockedThread) that just answered
//     spins without yielding for up to busySpin, watching Host.queued, and takes the next call
//     the moment it is queued: no wake-up of the host thread;
//   - the Call that queued that call, seeing the lane's puller spin (lane.spinning), waits for
//     the answer on pending.answered for up to maxHandshake, when the lane's calls are answered
//     within half of that on average: it spins for the first answerSpin (a quick tool's answer
//     then costs neither side a system call nor a wake-up), then sleeps in a futex, which
//     Complete's futex wake ends directly: its thread goes on with the processor it kept,
//     without the scheduler's hand-off between the locked thread and another. After the wait,
//     answered or not, it waits as before (its context, the time-out, the engine's close), so a
//     cancel is seen at most maxHandshake late.
//
// The spins trade CPU for latency, and only while a run goes step after step on a host thread:
// at most busySpin after each answer on the host's side, answerSpin per call on the engine's.
// One Call of a lane sleeps at a time (lane.sleeper): a fan-out's items wait as before. And the
// host thread spins only while the lane's calls are answered, and the engine turns an answer
// into the next call, within half of these bounds on average (lane.quickTurns): a tool of
// milliseconds, or a step whose record waits for a database server, gains nothing from a spin.
const (
	busySpin     = 300 * time.Microsecond
	maxHandshake = time.Millisecond
	answerSpin   = 50 * time.Microsecond
)

// quickTurns reports whether ln's calls are answered within maxHandshake/2 and the engine queues
// the next call within busySpin/2 of an answer, on average (no average yet counts as quick).
func (ln *lane) quickTurns() bool {
	return time.Duration(ln.holdAvg) <= maxHandshake/2 && time.Duration(ln.turnAvg) <= busySpin/2
}

// handshakeLocked returns how long the Call that just queued a call on ln may sleep for its
// answer in the kernel (0: not at all), and marks ln's sleeper taken when it may.
func (h *Host) handshakeLocked(ln *lane) time.Duration {
	if !handshakes || ln.spinning == 0 || !ln.quickTurns() || !ln.sleeper.CompareAndSwap(false, true) {
		return 0
	}
	return maxHandshake
}

// awaitHandshake sleeps for p's answer for up to d (handshakeLocked's), then lets ln's sleeper go.
func (h *Host) awaitHandshake(ln *lane, p *pending, d time.Duration) {
	h.handshakeSleeps.Add(1)
	if p.answered.sleep(d, answerSpin) {
		h.handshakesWoken.Add(1)
	}
	ln.sleeper.Store(false)
}

// spinForQueued spins without yielding until a call is queued (Host.queued moves from seq) or d
// elapses.
func spinForQueued(queued *atomic.Uint64, seq uint64, d time.Duration) {
	start := time.Now()
	for i := 1; queued.Load() == seq; i++ {
		if i%64 == 0 && time.Since(start) >= d {
			return
		}
	}
}
