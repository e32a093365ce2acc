package resgate

import (
	"context"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/resources"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// acquireShared is Acquire on a store whose waiters form one queue across every engine of the
// database (store.ResourceQueue: PostgreSQL): the database orders the waiters of all engines
// (priority with aging, fair share, first come first served) and grants them in the transaction
// that frees the units. The engine's scheduler only lists the attempt (Track: `dcc-flow
// resources`, the metrics). The attempt asks once; if it waits, it asks again as soon as its
// engine listens for the database's NOTIFY (slotWaker), then waits for the NOTIFY that it was
// granted, asking again after sharedPollMin, then twice as late each time, at most every
// SlotPollMax (a NOTIFY missed, an engine past its lease). When ctx ends first it leaves the
// queue, giving back what it was granted meanwhile.
func (g *Gate) acquireShared(ctx context.Context, q store.ResourceQueue, w exec.ResourceWait, what, label string, start time.Time) (func(), error) {
	t := g.sched.Track(resources.Request{Amounts: w.Amounts, Priority: w.Priority, Key: w.FairShare, Label: label})
	limits := make(map[string]int, len(w.Amounts))
	for name := range w.Amounts {
		limits[name] = g.limits[name]
	}
	// caps are this engine's limits lowered by a probe, read at each ask (a probe runs meanwhile).
	caps := func() map[string]int {
		out := map[string]int{}
		for name := range w.Amounts {
			if c, ok := g.sched.Limit(name); ok && c < limits[name] {
				out[name] = c
			}
		}
		return out
	}
	req := store.SlotRequest{ID: holderID(w), Amounts: w.Amounts, Limits: limits, RunID: w.RunID, Label: w.StepKey}
	entry := store.QueueEntry{Priority: w.Priority, Key: w.FairShare, AgingEvery: resources.DefaultAgingEvery}
	woken := g.waker.add(req.ID)
	defer g.waker.remove(req.ID)
	leave := func() {
		t.Leave()
		lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = q.LeaveQueue(lctx, req.ID)
	}
	lastPlace, asked := 0, false
	for delay := sharedPollMin; ; {
		entry.Caps = caps()
		held, place, err := q.AcquireQueued(ctx, req, entry)
		if err != nil {
			leave()
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, err
		}
		if held {
			break
		}
		entry.Again = true
		if place != 0 && place != lastPlace { // 0: asked again while every unit is held, place not read
			lastPlace = place
			wt := run.StepWaiting{Resources: w.Amounts, Place: place, AllEngines: true, Since: start}
			w.Waiting(wt, WaitMessage(what, wt))
		}
		ready := g.waker.ensure(q)
		if !asked {
			// Ask once more as soon as the engine listens: a grant sent before was not heard.
			asked = true
			if err := waitReady(ctx, g.clock, ready, sharedPollMin); err != nil {
				leave()
				return nil, err
			}
			continue
		}
		granted, err := waitWake(ctx, g.clock, woken, delay)
		if err != nil {
			leave()
			return nil, err
		}
		if granted {
			break
		}
		delay = min(2*delay, SlotPollMax)
	}
	grant := t.Hold()
	return func() {
		// As Acquire's release: not on the run's context. The units go to the waiters of the
		// shared queue now first (a second round trip when some wait).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = q.ReleaseSlots(ctx, req.ID)
		grant.Release()
	}, nil
}

// Asking the shared queue again while the engine listens for its grants: first after
// sharedPollMin, then twice as late each time, at most every SlotPollMax. The asks only find
// what no notification says: the units of an engine past its lease (the ask deletes them and
// serves the queue), a grant sent while the listening connection was down, a probe's cap raised.
const sharedPollMin = time.Second

// waitReady waits until ready is closed (the engine listens), for at most d on c, or for ctx
// (its cause).
func waitReady(ctx context.Context, c clock.Clock, ready <-chan struct{}, d time.Duration) error {
	select {
	case <-ready:
		return nil
	default:
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slept := make(chan error, 1)
	go func() { slept <- clock.Sleep(tctx, c, d) }()
	select {
	case <-ready:
		return nil
	case <-slept:
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
}

// waitWake waits for a wake-up on woken (true: the holder was granted), for d on c, or for ctx
// (its cause).
func waitWake(ctx context.Context, c clock.Clock, woken <-chan bool, d time.Duration) (bool, error) {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slept := make(chan error, 1)
	go func() { slept <- clock.Sleep(tctx, c, d) }()
	select {
	case granted := <-woken:
		return granted, nil
	case <-slept:
		if ctx.Err() != nil {
			return false, context.Cause(ctx)
		}
		return false, nil
	}
}

// slotWaker hands the shared queue's notifications (store.ResourceQueue.ListenSlots) to the
// attempts of this engine that wait: one listening connection while any waits, none otherwise.
type slotWaker struct {
	mu      sync.Mutex
	waiters map[string]chan bool
	// cancel stops the listener; nil when none runs. ready is closed once it listens. gen tells
	// a listener that ended whether it is still the current one.
	cancel context.CancelFunc
	ready  chan struct{}
	gen    int
}

// add registers holder id and returns the channel its wake-ups arrive on (buffered: the last
// one kept, a grant over a retry).
func (k *slotWaker) add(id string) <-chan bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.waiters == nil {
		k.waiters = map[string]chan bool{}
	}
	ch := make(chan bool, 1)
	k.waiters[id] = ch
	return ch
}

// ensure starts the listener when none runs and someone waits, and returns the channel closed
// once it listens.
func (k *slotWaker) ensure(q store.ResourceQueue) <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cancel != nil || len(k.waiters) == 0 {
		return k.ready
	}
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	k.gen++
	gen := k.gen
	ready := make(chan struct{})
	k.ready = ready
	go func() {
		_ = q.ListenSlots(ctx, func() { close(ready) }, k.wake)
		k.mu.Lock()
		if k.gen == gen && k.cancel != nil { // ended on its own (a lost connection): the next ensure starts another
			k.cancel()
			k.cancel = nil
		}
		k.mu.Unlock()
	}()
	return ready
}

// remove unregisters holder id; the listener stops when nobody waits.
func (k *slotWaker) remove(id string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.waiters, id)
	if len(k.waiters) == 0 && k.cancel != nil {
		k.cancel()
		k.cancel = nil
		k.gen++
	}
}

// wake passes one notification to its waiter, if it is this engine's.
func (k *slotWaker) wake(w store.SlotWake) {
	k.mu.Lock()
	ch := k.waiters[w.Holder]
	k.mu.Unlock()
	if ch == nil {
		return
	}
	for {
		select {
		case ch <- w.Granted:
			return
		default:
		}
		select { // full: keep a grant over a retry
		case old := <-ch:
			if old && !w.Granted {
				w.Granted = true
			}
		default:
		}
	}
}
