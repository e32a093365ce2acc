package schedule

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Clock is the scheduler's source of time. SystemClock is the real one; ManualClock is a stub
// for tests that moves only when told to.
type Clock interface {
	Now() time.Time
	// NewTimer returns a timer that sends the clock's time on C once d has elapsed on this
	// clock. d ≤ 0 fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did (false if it had fired).
	Stop() bool
}

// SystemClock returns the real clock (time.Now and time.NewTimer).
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time { return t.t.C }
func (t systemTimer) Stop() bool          { return t.t.Stop() }

// ManualClock is a Clock for tests: its time changes only through Set and Advance, which fire
// the timers that are due. It is safe for concurrent use.
type ManualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*manualTimer
	changed chan struct{} // closed and replaced whenever the set of pending timers changes
}

// NewManualClock returns a ManualClock set to now.
func NewManualClock(now time.Time) *ManualClock {
	return &ManualClock{now: now, changed: make(chan struct{})}
}

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer due at Now()+d.
func (c *ManualClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{clock: c, due: c.now.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		t.ch <- c.now
		return t
	}
	c.timers = append(c.timers, t)
	c.notifyLocked()
	return t
}

// Advance moves the clock forward by d and fires the timers that are due.
func (c *ManualClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (never backwards: an earlier t is ignored) and fires the timers due
// at or before t, in due order.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.Before(c.now) {
		return
	}
	c.now = t
	slices.SortStableFunc(c.timers, func(a, b *manualTimer) int { return a.due.Compare(b.due) })
	n := 0
	for _, tm := range c.timers {
		if tm.due.After(t) {
			c.timers[n] = tm
			n++
			continue
		}
		tm.ch <- t
	}
	if n != len(c.timers) {
		clear(c.timers[n:])
		c.timers = c.timers[:n]
		c.notifyLocked()
	}
}

// Pending returns the number of timers that have not fired nor been stopped.
func (c *ManualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextDue returns the earliest due time of the pending timers, and false when there is none.
func (c *ManualClock) NextDue() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var due time.Time
	for _, t := range c.timers {
		if due.IsZero() || t.due.Before(due) {
			due = t.due
		}
	}
	return due, !due.IsZero()
}

// WaitPending blocks until at least n timers are pending, or ctx ends (then it returns the
// context's error). Tests use it to know that a goroutine is waiting on the clock.
func (c *ManualClock) WaitPending(ctx context.Context, n int) error {
	for {
		c.mu.Lock()
		ok, ch := len(c.timers) >= n, c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (c *ManualClock) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

type manualTimer struct {
	clock *ManualClock
	due   time.Time
	ch    chan time.Time
}

func (t *manualTimer) C() <-chan time.Time { return t.ch }

func (t *manualTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = slices.Delete(c.timers, i, i+1)
			c.notifyLocked()
			return true
		}
	}
	return false
}
