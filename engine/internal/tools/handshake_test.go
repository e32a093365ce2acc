package tools

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// answerInTurn answers n calls of run "r" on the main lane one after another, as a Python thread
// driving a run does: each answer, then a Pull of the next, from a goroutine locked to its
// thread (a cgo callback's) when locked. It returns the first error.
func answerInTurn(h *Host, n int, locked bool) error {
	done := make(chan error, 1)
	go func() {
		if locked {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		puller, err := h.OpenPuller("")
		if err != nil {
			done <- err
			return
		}
		defer h.ClosePuller(puller)
		pull := PullRequest{Lanes: []string{LaneMain}, RunID: "r", Timeout: 5 * time.Second, Puller: puller, LockedThread: locked}
		for i := range n {
			calls, err := h.Pull(context.Background(), pull)
			if err != nil || len(calls) != 1 {
				done <- fmt.Errorf("pull %d: %v %v", i, calls, err)
				return
			}
			if err := h.Complete(calls[0].ID, Result{Output: calls[0].StepKey}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	return <-done
}

// stepsInTurn makes the n calls of run "r" on h's main lane one after another, each after
// before(i) (the engine's own work between an answer and the next call), while a host thread
// locked to its OS thread answers them (answerInTurn).
func stepsInTurn(t *testing.T, h *Host, n int, before func(i int)) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- answerInTurn(h, n, true) }()
	for i := range n {
		before(i)
		if _, err := h.Call(context.Background(), LaneMain, Call{RunID: "r", StepKey: fmt.Sprint("s", i), Tool: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A run's steps answered one after another by a host thread locked to its OS thread meet it
// halfway (handshake.go): the run's Call sleeps for each answer in the kernel and is woken by it
// (where a futex allows). An ordinary goroutine's Pull, or a system without one, leaves every
// Call waiting as before. Every answer reaches its Call either way.
func TestSequentialStepsOfALockedHostThreadHandshake(t *testing.T) {
	for _, locked := range []bool{true, false} {
		t.Run(fmt.Sprint("locked=", locked), func(t *testing.T) {
			h := NewHost()
			defer h.Close()
			h.spinAlways = true // on a busy machine its slow spins would stop them
			const steps = 200
			errc := make(chan error, 1)
			go func() { errc <- answerInTurn(h, steps, locked) }()
			for i := range steps {
				key := fmt.Sprint("s", i)
				res, err := h.Call(context.Background(), LaneMain, Call{RunID: "r", StepKey: key, Tool: "t"})
				if err != nil || res.Output != key {
					t.Fatalf("step %d: %+v %v", i, res, err)
				}
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			woken := h.handshakesWoken.Load()
			switch {
			case !locked || !handshakes:
				if woken != 0 {
					t.Fatalf("%d Calls slept for their answer without a locked host thread spinning", woken)
				}
			case woken == 0: // a loaded machine's slow turnarounds turn the spin off (lane.quickTurns) for some steps
				t.Fatalf("none of %d steps was woken by its answer in the handshake", steps)
			}
		})
	}
}

// A Call sleeping for its answer in the handshake still ends with its context: cancelled while
// the host thread holds its call, it returns within the sleep's bound (maxHandshake) of the
// cancel, and the late answer is dropped.
func TestACancelEndsACallSleepingInTheHandshake(t *testing.T) {
	if !handshakes {
		t.Skip("no handshake on " + runtime.GOOS + ": Calls wait as before (the other tests)")
	}
	// The kept step's Call sleeps only if it is queued while the host thread still spins
	// (busySpin): on a loaded machine a try can miss that, so up to 20 tries.
	for try := 0; try < 20; try++ {
		if cancelASleepingCall(t) {
			return
		}
	}
	t.Fatal("in 20 tries, the kept step's Call never slept in the handshake")
}

// cancelASleepingCall runs one try of TestACancelEndsACallSleepingInTheHandshake: false when
// the kept step's Call did not sleep (nothing was checked).
func cancelASleepingCall(t *testing.T) bool {
	h := NewHost()
	defer h.Close()
	h.spinAlways = true // on a busy machine its slow spins would stop them
	// One locked host thread answers 20 quick steps, then takes the 21st and keeps it.
	const quick = 20
	pulled := make(chan PendingCall, 1)
	go func() {
		defer close(pulled)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		puller, _ := h.OpenPuller("")
		pull := PullRequest{Lanes: []string{LaneMain}, RunID: "r", Timeout: 5 * time.Second, Puller: puller, LockedThread: true}
		for i := 0; ; i++ {
			calls, err := h.Pull(context.Background(), pull)
			if err != nil || len(calls) != 1 {
				return
			}
			if i == quick {
				pulled <- calls[0]
				return
			}
			if err := h.Complete(calls[0].ID, Result{Output: "ok"}); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		err error
		at  time.Time
	}
	ended := make(chan result, 1)
	for i := range quick {
		if _, err := h.Call(context.Background(), LaneMain, Call{RunID: "r", StepKey: fmt.Sprint("w", i), Tool: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	sleeps := h.handshakeSleeps.Load()
	go func() {
		_, err := h.Call(ctx, LaneMain, Call{RunID: "r", StepKey: "kept", Tool: "t"})
		ended <- result{err, time.Now()}
	}()
	call, ok := <-pulled
	if !ok {
		t.Fatal("the call was not pulled")
	}
	if h.handshakeSleeps.Load() == sleeps {
		cancel()
		<-ended
		return false
	}
	cancelled := time.Now()
	cancel()
	select {
	case r := <-ended:
		if !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Call returned %v", r.err)
		}
		if d := r.at.Sub(cancelled); d > maxHandshake+200*time.Millisecond {
			t.Fatalf("the Call returned %v after its cancel", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancelled Call did not return")
	}
	if err := h.Complete(call.ID, Result{Output: "late"}); !errors.Is(err, ErrDropped) {
		t.Fatalf("the late answer: %v", err)
	}
	return true
}

// A host thread does not spin for the next call while the engine is slow to queue it (a step
// that waits for a database server between two calls): the spin would only burn a core.
func TestNoHandshakeWhileTheEngineTurnsSlowly(t *testing.T) {
	if !handshakes {
		t.Skip("no handshake on " + runtime.GOOS)
	}
	h := NewHost()
	defer h.Close()
	const steps = 40
	var late int64
	stepsInTurn(t, h, steps, func(i int) {
		if i == steps/2 {
			late = h.busySpins.Load()
		}
		time.Sleep(2 * busySpin) // the engine's own work between an answer and the next call
	})
	if n := h.busySpins.Load() - late; n != 0 {
		t.Fatalf("the host thread spun for %d of the last %d calls, with the engine taking %v to queue each", n, steps/2, 2*busySpin)
	}
	if h.busySpins.Load() == 0 {
		t.Fatal("the host thread never spun, not even before the lane's turnaround was known")
	}
}

// A lane's busy spins stop once most of its last 8 were slow (the processors busy with other
// work), are tried again after 16, 32, 64, … pulls, up to lastProbe, and come back after a try
// whose spins but the first were quick.
func TestSpinsStopWhileSlowAndComeBackWhenQuick(t *testing.T) {
	const quick, slow = 5 * time.Microsecond, 2 * slowSpin
	ln := newLane()
	spin := func(d time.Duration) {
		t.Helper()
		if !ln.spinPaysLocked() {
			t.Fatal("a spin was refused where one was due")
		}
		ln.spunLocked(d)
	}
	for range 20 {
		spin(quick)
	}
	spin(slow) // now and then one is slow: spins go on
	for range 8 {
		spin(quick)
	}
	for range stopAfterSlow {
		spin(slow)
	}
	// refused returns how many spins were refused before one was allowed (a try).
	refused := func() int {
		n := 0
		for !ln.spinPaysLocked() {
			if n++; n > 10*lastProbe {
				t.Fatal("no try in 10 × lastProbe pulls")
			}
		}
		return n
	}
	want := firstProbe - 1
	for range 10 { // failed tries: each waits twice as long, up to lastProbe
		if n := refused(); n != want {
			t.Fatalf("%d spins refused before a try, want %d", n, want)
		}
		ln.spunLocked(slow) // the try's first spin
		for range probeSpins - 2 {
			spin(quick)
		}
		spin(slow) // one slow spin after the first fails the try
		want = min(2*(want+1), lastProbe) - 1
	}
	if n := refused(); n != lastProbe-1 {
		t.Fatalf("%d spins refused before a try, want %d", n, lastProbe-1)
	}
	ln.spunLocked(slow) // a try whose first spin is slow and the others quick: spins are back
	for range probeSpins - 1 {
		spin(quick)
	}
	for range 100 {
		spin(quick)
	}
	for range stopAfterSlow { // and the next stop waits firstProbe again
		spin(slow)
	}
	if n := refused(); n != firstProbe-1 {
		t.Fatalf("%d spins refused before a try after spins came back, want %d", n, firstProbe-1)
	}
}

// A host thread stops spinning for the next call when its spins wait long for it although the
// engine's turnaround is short enough for a spin (lane.quickTurns): what it sees when the
// processors are busy with other work, and the engine's thread that would queue the call waits
// for the one the spin holds. The engine's side here waits 80 µs (busy) before each call.
func TestAHostThreadStopsSpinningWhenItsSpinsAreSlow(t *testing.T) {
	if !handshakes {
		t.Skip("no handshake on " + runtime.GOOS)
	}
	h := NewHost()
	defer h.Close()
	const steps = 200
	stepsInTurn(t, h, steps, func(int) {
		for start := time.Now(); time.Since(start) < slowSpin+30*time.Microsecond; {
		}
	})
	// At most: the first stopAfterSlow spins, then probeSpins per try at 16, 32, 64 and 128
	// pulls; a few more when a try happened to be quick.
	if n := h.busySpins.Load(); n == 0 || n > 60 {
		t.Fatalf("the host thread spun for %d of %d calls, each queued 80 µs after the answer", n, steps)
	}
}
