package spec

import (
	"fmt"
	"strconv"
)

// Ranges of the numbers a step may set. A value outside its range is a validation problem
// (invalid_policy, or invalid_value for concurrency) that names the field, the range and the
// value as written: nothing is rounded, clamped or overflowed into another meaning silently
// (a timeout of 1e-10 s would otherwise round to 0, which means "no timeout").
const (
	// MinTimeoutSecs is the shortest timeout_secs: 1 ms.
	MinTimeoutSecs = 0.001
	// MaxTimeoutSecs is the longest timeout_secs: 365 days (approvals included).
	MaxTimeoutSecs = 365 * 24 * 3600
	// MaxRetryAttempts is the largest retry.max_attempts; the smallest is 1 (no retry).
	MaxRetryAttempts = 10_000
	// MaxRetryDelayMs is the largest retry.initial_delay_ms and retry.max_delay_ms: 24 hours.
	// The smallest is 0.
	MaxRetryDelayMs = 24 * 3600 * 1000
	// MinMultiplier and MaxMultiplier bound retry.multiplier, the growth factor of exponential
	// backoff (1 = every delay is the initial one; the default, when not set, is 2).
	MinMultiplier = 1
	MaxMultiplier = 100
	// MaxIdempotencyTTLSecs is the largest idempotency_ttl_secs: 10 years. 0 means no expiry.
	MaxIdempotencyTTLSecs = 10 * 365 * 24 * 3600
	// MaxConcurrency is the largest foreach concurrency; the smallest is 1.
	MaxConcurrency = 100_000
	// MaxResourceAmount is the largest amount of one resource a step asks for, and the largest
	// limit an engine declares for one; the smallest of each is 1.
	MaxResourceAmount = 1_000_000
	// MinPriority and MaxPriority bound a run's priority (the spec's `priority`, a run's own);
	// the default is 0 and higher is served first.
	MinPriority = -1000
	MaxPriority = 1000
)

// numberText returns the text of the number a step's field was written with ("1e18"), for
// messages, or v formatted when the step was built in Go.
func (s *Step) numberText(key string, v float64) string {
	if t, ok := s.texts[key]; ok {
		return t
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// checkRange adds a problem and returns false when val is outside [lo, hi]; what says what the
// bounds mean.
func (v *validator) checkRange(st *Step, code, key, path string, val, lo, hi float64, what string) bool {
	if val >= lo && val <= hi {
		return true
	}
	v.add(code, st, key, path, fmt.Sprintf("`%s` must be between %s and %s (%s); got %s",
		key, fmtBound(lo), fmtBound(hi), what, st.numberText(key, val)))
	return false
}

func fmtBound(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
