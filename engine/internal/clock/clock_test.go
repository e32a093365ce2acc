package clock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

var t0 = time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC)

func TestStubFiresInDeadlineOrder(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	var order []int
	s.AfterFunc(3*time.Second, func() { order = append(order, 3) })
	s.AfterFunc(1*time.Second, func() { order = append(order, 1) })
	s.AfterFunc(2*time.Second, func() { order = append(order, 2) })
	s.AfterFunc(2*time.Second, func() { order = append(order, 22) })
	if got := s.Pending(); got != 4 {
		t.Fatalf("pending %d", got)
	}
	s.Advance(2 * time.Second)
	if len(order) != 3 || order[0] != 1 || order[1] != 2 || order[2] != 22 {
		t.Fatalf("order %v", order)
	}
	if !s.Now().Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("now %v", s.Now())
	}
	s.Advance(time.Hour)
	if len(order) != 4 || s.Pending() != 0 {
		t.Fatalf("order %v pending %d", order, s.Pending())
	}
	s.Set(t0) // backwards: nothing moves
	if !s.Now().Equal(t0.Add(2*time.Second + time.Hour)) {
		t.Fatalf("Set moved the clock backwards to %v", s.Now())
	}
}

func TestStubTimerStopAndChannel(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	tm := s.NewTimer(time.Second)
	stopped := s.NewTimer(time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop should report true once")
	}
	s.Advance(999 * time.Millisecond)
	select {
	case <-tm.C():
		t.Fatal("fired early")
	default:
	}
	s.Advance(time.Millisecond)
	if got := <-tm.C(); !got.Equal(t0.Add(time.Second)) {
		t.Fatalf("fired at %v", got)
	}
	if tm.Stop() {
		t.Fatal("Stop after firing should be false")
	}
	select {
	case <-stopped.C():
		t.Fatal("stopped timer fired")
	default:
	}
}

func TestStubZeroDurationFiresAtOnce(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	var fired atomic.Bool
	tm := s.AfterFunc(0, func() { fired.Store(true) })
	if !fired.Load() || s.Pending() != 0 || tm.Stop() {
		t.Fatal("AfterFunc(0) should fire before returning and not stay pending")
	}
	select {
	case <-s.NewTimer(0).C():
	default:
		t.Fatal("NewTimer(0) should fire before returning")
	}
}

func TestStubCallbackSchedulesWithinSpan(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	var hits []time.Time
	s.AfterFunc(time.Second, func() {
		hits = append(hits, s.Now())
		s.AfterFunc(time.Second, func() { hits = append(hits, s.Now()) })
	})
	s.Advance(5 * time.Second)
	if len(hits) != 2 || !hits[1].Equal(t0.Add(2*time.Second)) {
		t.Fatalf("hits %v", hits)
	}
}

func TestSleepAndWaitForTimers(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(context.Background(), s, time.Minute) }()
	if err := s.WaitForTimers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if when, ok := s.Next(); !ok || !when.Equal(t0.Add(time.Minute)) {
		t.Fatalf("next %v %v", when, ok)
	}
	if !s.AdvanceToNext() {
		t.Fatal("AdvanceToNext found nothing")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.AdvanceToNext() {
		t.Fatal("nothing should be pending")
	}
}

func TestSleepInterruptedByCancel(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	cause := errors.New("user cancel")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- clock.Sleep(ctx, s, time.Hour) }()
	if err := s.WaitForTimers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	cancel(cause)
	if err := <-done; !errors.Is(err, cause) {
		t.Fatalf("err %v", err)
	}
	if s.Pending() != 0 {
		t.Fatal("the sleep's timer should be stopped")
	}
}

func TestWaitForTimersHonoursContext(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitForTimers(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if err := s.WaitForTimers(ctx, 0); err != nil {
		t.Fatalf("n=0: %v", err)
	}
}

func TestWithTimeout(t *testing.T) {
	t.Parallel()
	s := clock.NewStub(t0)
	cause := errors.New("attempt timed out")
	ctx, cancel := clock.WithTimeout(context.Background(), s, time.Second, cause)
	defer cancel()
	s.Advance(time.Second)
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), cause) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
	ctx2, cancel2 := clock.WithTimeout(context.Background(), s, 0, cause)
	s.Advance(time.Hour)
	if ctx2.Err() != nil {
		t.Fatal("d=0 must not time out")
	}
	cancel2()
	if ctx2.Err() == nil || s.Pending() != 0 {
		t.Fatal("cancel should end the context and leave no timer")
	}
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	c := clock.New()
	start := c.Now()
	if err := clock.Sleep(context.Background(), c, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if c.Now().Sub(start) < time.Millisecond {
		t.Fatal("slept too little")
	}
	fired := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(fired) })
	<-fired
	if c.NewTimer(time.Hour).C() == nil {
		t.Fatal("timer without channel")
	}
}
