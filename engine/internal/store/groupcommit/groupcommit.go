// Package groupcommit coalesces the writes of concurrent callers into one transaction (group
// commit), for the SQL stores: the executor writes from many goroutines at once, and one
// transaction of many batches costs about what one batch costs.
//
// The scheme is leader-based, without a goroutine of its own: Do queues its item; one caller at
// a time, the leader, commits the items queued at that moment (at most Max) with the Commit
// function, then hands the lead to the first item still queued, whose caller commits the next
// group. A Do that finds no leader leads itself, so an idle store commits without a goroutine
// handoff. Do returns once the group holding its item has committed (or failed).
//
// While writers are concurrent — the last group held more than one item, or the leader was
// handed the lead — a leader yields its processor once before it takes its group, so that
// writers already running reach the queue first: on two cores this halved the commits of a
// 1,000-item foreach served from the content cache, whose items write while others look up
// (docs/design/performance.md). A lone writer never yields: a yield with nothing else to run
// would cost it some 10 µs a write.
package groupcommit

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("groupcommit: closed")

// Committer groups items of type T. Set Commit (and Max) before the first Do.
type Committer[T any] struct {
	// Commit applies group in one transaction and returns the outcome of each item (errs[i]
	// for group[i]; nil errs: all succeeded) or err, the outcome of them all.
	Commit func(group []T) (errs []error, err error)
	// Max bounds how many items one group holds; ≤ 0 means 512.
	Max int
	// Yield is called by a leader of concurrent writers before it takes its group (the package
	// comment); nil means runtime.Gosched. For tests.
	Yield func()

	observe atomic.Pointer[func(items int, d time.Duration)] // Observe's function, nil for none

	mu      sync.Mutex
	queue   []*pending[T]
	leading bool
	lastN   atomic.Int32 // the size of the last group taken
	closed  bool
	idle    sync.Cond
}

type pending[T any] struct {
	v    T
	done chan error // the item's outcome, or errLead: the receiver leads the next group
}

// errLead, sent on pending.done, makes a queued caller the leader.
var errLead = errors.New("lead the next group")

// Observe makes the committer call fn after each group whose Commit returned no group-wide
// error (items may still have failed one by one), on the leader's goroutine, with the group's
// size and how long Commit took; fn must not block (the group's callers wait for it). nil stops
// the calls. It may be called at any time, concurrently with Do: the stores' CommitObserver.
func (c *Committer[T]) Observe(fn func(items int, d time.Duration)) {
	if fn == nil {
		c.observe.Store(nil)
		return
	}
	c.observe.Store(&fn)
}

// ObserveCommits implements store.CommitObserver for a store that commits its batches with c
// (SQLite and PostgreSQL): fn gets each group committed, its batches and Commit's duration.
func ObserveCommits(c *Committer[*store.Batch], fn func(store.Commit)) {
	if fn == nil {
		c.Observe(nil)
		return
	}
	c.Observe(func(items int, d time.Duration) { fn(store.Commit{Batches: items, Duration: d}) })
}

// Do queues v and returns its outcome once the group holding it was committed. After Close it
// returns ErrClosed.
func (c *Committer[T]) Do(v T) error {
	p := &pending[T]{v: v, done: make(chan error, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.queue = append(c.queue, p)
	lead := !c.leading
	c.leading = true
	c.mu.Unlock()
	if !lead {
		if err := <-p.done; err != errLead {
			return err
		}
	}
	c.lead(!lead)
	return <-p.done
}

// lead commits the next group of queued items, which holds the leader's own (it is first in
// the queue), then hands the lead to the first item still queued, or ends it. handed: the
// lead was handed over by the last leader (writers are concurrent).
func (c *Committer[T]) lead(handed bool) {
	limit := c.Max
	if limit <= 0 {
		limit = 512
	}
	if handed || c.lastN.Load() > 1 {
		if c.Yield != nil {
			c.Yield()
		} else {
			runtime.Gosched()
		}
	}
	c.mu.Lock()
	n := min(len(c.queue), limit)
	c.lastN.Store(int32(n))
	group := make([]*pending[T], n)
	copy(group, c.queue)
	rest := copy(c.queue, c.queue[n:])
	clear(c.queue[rest:])
	c.queue = c.queue[:rest]
	c.mu.Unlock()
	defer func() {
		if v := recover(); v != nil {
			for _, p := range group { // unblock the callers, then crash as a committer would
				select {
				case p.done <- fmt.Errorf("group commit: %v", v):
				default:
				}
			}
			defer panic(v)
		}
		c.mu.Lock()
		if len(c.queue) > 0 {
			c.queue[0].done <- errLead
		} else {
			c.leading = false
			if c.idle.L != nil {
				c.idle.Broadcast()
			}
		}
		c.mu.Unlock()
	}()
	items := make([]T, n)
	for i, p := range group {
		items[i] = p.v
	}
	start := time.Now()
	errs, err := c.Commit(items)
	if fn := c.observe.Load(); fn != nil && err == nil {
		(*fn)(n, time.Since(start))
	}
	for i, p := range group {
		switch {
		case err != nil:
			p.done <- err
		case errs != nil:
			p.done <- errs[i]
		default:
			p.done <- nil
		}
	}
}

// Close makes further Do calls return ErrClosed and waits for the items already queued to be
// committed. Closing twice is not an error.
func (c *Committer[T]) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.idle.L == nil {
		c.idle.L = &c.mu
	}
	for c.leading {
		c.idle.Wait()
	}
}
