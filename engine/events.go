package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/eventhub"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// EventQuery selects events of the stream.
type EventQuery struct {
	// FromSeq is the first sequence number wanted: events with Seq ≥ FromSeq come back. 0 and 1
	// both mean "from the beginning"; LastSeq()+1 means "only new events".
	FromSeq uint64 `json:"from_seq,omitempty"`
	RunID   string `json:"run_id,omitempty"` // "" = every run
	// Max bounds the events returned by one call; 0 means 256.
	Max int `json:"max,omitempty"`
}

const defaultEventBatch = 256

// sharedEventPoll is how often a waiting reader looks for new events that another process
// wrote: the owner of a read-only engine's database, or the other engines attached to a shared
// one (docs/operations/cluster.md). Their writes do not wake this engine's hub.
const sharedEventPoll = 100 * time.Millisecond

// LastSeq returns the sequence number of the latest event, 0 when there is none.
func (e *Engine) LastSeq(ctx context.Context) (uint64, error) {
	if e.isClosed() {
		return 0, errClosed()
	}
	seq, err := e.store.LastSeq(ctx)
	if err != nil {
		return 0, notFound("", err)
	}
	return seq, nil
}

// EventsSince returns, without waiting, up to max (0 = 256) events with Seq ≥ fromSeq, in
// order. An empty result means there are none yet.
func (e *Engine) EventsSince(fromSeq uint64, max int) ([]run.Event, error) {
	return e.listEvents(context.Background(), EventQuery{FromSeq: fromSeq, Max: max})
}

func (e *Engine) listEvents(ctx context.Context, q EventQuery) ([]run.Event, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	after := q.FromSeq
	if after > 0 {
		after--
	}
	max := q.Max
	if max <= 0 {
		max = defaultEventBatch
	}
	evs, err := e.store.ListEvents(ctx, store.EventFilter{AfterSeq: after, RunID: q.RunID, Limit: max})
	if err != nil {
		return nil, notFound("", err)
	}
	return evs, nil
}

// PollEvents returns the events selected by q, waiting up to timeout (real time) for the first
// one: the pull model of the C ABI. It returns as soon as at least one event is available, an
// empty result when timeout elapses (timeout ≤ 0 does not wait), context.Cause(ctx) when ctx
// ends, and code closed once the engine is closed and no event is left.
func (e *Engine) PollEvents(ctx context.Context, q EventQuery, timeout time.Duration) ([]run.Event, error) {
	var every time.Duration
	if e.cfg.ReadOnly || e.shared() { // others write too: nothing here notifies the hub of it
		every = sharedEventPoll
	}
	return eventhub.Poll(ctx, e.hub, timeout, every, errClosed, func() ([]run.Event, error) { return e.listEvents(ctx, q) })
}

// Subscription delivers the events of the stream in order, from a given sequence number. It is
// not safe for concurrent use; Close it when done.
type Subscription struct {
	e      *Engine
	q      EventQuery
	buf    []run.Event
	closed bool
	// released is set by the first Close: the engine's count of open subscriptions
	// (OpenSubscriptions) goes down once.
	released atomic.Bool
}

// Events subscribes to every event with Seq ≥ fromSeq (0 = from the beginning).
func (e *Engine) Events(ctx context.Context, fromSeq uint64) (*Subscription, error) {
	return e.Subscribe(ctx, EventQuery{FromSeq: fromSeq})
}

// Subscribe subscribes to the events selected by q.
func (e *Engine) Subscribe(ctx context.Context, q EventQuery) (*Subscription, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	if q.FromSeq == 0 {
		q.FromSeq = 1
	}
	e.hub.Subscribed(1)
	return &Subscription{e: e, q: q}, nil
}

// OpenSubscriptions is how many subscriptions (Subscribe, Events) are open: made and not yet
// closed. A reader that ends must Close its subscription, so a server at rest (no dashboard
// page open, no MCP resource subscription) has 0; the metric dccflow_event_subscriptions
// reports it (docs/operations/metrics.md).
func (e *Engine) OpenSubscriptions() int { return e.hub.Subscriptions() }

// Next returns the next event, waiting for it until ctx ends (context.Cause(ctx)), the engine
// closes or the subscription is closed (both code closed).
func (s *Subscription) Next(ctx context.Context) (run.Event, error) {
	for len(s.buf) == 0 {
		if s.closed {
			return run.Event{}, run.Errorf(run.CodeClosed, "the subscription is closed")
		}
		evs, err := s.e.PollEvents(ctx, s.q, time.Hour)
		if err != nil {
			return run.Event{}, err
		}
		s.buf = evs
	}
	ev := s.buf[0]
	s.buf = s.buf[1:]
	s.q.FromSeq = ev.Seq + 1
	return ev, nil
}

// Close ends the subscription. Closing twice is harmless.
func (s *Subscription) Close() {
	s.closed, s.buf = true, nil
	if s.released.CompareAndSwap(false, true) {
		s.e.hub.Subscribed(-1)
	}
}
