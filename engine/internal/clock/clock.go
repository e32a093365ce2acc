// Package clock is the engine's source of time. Engine logic asks a Clock for the time, for
// timers and for sleeps instead of calling the time package, so that tests of retries, timeouts,
// TTLs, approval timeouts and stall detection run on a Stub that only moves when told to.
package clock

import (
	"context"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// Clock tells the time and schedules wake-ups (flowtype.Clock, defined in public so that
// callers can pass their own to engine.WithClock). Implementations are safe for concurrent use.
type Clock = flowtype.Clock

// Timer is a pending wake-up of a Clock (flowtype.Timer).
type Timer = flowtype.Timer

// Sleep waits for d on c, or until ctx ends. It returns nil after a full sleep, else
// context.Cause(ctx). d ≤ 0 returns at once (nil, or the cause if ctx has already ended).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	t := c.NewTimer(d)
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		t.Stop()
		return context.Cause(ctx)
	}
}

// WithTimeout returns a child of parent that is cancelled with cause once d has elapsed on c,
// and a function that releases its resources (call it when done). d ≤ 0 means no timeout:
// only a cancellable child is returned.
func WithTimeout(parent context.Context, c Clock, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	if d <= 0 {
		return ctx, func() { cancel(context.Canceled) }
	}
	t := c.AfterFunc(d, func() { cancel(cause) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// Real is the Clock of the time package.
type Real struct{}

// New returns the real clock.
func New() Clock { return Real{} }

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) Timer { return realTimer{t: time.NewTimer(d)} }

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return realTimer{t: time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }
