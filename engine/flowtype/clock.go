package flowtype

import "time"

// Clock tells the time and schedules wake-ups: the engine's source of time (engine.WithClock).
// Engine logic asks a Clock instead of calling the time package, so that tests of retries,
// timeouts, TTLs, approval timeouts and stall detection run on a stub clock that only moves when
// told to (engine.NewStubClock). Implementations are safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that sends the time on its channel once d has elapsed.
	// d ≤ 0 fires at once.
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine (Real) or in the goroutine that advances the time
	// (Stub) once d has elapsed, unless the timer is stopped first. d ≤ 0 fires at once.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending wake-up of a Clock.
type Timer interface {
	// C is the channel the time is sent on; nil for a timer made by AfterFunc.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It returns false if the timer already fired or was
	// stopped.
	Stop() bool
}
