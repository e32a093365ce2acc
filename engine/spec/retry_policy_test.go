package spec_test

import (
	"math/rand"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func TestNextDelay(t *testing.T) {
	t.Parallel()
	mk := func(b spec.Backoff, initial, max int64) spec.RetryPolicy {
		return spec.RetryPolicy{MaxAttempts: 10, Backoff: b, InitialDelayMs: initial, MaxDelayMs: max}
	}
	cases := []struct {
		name string
		p    spec.RetryPolicy
		n    int
		want int64
	}{
		{"attempt 1 has no delay", mk(spec.BackoffExponential, 500, 10000), 1, 0},
		{"attempt 0", mk(spec.BackoffFixed, 500, 10000), 0, 0},
		{"negative attempt", mk(spec.BackoffFixed, 500, 10000), -3, 0},
		{"fixed 2", mk(spec.BackoffFixed, 500, 10000), 2, 500},
		{"fixed 9", mk(spec.BackoffFixed, 500, 10000), 9, 500},
		{"linear 2", mk(spec.BackoffLinear, 500, 10000), 2, 500},
		{"linear 4", mk(spec.BackoffLinear, 500, 10000), 4, 1500},
		{"linear clamped", mk(spec.BackoffLinear, 500, 1000), 4, 1000},
		{"exponential 2", mk(spec.BackoffExponential, 500, 10000), 2, 500},
		{"exponential 3", mk(spec.BackoffExponential, 500, 10000), 3, 1000},
		{"exponential 5", mk(spec.BackoffExponential, 500, 10000), 5, 4000},
		{"exponential clamped", mk(spec.BackoffExponential, 500, 10000), 7, 10000},
		{"exponential huge n", mk(spec.BackoffExponential, 500, 10000), 1 << 30, 10000},
		{"fixed clamped", mk(spec.BackoffFixed, 500, 100), 2, 100},
	}
	for _, tc := range cases {
		if got := tc.p.NextDelayMs(tc.n); got != tc.want {
			t.Errorf("%s: NextDelayMs(%d) = %d, want %d", tc.name, tc.n, got, tc.want)
		}
		if got := tc.p.NextDelay(tc.n); got != time.Duration(tc.want)*time.Millisecond {
			t.Errorf("%s: NextDelay(%d) = %v", tc.name, tc.n, got)
		}
	}
	if d := spec.DefaultRetryPolicy(); d.Backoff != spec.BackoffExponential || d.InitialDelayMs != 500 || d.MaxDelayMs != 10000 || d.Jitter != 0 {
		t.Fatalf("defaults %+v", d)
	}
}

func TestJitteredStaysInBounds(t *testing.T) {
	t.Parallel()
	p := spec.RetryPolicy{Jitter: 0.25}
	rnd := rand.New(rand.NewSource(1)).Float64
	base := time.Second
	lo, hi := base, base
	for i := 0; i < 10000; i++ {
		d := p.Jittered(base, rnd)
		if d < 750*time.Millisecond || d > 1250*time.Millisecond {
			t.Fatalf("jittered %v out of bounds", d)
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if hi-lo < 400*time.Millisecond {
		t.Fatalf("jitter barely applied: [%v, %v]", lo, hi)
	}
	if (spec.RetryPolicy{}).Jittered(base, rnd) != base {
		t.Fatal("zero jitter changed the delay")
	}
}

func TestIsRetryable(t *testing.T) {
	t.Parallel()
	def := spec.RetryPolicy{MaxAttempts: 3}
	for kind, want := range map[string]bool{
		"transient": true, "timeout": true, "error": true, "": true, "vendor_specific": true,
		"fatal": false, "cancelled": false, "invalid_input": false, "permission": false, "not_found": false,
	} {
		if got := def.IsRetryable(kind); got != want {
			t.Errorf("default IsRetryable(%q) = %v", kind, got)
		}
	}
	only := spec.RetryPolicy{MaxAttempts: 3, RetryOn: []string{"transient", "not_found"}}
	for kind, want := range map[string]bool{"transient": true, "not_found": true, "timeout": false, "validation": false, "cancelled": false} {
		if got := only.IsRetryable(kind); got != want {
			t.Errorf("retry_on IsRetryable(%q) = %v", kind, got)
		}
	}
	if (spec.RetryPolicy{RetryOn: []string{}}).IsRetryable("transient") {
		t.Error("empty retry_on retried")
	}
}
