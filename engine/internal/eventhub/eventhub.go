// Package eventhub wakes the readers of an engine's event stream after its writes, and counts
// its open subscriptions. Readers wait in Poll, which reads the stream again at each wake-up,
// at each tick of a poll period when other processes write to the same database too (their
// writes wake nobody here), and gives up at a timeout, the end of ctx or Close.
package eventhub

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Hub wakes the readers waiting in Poll. Notify costs one atomic load when nobody waits. The
// zero value is not ready: use New.
type Hub struct {
	subs    atomic.Int64 // open subscriptions (Subscribed)
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
	closed  chan struct{}
}

// New returns a hub with nobody waiting.
func New() *Hub { return &Hub{ch: make(chan struct{}), closed: make(chan struct{})} }

// Notify wakes every reader waiting; the engine calls it after each write of events.
func (h *Hub) Notify() {
	if !h.waiting.Load() {
		return
	}
	h.mu.Lock()
	h.waiting.Store(false)
	close(h.ch)
	h.ch = make(chan struct{})
	h.mu.Unlock()
}

// wait returns a channel closed at the next Notify after this call.
func (h *Hub) wait() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting.Store(true)
	return h.ch
}

// Close ends every Poll, now and later, once nothing is left to read. Call it once.
func (h *Hub) Close() { close(h.closed) }

// Subscribed adds delta (1 for a new subscription, -1 for one closed) to the open subscriptions.
func (h *Hub) Subscribed(delta int64) { h.subs.Add(delta) }

// Subscriptions is the number of open subscriptions.
func (h *Hub) Subscriptions() int { return int(h.subs.Load()) }

// Poll returns what list returns as soon as it is an error or holds an item, calling it once
// at once and again after each Notify (and each every, when every > 0: other processes write
// too), for up to timeout of real time (≤ 0 does not wait): then it returns nil, nil. It
// returns context.Cause(ctx) when ctx ends, and the error of closed once the hub is closed and
// list found nothing.
func Poll[T any](ctx context.Context, h *Hub, timeout, every time.Duration, closed func() error, list func() ([]T, error)) ([]T, error) {
	items, err := list()
	if err != nil || len(items) > 0 || timeout <= 0 {
		return items, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var poll <-chan time.Time
	if every > 0 {
		tick := time.NewTicker(every)
		defer tick.Stop()
		poll = tick.C
	}
	for {
		wake := h.wait()
		if items, err = list(); err != nil || len(items) > 0 {
			return items, err
		}
		select {
		case <-poll:
		case <-wake:
		case <-t.C:
			return nil, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-h.closed:
			return nil, closed()
		}
	}
}
