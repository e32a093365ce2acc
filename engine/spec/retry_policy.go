package spec

import (
	"math"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Backoff is the shape of the delays between attempts.
type Backoff string

// Backoff shapes.
const (
	BackoffFixed       Backoff = "fixed"
	BackoffLinear      Backoff = "linear"
	BackoffExponential Backoff = "exponential"
)

// RetryPolicy says how often and how soon a failed step is attempted again.
type RetryPolicy struct {
	MaxAttempts    int     // ≥ 1; 1 = no retry
	Backoff        Backoff // default exponential
	InitialDelayMs int64   // default 500; must be ≤ MaxDelayMs
	MaxDelayMs     int64   // default 10000; clamps the delay before jitter
	Jitter         float64 // relative, in [0, 1]; out-of-range values are clamped at parse time
	// Multiplier is the growth factor of exponential backoff, MinMultiplier to MaxMultiplier;
	// 0 (not set) means 2 computed as before multipliers existed, so specs without it keep
	// their delays and their hash. Only exponential backoff takes one.
	Multiplier float64
	RetryOn    []string
	// RetryOn nil means the default rule (run.RetryableByDefault); an explicit list, even empty,
	// retries exactly the kinds it names.
}

// DefaultRetryPolicy returns the defaults of docs/reference/spec.md ("retry": exponential backoff, 500 ms
// initial delay, 10000 ms maximum, no jitter) with MaxAttempts 1.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 1, Backoff: BackoffExponential, InitialDelayMs: 500, MaxDelayMs: 10000}
}

// NextDelay returns the unjittered delay before attempt n (1-based): 0 for n ≤ 1; for n ≥ 2,
// fixed = initial, linear = initial·(n−1), exponential = initial·m^(n−2) with m the Multiplier
// (2 when not set), clamped to MaxDelayMs and truncated to whole milliseconds. With a
// Multiplier, m^(n−2) is computed as n−2 float64 multiplications of initial by m, stopping once
// past MaxDelayMs: the rule the Python package repeats bit for bit (testdata/golden).
// The result never overflows: huge attempt numbers give MaxDelayMs.
func (r RetryPolicy) NextDelay(n int) time.Duration {
	return time.Duration(r.NextDelayMs(n)) * time.Millisecond
}

// NextDelayMs is NextDelay in whole milliseconds.
func (r RetryPolicy) NextDelayMs(n int) int64 {
	if n <= 1 {
		return 0
	}
	initial, max := r.InitialDelayMs, r.MaxDelayMs
	if initial < 0 {
		initial = 0
	}
	var d float64
	switch r.Backoff {
	case BackoffFixed:
		d = float64(initial)
	case BackoffLinear:
		d = float64(initial) * float64(n-1)
	case BackoffExponential, "":
		if r.Multiplier != 0 {
			d = float64(initial)
			for i := 0; i < n-2 && d <= float64(max) && d > 0; i++ {
				d *= r.Multiplier
			}
			break
		}
		fallthrough
	default: // exponential with the default multiplier 2
		e := n - 2
		if e > 62 {
			e = 62
		}
		d = float64(initial) * math.Pow(2, float64(e))
	}
	if max >= 0 && d > float64(max) {
		return max
	}
	if d > math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(d)
}

// Jittered applies the policy's jitter to a delay: d·(1 + u·Jitter) where u is uniform in [−1, 1]
// and comes from rnd (which must return values in [0, 1), e.g. rand.Float64 of a seeded source).
// The result is never negative.
func (r RetryPolicy) Jittered(d time.Duration, rnd func() float64) time.Duration {
	if r.Jitter <= 0 || d <= 0 || rnd == nil {
		return d
	}
	u := rnd()*2 - 1
	out := time.Duration(float64(d) * (1 + u*r.Jitter))
	if out < 0 {
		return 0
	}
	return out
}

// IsRetryable reports whether an attempt that failed with kind may be retried: kind is in RetryOn,
// or, when RetryOn is nil, kind is retryable by default (everything except fatal, cancelled,
// invalid_input, permission and not_found). Cancelled is never retried.
func (r RetryPolicy) IsRetryable(kind string) bool {
	if kind == run.KindCancelled {
		return false
	}
	if r.RetryOn == nil {
		return run.RetryableByDefault(kind)
	}
	if kind == "" {
		kind = run.KindError
	}
	for _, k := range r.RetryOn {
		if k == kind {
			return true
		}
	}
	return false
}
