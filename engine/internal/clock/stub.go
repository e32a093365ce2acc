package clock

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Stub is a Clock for tests: its time only moves when Advance or Set is called, and timers fire
// then, in deadline order, in the goroutine that moved the time. WaitForTimers lets a test block
// until the engine has scheduled the wake-ups it expects, so tests advance deterministically
// without sleeping. The zero value is not usable; use NewStub.
type Stub struct {
	mu      sync.Mutex
	now     time.Time
	timers  timerHeap
	seq     uint64        // tie-breaker: timers with equal deadlines fire in creation order
	changed chan struct{} // closed and replaced whenever a timer is added
}

// NewStub returns a stub clock showing t0.
func NewStub(t0 time.Time) *Stub {
	return &Stub{now: t0, changed: make(chan struct{})}
}

// Now returns the stub's current time.
func (s *Stub) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// NewTimer returns a timer firing once the stub's time reaches Now()+d.
func (s *Stub) NewTimer(d time.Duration) Timer {
	t := &stubTimer{s: s, ch: make(chan time.Time, 1)}
	s.add(t, d)
	return t
}

// AfterFunc calls f, in the goroutine that advances the time, once the stub's time reaches
// Now()+d. d ≤ 0 calls f before AfterFunc returns.
func (s *Stub) AfterFunc(d time.Duration, f func()) Timer {
	t := &stubTimer{s: s, fn: f}
	s.add(t, d)
	return t
}

func (s *Stub) add(t *stubTimer, d time.Duration) {
	s.mu.Lock()
	t.when = s.now.Add(d)
	if d <= 0 {
		t.index = -1
		now := s.now
		s.mu.Unlock()
		t.fire(now)
		return
	}
	s.seq++
	t.seq = s.seq
	heap.Push(&s.timers, t)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Advance moves the time forward by d (d < 0 is treated as 0), firing every timer whose
// deadline is reached, in deadline order. A timer created by a callback with a deadline within
// the advanced span fires too. When Advance returns, every due callback has returned.
func (s *Stub) Advance(d time.Duration) {
	if d < 0 {
		d = 0
	}
	s.mu.Lock()
	target := s.now.Add(d)
	s.mu.Unlock()
	s.Set(target)
}

// Set moves the time to t, firing timers as Advance does. A t before the current time only
// fires what is already due. A callback timer sees its own deadline as the time; a channel
// timer's reader sees t (it runs in its own goroutine, possibly after Set returned).
func (s *Stub) Set(t time.Time) {
	s.mu.Lock()
	if t.Before(s.now) {
		t = s.now
	}
	for len(s.timers) > 0 && !s.timers[0].when.After(t) {
		next := heap.Pop(&s.timers).(*stubTimer)
		next.index = -1
		if next.fn != nil {
			// A callback runs here, synchronously: it sees its own deadline, and a timer it
			// creates within the span fires in this loop too (unless a channel timer before it
			// already showed the target time: the time never goes back).
			if next.when.After(s.now) {
				s.now = next.when
			}
		} else {
			// A channel's reader runs in its own goroutine, at a moment this loop does not
			// know: it must not see a time this Set is about to pass, or a timer it arms from
			// that time would be due inside the span yet never fire (a loop that sleeps in
			// steps stalled so under a slow scheduler). It sees the target time, as it would
			// had it woken after Set returned.
			s.now = t
		}
		s.mu.Unlock()
		next.fire(next.when)
		s.mu.Lock()
	}
	s.now = t
	s.mu.Unlock()
}

// AdvanceToNext moves the time to the earliest pending deadline and fires what is due then.
// It reports false, and does nothing, when no timer is pending.
func (s *Stub) AdvanceToNext() bool {
	when, ok := s.Next()
	if !ok {
		return false
	}
	s.Set(when)
	return true
}

// Pending returns the number of timers that have neither fired nor been stopped.
func (s *Stub) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.timers)
}

// Next returns the earliest pending deadline; ok is false when no timer is pending.
func (s *Stub) Next() (when time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.timers) == 0 {
		return time.Time{}, false
	}
	return s.timers[0].when, true
}

// WaitForTimers blocks until at least n timers are pending, or ctx ends (it then returns
// context.Cause(ctx)). n ≤ 0 returns at once.
func (s *Stub) WaitForTimers(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		count, changed := len(s.timers), s.changed
		s.mu.Unlock()
		if count >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

type stubTimer struct {
	s     *Stub
	when  time.Time
	seq   uint64
	index int // position in the heap; -1 once fired or stopped
	ch    chan time.Time
	fn    func()
}

func (t *stubTimer) C() <-chan time.Time { return t.ch }

func (t *stubTimer) Stop() bool {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.s.timers, t.index)
	t.index = -1
	return true
}

func (t *stubTimer) fire(now time.Time) {
	if t.fn != nil {
		t.fn()
		return
	}
	t.ch <- now // buffered, fires once
}

type timerHeap []*stubTimer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].seq < h[j].seq
	}
	return h[i].when.Before(h[j].when)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*stubTimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}
