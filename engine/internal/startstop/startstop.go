// Package startstop is the life cycle of the engine's background work (the lease loop, the
// tool-call queue, the control poller, the retention loop, the scheduler): each is a Service
// that starts its goroutines and stops them, and a Group starts services in order and stops them
// in reverse, so that Engine.Open and Engine.Close do not order them by hand. Modelled on
// River's rivershared/startstop.
package startstop

import (
	"context"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

// Service is background work that runs between Start and Stop.
type Service interface {
	// Start starts the work and returns once it is started; the work runs until Stop, not
	// until ctx ends (ctx bounds only the start itself). Starting a started service is not an
	// error: it does nothing.
	Start(ctx context.Context) error
	// Stop stops the work and returns once its goroutines have returned. Stopping a service
	// that is not started (or already stopped) does nothing.
	Stop()
}

// Base is the bookkeeping of a Service with one loop goroutine: embed it and call Go from Start.
// Its zero value is ready; a Base may be started again after Stop.
type Base struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Go starts loop in its own goroutine with a context that Stop cancels (the values of ctx
// kept, its cancellation not: the loop outlives the start). It reports false, and starts
// nothing, when the loop of an earlier Go still runs.
func (b *Base) Go(ctx context.Context, loop func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		return false
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	b.cancel, b.done = cancel, done
	go func() {
		defer close(done)
		loop(lctx)
	}()
	return true
}

// Stop cancels the loop's context and waits for the loop to return. Safe to call more than
// once, concurrently, or before Go.
func (b *Base) Stop() {
	b.mu.Lock()
	cancel, done := b.cancel, b.done
	b.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	b.mu.Lock()
	if b.done == done {
		b.cancel, b.done = nil, nil
	}
	b.mu.Unlock()
}

// Running reports whether a loop started by Go has not been stopped.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done != nil
}

// Group starts services in order and stops them in reverse: Engine.Open starts its cluster
// services through one, Engine.Close stops them once the runs have ended.
type Group struct {
	mu      sync.Mutex
	started []Service // in the order they were started
}

// Start starts each of services in order and adds it to the group. When one fails to start,
// those this call started are stopped, in reverse, and its error is returned.
func (g *Group) Start(ctx context.Context, services ...Service) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				services[j].Stop()
			}
			return err
		}
	}
	g.started = append(g.started, services...)
	return nil
}

// Stop stops every service of the group, the last started first, and empties the group.
func (g *Group) Stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := len(g.started) - 1; i >= 0; i-- {
		g.started[i].Stop()
	}
	g.started = nil
}

// Periodic is a Service that calls Fn at once (unless Delay) and then every Period on Clock,
// until Stop: the retention loop and the control poller. A call in progress finishes before
// Stop returns; its ctx is cancelled by Stop. Period must be positive.
type Periodic struct {
	Clock  clock.Clock
	Period time.Duration
	// Delay: the first call comes after a Period, not at Start.
	Delay bool
	Fn    func(ctx context.Context)

	loop Base
}

// Start starts the calls; starting a started Periodic does nothing.
func (p *Periodic) Start(ctx context.Context) error {
	p.loop.Go(ctx, func(ctx context.Context) {
		if p.Delay && clock.Sleep(ctx, p.Clock, p.Period) != nil {
			return
		}
		for {
			p.Fn(ctx)
			if clock.Sleep(ctx, p.Clock, p.Period) != nil {
				return
			}
		}
	})
	return nil
}

// Stop stops the calls and waits for one in progress.
func (p *Periodic) Stop() { p.loop.Stop() }

// Running reports whether the calls are started and not stopped.
func (p *Periodic) Running() bool { return p.loop.Running() }
