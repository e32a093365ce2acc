package tools

import (
	"math/bits"
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
//
// Nor does a spin pay when the processors are busy with other work (another process, a DCC's
// own threads): the engine's thread that would queue the next call then waits for the processor
// the spinning thread holds, and a step took 85–140 µs where parking takes 25 (2 vCPUs, one
// held by a busy loop). So the host thread also stops spinning once 6 of the lane's last 8
// spins waited more than slowSpin for their call (lane.spinPaysLocked), and tries again after
// 16 pulls, then after 32, 64, … up to 1,024 while the tries fail. A try is probeSpins spins in
// a row: the first only puts the engine's side back into the handshake (its Call sleeps in the
// kernel only while the host thread spins), so it is slow on any machine, and the try succeeds
// when the others were all quick.
const (
	busySpin     = 300 * time.Microsecond
	maxHandshake = time.Millisecond
	answerSpin   = 50 * time.Microsecond
	// slowSpin is the longest wait of a busy spin that counts as quick: on an idle machine the
	// engine queues the next call 5–15 µs after the answer.
	slowSpin = 50 * time.Microsecond
	// probeSpins is how many spins in a row a try makes; firstProbe and lastProbe bound how
	// many pulls a lane leaves out between two tries.
	probeSpins = 4
	// stopAfterSlow is how many of the lane's last 8 spins must have been slow to stop them:
	// an idle machine has a slow one now and then (0.5–1%, a few in a row at a collection).
	stopAfterSlow = 6
	firstProbe    = 16
	lastProbe     = 1024
)

// spinPaysLocked reports whether a host thread's Pull of ln may spin without yielding for the
// next call: yes while fewer than stopAfterSlow of the lane's last 8 spins were slow, or while
// a try is under way; otherwise only when a try is due (lane.probeEvery pulls after the last).
// Under Host.mu.
func (ln *lane) spinPaysLocked() bool {
	if ln.probeLeft > 0 || bits.OnesCount8(ln.spinHistory) < stopAfterSlow {
		return true
	}
	if ln.spinSkips++; ln.spinSkips < ln.probeEvery {
		return false
	}
	ln.spinSkips, ln.probeLeft, ln.spinHistory = 0, probeSpins, 0
	return true
}

// spunLocked records a busy spin of ln that waited d for its call (d ≥ busySpin: none came).
// At the end of a try, spins go on when all but its first were quick (the history is the
// try's: one slow spin of 8); otherwise they stop again, and the next try waits twice as
// long. Under Host.mu.
func (ln *lane) spunLocked(d time.Duration) {
	ln.spinHistory <<= 1
	if d > slowSpin {
		ln.spinHistory |= 1
	}
	if ln.probeLeft == 0 {
		return
	}
	if ln.probeLeft--; ln.probeLeft > 0 {
		return
	}
	if ln.spinHistory&(1<<(probeSpins-1)-1) == 0 {
		ln.probeEvery = firstProbe
		return
	}
	ln.probeEvery = min(2*ln.probeEvery, lastProbe)
	ln.spinHistory = 0xff // stopped again
}

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
// elapses, and returns how long it spun.
func spinForQueued(queued *atomic.Uint64, seq uint64, d time.Duration) time.Duration {
	start := time.Now()
	for i := 1; queued.Load() == seq; i++ {
		if i%64 == 0 {
			if el := time.Since(start); el >= d {
				return el
			}
		}
	}
	return time.Since(start)
}
