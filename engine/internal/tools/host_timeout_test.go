package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

// errTimedOut stands for the step's attempt-timeout error.
var errTimedOut = errors.New("attempt 1 timed out after 1s")

type callOutcome struct {
	res Result
	err error
}

// timedHost is a host on a stub clock with a 2 s interrupt grace.
func timedHost(t *testing.T) (*Host, *clock.Stub) {
	t.Helper()
	h := NewHost()
	c := clock.NewStub(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	h.clock = c
	h.SetInterruptGrace(2 * time.Second)
	t.Cleanup(h.Close)
	return h, c
}

// callAsync makes a host call with a 1 s timeout for step key of run "r" in a goroutine.
func callAsync(ctx context.Context, h *Host, key string, attempt int) <-chan callOutcome {
	ch := make(chan callOutcome, 1)
	go func() {
		res, err := h.Call(ctx, LaneMain, Call{RunID: "r", StepKey: key, Tool: "t", Attempt: attempt,
			Timeout: time.Second, TimeoutErr: errTimedOut})
		ch <- callOutcome{res, err}
	}()
	return ch
}

func pullOne(t *testing.T, h *Host, puller uint64) PendingCall {
	t.Helper()
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Timeout: 5 * time.Second, Puller: puller})
	if err != nil || len(got) != 1 {
		t.Fatalf("pull: %+v %v", got, err)
	}
	return got[0]
}

func outcome(t *testing.T, ch <-chan callOutcome) callOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not return")
		return callOutcome{}
	}
}

func noOutcome(t *testing.T, ch <-chan callOutcome) {
	t.Helper()
	select {
	case o := <-ch:
		t.Fatalf("the call returned early: %+v", o)
	case <-time.After(30 * time.Millisecond):
	}
}

// An attempt's time counts from the pull: a call that waits in its lane longer than its
// timeout (a busy main thread) has not started and does not time out.
func TestHostTimeoutCountsFromThePull(t *testing.T) {
	t.Parallel()
	h, c := timedHost(t)
	ch := callAsync(context.Background(), h, "s", 1)
	waitPending(t, h, 1)
	c.Advance(10 * time.Second) // queued all this time
	noOutcome(t, ch)
	call := pullOne(t, h, 0)
	if want := c.Now().Add(time.Second); !call.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v (pull time + timeout)", call.Deadline, want)
	}
	if h.Cancelled(call.ID) {
		t.Fatal("cancelled before its deadline")
	}
	c.Advance(999 * time.Millisecond)
	noOutcome(t, ch)
	if err := h.Complete(call.ID, Result{OutputJSON: []byte(`1`)}); err != nil {
		t.Fatalf("complete in time: %v", err)
	}
	if o := outcome(t, ch); o.err != nil || string(o.res.OutputJSON) != "1" {
		t.Fatalf("in-time answer: %+v", o)
	}
}

// When the deadline passes, the host is told (Cancelled), its reports are still taken until it
// stops, and an answer within the grace ends the attempt as timed out with its result dropped.
func TestHostTimedOutCallAnsweredWithinGrace(t *testing.T) {
	t.Parallel()
	h, c := timedHost(t)
	ch := callAsync(context.Background(), h, "s", 1)
	call := pullOne(t, h, 0)
	c.Advance(time.Second)
	waitCancelled(t, h, call.ID)
	if got := h.CancelledOf([]uint64{call.ID, 999}); len(got) != 2 {
		t.Fatalf("CancelledOf: %v", got)
	}
	if !h.Report(call.ID, Report{Dropped: 1}) {
		t.Fatal("a timed-out call's report was dropped before it stopped (its last lines explain the timeout)")
	}
	noOutcome(t, ch) // waiting for the host to stop the tool
	err := h.Complete(call.ID, Result{OutputJSON: []byte(`1`)})
	if !errors.Is(err, ErrDropped) || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("late answer: %v", err)
	}
	if o := outcome(t, ch); !errors.Is(o.err, errTimedOut) || o.res.OutputJSON != nil {
		t.Fatalf("outcome %+v, want the timeout and no result", o)
	}
	if _, _, _, busy := h.InFlight("r", "s"); busy {
		t.Fatal("still in flight after the answer")
	}
}

func waitCancelled(t *testing.T, h *Host, id uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !h.Cancelled(id) {
		if time.Now().After(deadline) {
			t.Fatal("the call was never reported cancelled")
		}
		time.Sleep(time.Millisecond)
	}
}

// A host that does not answer within the grace has its attempt abandoned, naming its thread;
// the call stays in flight, and the next call of the same step is not handed out until the
// host lets go of it.
func TestHostAbandonsAfterGraceAndHoldsTheNextAttempt(t *testing.T) {
	t.Parallel()
	h, c := timedHost(t)
	puller, _ := h.OpenPuller("MainThread")
	ch := callAsync(context.Background(), h, "s", 1)
	first := pullOne(t, h, puller)
	c.Advance(time.Second)
	waitCancelled(t, h, first.ID)
	if err := c.WaitForTimers(context.Background(), 1); err != nil { // the grace timer
		t.Fatal(err)
	}
	c.Advance(2 * time.Second)
	o := outcome(t, ch)
	var ab *AbandonedError
	if !errors.As(o.err, &ab) || !errors.Is(o.err, errTimedOut) || ab.Thread != "MainThread" || ab.Attempt != 1 {
		t.Fatalf("outcome %+v, want an AbandonedError naming MainThread that wraps the timeout", o)
	}
	if !strings.Contains(o.err.Error(), `thread "MainThread"`) || !strings.Contains(o.err.Error(), "abandoned") {
		t.Fatalf("message: %v", o.err)
	}
	letGo, attempt, thread, busy := h.InFlight("r", "s")
	if !busy || attempt != 1 || thread != "MainThread" {
		t.Fatalf("InFlight: %v %d %q", busy, attempt, thread)
	}

	// The retry is not handed out while the abandoned attempt's thread is in the tool.
	second := callAsync(context.Background(), h, "s", 2)
	if got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Timeout: 30 * time.Millisecond}); len(got) != 0 {
		t.Fatalf("the retry was handed out while attempt 1 still runs: %+v", got)
	}
	if err := h.Complete(first.ID, Result{OutputJSON: []byte(`1`)}); !errors.Is(err, ErrDropped) {
		t.Fatalf("the abandoned attempt's late answer: %v", err)
	}
	select {
	case <-letGo:
	case <-time.After(5 * time.Second):
		t.Fatal("letting go of the call did not close InFlight's channel")
	}
	next := pullOne(t, h, puller)
	if next.Attempt != 2 {
		t.Fatalf("pulled %+v, want attempt 2", next)
	}
	if err := h.Complete(next.ID, Result{OutputJSON: []byte(`2`)}); err != nil {
		t.Fatal(err)
	}
	if o := outcome(t, second); o.err != nil || string(o.res.OutputJSON) != "2" {
		t.Fatalf("attempt 2: %+v", o)
	}
}

// A cancelled call: one never pulled says it never started; one pulled stays in flight until
// the host answers, and the step's next call (a resume) waits for it.
func TestHostCancelledCallsStartedOrNot(t *testing.T) {
	t.Parallel()
	h, _ := timedHost(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch := callAsync(ctx, h, "queued", 1)
	waitPending(t, h, 1)
	cancel()
	if o := outcome(t, ch); !errors.Is(o.err, context.Canceled) || !o.res.NotStarted {
		t.Fatalf("cancelled while queued: %+v, want NotStarted", o)
	}

	ctx, cancel = context.WithCancel(context.Background())
	puller, _ := h.OpenPuller("worker-1")
	ch = callAsync(ctx, h, "s", 1)
	call := pullOne(t, h, puller)
	cancel()
	if o := outcome(t, ch); !errors.Is(o.err, context.Canceled) || o.res.NotStarted {
		t.Fatalf("cancelled while running: %+v", o)
	}
	if _, _, thread, busy := h.InFlight("r", "s"); !busy || thread != "worker-1" {
		t.Fatal("a cancelled call the host still runs is not in flight")
	}
	again := callAsync(context.Background(), h, "s", 1)
	noOutcome(t, again)
	if h.Pending() != 0 {
		t.Fatalf("the next call of the step was queued while the cancelled one runs (%d pending)", h.Pending())
	}
	// The thread ends without answering: closing its puller lets go of the call.
	h.ClosePuller(puller)
	waitPending(t, h, 1)
	next := pullOne(t, h, 0)
	_ = h.Complete(next.ID, Result{OutputJSON: []byte(`3`)})
	if o := outcome(t, again); o.err != nil {
		t.Fatalf("the next call: %+v", o)
	}
	if err := h.Complete(call.ID, Result{}); !errors.Is(err, ErrDropped) {
		t.Fatalf("the cancelled call's late answer: %v", err)
	}
}

// A call that timed out while its puller held it and is then handed back unrun ends as timed
// out (not abandoned: nothing runs it).
func TestHostTimedOutCallHandedBack(t *testing.T) {
	t.Parallel()
	h, c := timedHost(t)
	puller, _ := h.OpenPuller("")
	ch := callAsync(context.Background(), h, "s", 1)
	call := pullOne(t, h, puller)
	c.Advance(time.Second)
	waitCancelled(t, h, call.ID)
	if n, err := h.Release(puller, []uint64{call.ID}); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}
	if o := outcome(t, ch); !errors.Is(o.err, errTimedOut) {
		t.Fatalf("outcome %+v, want the timeout", o)
	}
	if _, _, _, busy := h.InFlight("r", "s"); busy || h.Pending() != 0 {
		t.Fatal("a handed-back timed-out call is still pending or in flight")
	}
}

// A cancel and the host's answer that both come while a timed-out call waits out its grace
// end the wait, whichever the Call sees first (it once waited for an answer no one would send).
func TestHostCancelAndAnswerDuringTheGraceEndTheCall(t *testing.T) {
	t.Parallel()
	h, c := timedHost(t)
	h.SetInterruptGrace(0) // the grace ends as the deadline passes: the race at its widest
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		ch := callAsync(ctx, h, fmt.Sprintf("s%d", i), 1)
		call := pullOne(t, h, 0)
		c.Advance(time.Second)
		waitCancelled(t, h, call.ID)
		cancel()
		_ = h.Complete(call.ID, Result{OutputJSON: []byte(`1`)})
		o := outcome(t, ch)
		if o.err == nil {
			t.Fatalf("round %d: a timed-out, cancelled call returned a result: %+v", i, o)
		}
	}
}

// An answer that arrives after the deadline is never a success, even when the Call had not
// reached its wait when both happened.
func TestHostLateAnswerIsNeverASuccess(t *testing.T) {
	t.Parallel()
	h, c := timedHost(t)
	for i := range 100 {
		ch := callAsync(context.Background(), h, fmt.Sprintf("s%d", i), 1)
		call := pullOne(t, h, 0)
		c.Advance(time.Second)
		waitCancelled(t, h, call.ID)
		_ = h.Complete(call.ID, Result{OutputJSON: []byte(`1`)})
		if o := outcome(t, ch); !errors.Is(o.err, errTimedOut) {
			t.Fatalf("round %d: %+v, want the timeout", i, o)
		}
	}
}
