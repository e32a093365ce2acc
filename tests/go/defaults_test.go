package gotest

import (
	"context"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The engine's defaults, the spec's defaults and a step's own policy, in that order of
// precedence (lowest first), decide how often each tool step is attempted.
func TestDefaultsPrecedenceInRuns(t *testing.T) {
	t.Parallel()
	engineRetry := func(c *engine.Config) {
		c.Defaults = &engine.PolicyDefaults{Retry: map[string]any{"max_attempts": 4, "backoff": "fixed", "initial_delay_ms": 0}}
	}
	cases := []struct {
		name     string
		cfg      func(*engine.Config)
		spec     string
		attempts map[string]int
	}{
		{"built-in: no retry", nil, `
steps:
  - {id: a, tool: flow__fail, args: {}}
`, map[string]int{"a": 1}},
		{"engine defaults", engineRetry, `
steps:
  - {id: a, tool: flow__fail, args: {}}
`, map[string]int{"a": 4}},
		{"spec defaults over the engine's", engineRetry, `
defaults: {retry: {max_attempts: 2, backoff: fixed, initial_delay_ms: 0}}
steps:
  - {id: a, tool: flow__fail, args: {}}
`, map[string]int{"a": 2}},
		{"a step's own over both", engineRetry, `
defaults: {retry: {max_attempts: 2, backoff: fixed, initial_delay_ms: 0}}
steps:
  - id: p
    kind: parallel
    on_any_fail: continue
    steps:
      - {id: own, tool: flow__fail, args: {}, retry: {max_attempts: 3, backoff: fixed, initial_delay_ms: 0}}
      - {id: none, tool: flow__fail, args: {}, retry: {max_attempts: 1}}
      - {id: inherits, tool: flow__fail, args: {}}
`, map[string]int{"own": 3, "none": 1, "inherits": 2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var opts []setupOpt
			if c.cfg != nil {
				opts = append(opts, withConfig(c.cfg))
			}
			b := setup(t, opts...)
			info := b.run(c.spec, nil)
			if info.Status != run.StatusFailed {
				t.Fatalf("status %s", info.Status)
			}
			steps := b.steps(info.ID)
			for key, want := range c.attempts {
				if got := steps[key].Attempts; got != want {
					t.Errorf("%s: %d attempts, want %d", key, got, want)
				}
			}
		})
	}
}

func TestDefaultTimeoutAppliesToToolSteps(t *testing.T) {
	t.Parallel()
	b := setup(t, withConfig(func(c *engine.Config) { c.Defaults = &engine.PolicyDefaults{TimeoutSecs: 30} }))
	// The spec's 0.05 s comes before the engine's 30 s; the step with its own 60 s is not cut.
	info := b.run(`
defaults: {timeout_secs: 0.05}
steps:
  - id: p
    kind: parallel
    on_any_fail: continue
    steps:
      - {id: slow, tool: flow__sleep, args: {ms: 3000}}
      - {id: own, tool: flow__sleep, args: {ms: 200}, timeout_secs: 60}
`, nil)
	steps := b.steps(info.ID)
	if s := steps["slow"]; s.Status != run.StepFailed || s.Error == nil || s.Error.Kind != run.KindTimeout {
		t.Fatalf("slow: %+v %+v", s.Status, s.Error)
	}
	if s := steps["own"]; s.Status != run.StepCompleted {
		t.Fatalf("own: %s %+v", s.Status, s.Error)
	}
}

func TestMultiplierDelaysInARun(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(`
steps:
  - id: s
    tool: flow__fail
    args: { times: 4, kind: transient }
    retry: { max_attempts: 5, multiplier: 3, initial_delay_ms: 100, max_delay_ms: 2000 }
`, nil)
	for i, want := range []time.Duration{100, 300, 900, 2000} {
		b.waitTimers(1)
		if d := b.nextTimerIn(); d != want*time.Millisecond {
			t.Fatalf("delay before attempt %d: %v, want %v", i+2, d, want*time.Millisecond)
		}
		b.waitStep(id, "s", run.StepRetrying)
		b.clk.AdvanceToNext()
	}
	if info := b.wait(id); info.Status != run.StatusCompleted {
		t.Fatalf("status %s", info.Status)
	}
}

func TestEngineDefaultsAreValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    engine.PolicyDefaults
		want string
	}{
		{engine.PolicyDefaults{TimeoutSecs: -1}, "defaults.timeout_secs"},
		{engine.PolicyDefaults{Retry: map[string]any{"backoff": "fixed"}}, "`retry` needs `max_attempts`"},
		{engine.PolicyDefaults{Retry: map[string]any{"max_attempts": 2, "multiplier": 0.5}}, "defaults.retry.multiplier"},
		{engine.PolicyDefaults{Retry: map[string]any{"max_attempts": 2, "max_atempts": 2}}, `unknown field "max_atempts"`},
	} {
		d := c.d
		_, err := engine.Open(context.Background(), engine.Config{Defaults: &d})
		if codeOf(err) != run.CodeInvalidRequest {
			t.Fatalf("%+v: %v", c.d, err)
		}
		mustContain(t, "error", err.Error(), "invalid engine config", c.want)
	}
}
