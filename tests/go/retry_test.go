package gotest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// retrySpec fails `times` times with `kind` under the given retry policy (delays of 100 ms).
func retrySpec(times int, kind, retryOn string, maxAttempts int) string {
	return fmt.Sprintf(`
name: retry
steps:
  - id: flaky
    tool: flow__fail
    args: { times: %d, kind: %s }
    retry: { max_attempts: %d, backoff: fixed, initial_delay_ms: 100, max_delay_ms: 100%s }
`, times, kind, maxAttempts, retryOn)
}

func TestRetryCountsPerKind(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		times       int
		kind        string
		retryOn     string
		max         int
		wantStatus  run.Status
		wantAttempt int
	}{
		{"transient twice then ok", 2, "transient", "", 5, run.StatusCompleted, 3},
		{"validation not in retry_on", 5, "validation", ", retry_on: [transient]", 5, run.StatusFailed, 1},
		{"timeout kind in retry_on", 1, "timeout", ", retry_on: [transient, timeout]", 3, run.StatusCompleted, 2},
		{"attempts exhausted", 9, "transient", "", 3, run.StatusFailed, 3},
		{"custom kind retried by default", 1, "render_farm_busy", "", 2, run.StatusCompleted, 2},
		{"error kind retried by default", 1, "error", "", 2, run.StatusCompleted, 2},
		{"fatal never by default", 1, "fatal", "", 5, run.StatusFailed, 1},
		{"invalid_input never by default", 1, "invalid_input", "", 5, run.StatusFailed, 1},
		{"permission never by default", 1, "permission", "", 5, run.StatusFailed, 1},
		{"not_found never by default", 1, "not_found", "", 5, run.StatusFailed, 1},
		{"cancelled never, even when listed", 1, "cancelled", ", retry_on: [cancelled]", 5, run.StatusFailed, 1},
		{"fatal when listed", 1, "fatal", ", retry_on: [fatal]", 5, run.StatusCompleted, 2},
		{"empty retry_on retries nothing", 1, "transient", ", retry_on: []", 5, run.StatusFailed, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, withStubClock())
			id := b.submit(retrySpec(c.times, c.kind, c.retryOn, c.max), nil)
			for i := 1; i < c.wantAttempt; i++ {
				b.waitTimers(1)
				if d := b.nextTimerIn(); d != 100*time.Millisecond {
					t.Fatalf("backoff before attempt %d is %v", i+1, d)
				}
				b.clk.AdvanceToNext()
			}
			info := b.wait(id)
			if info.Status != c.wantStatus {
				t.Fatalf("status %s, want %s (%+v)", info.Status, c.wantStatus, info.Error)
			}
			step := b.steps(id)["flaky"]
			if step.Attempts != c.wantAttempt {
				t.Fatalf("attempts %d, want %d", step.Attempts, c.wantAttempt)
			}
			if c.wantStatus == run.StatusFailed && (info.Error.Kind != c.kind || step.Error.Kind != c.kind) {
				t.Fatalf("error kind %+v / %+v", info.Error, step.Error)
			}
			if c.wantStatus == run.StatusCompleted {
				if out := info.Outputs["flaky"].(map[string]any); out["attempt"] != float64(c.wantAttempt) || step.Error != nil {
					t.Fatalf("output %+v, error %+v", out, step.Error)
				}
			}
			retries := b.eventTypes(id, run.EventStepRetry)
			if len(retries) != c.wantAttempt-1 {
				t.Fatalf("%d step_retry events, want %d: %v", len(retries), c.wantAttempt-1, retries)
			}
		})
	}
}

func TestBackoffShapesAndRetryEvents(t *testing.T) {
	t.Parallel()
	cases := []struct {
		backoff string
		want    []time.Duration // delays before attempts 2..5
	}{
		{"fixed", []time.Duration{200, 200, 200, 200}},
		{"linear", []time.Duration{200, 400, 600, 700}},
		{"exponential", []time.Duration{200, 400, 700, 700}},
	}
	for _, c := range cases {
		t.Run(c.backoff, func(t *testing.T) {
			t.Parallel()
			b := setup(t, withStubClock())
			id := b.submit(fmt.Sprintf(`
steps:
  - id: s
    tool: flow__fail
    args: { times: 4, kind: transient }
    retry: { max_attempts: 5, backoff: %s, initial_delay_ms: 200, max_delay_ms: 700 }
`, c.backoff), nil)
			for i, want := range c.want {
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
			var delays []int64
			for _, e := range b.events(id) {
				if e.Type == run.EventStepRetry {
					var d struct {
						DelayMs int64 `json:"delay_ms"`
						Error   struct{ Kind, Message string }
					}
					mustUnmarshal(t, e.Detail, &d)
					if d.Error.Kind != "transient" || e.Status != string(run.StepRetrying) || e.StepKey != "s" {
						t.Fatalf("retry event %+v (%s)", e, e.Detail)
					}
					delays = append(delays, d.DelayMs)
				}
			}
			if jsonOf(t, delays) != jsonOf(t, c.want) {
				t.Fatalf("delays in events %v, want %v", delays, c.want)
			}
		})
	}
}

func TestJitterIsAppliedAndSeeded(t *testing.T) {
	t.Parallel()
	text := `
steps:
  - id: s
    tool: flow__fail
    args: { times: 3, kind: transient }
    retry: { max_attempts: 4, backoff: fixed, initial_delay_ms: 1000, max_delay_ms: 1000, jitter: 0.5 }
`
	delays := func(src rand.Source) []time.Duration {
		b := setup(t, withStubClock(), withOptions(engine.WithRandSource(src)))
		id := b.submit(text, nil)
		var out []time.Duration
		for range 3 {
			b.waitTimers(1)
			out = append(out, b.nextTimerIn())
			b.clk.AdvanceToNext()
		}
		if info := b.wait(id); info.Status != run.StatusCompleted {
			t.Fatalf("status %s", info.Status)
		}
		return out
	}
	a := delays(rand.NewPCG(1, 2))
	again := delays(rand.NewPCG(1, 2))
	other := delays(rand.NewPCG(3, 4))
	if jsonOf(t, a) != jsonOf(t, again) {
		t.Fatalf("same seed, different delays: %v %v", a, again)
	}
	if jsonOf(t, a) == jsonOf(t, other) {
		t.Fatalf("different seeds, same delays: %v", a)
	}
	distinct := map[time.Duration]bool{}
	for _, d := range append(a, other...) {
		if d < 500*time.Millisecond || d > 1500*time.Millisecond {
			t.Fatalf("delay %v outside 1000 ms ± 50%%", d)
		}
		distinct[d] = true
	}
	if len(distinct) < 4 {
		t.Fatalf("jitter does not vary the delays: %v %v", a, other)
	}
}

func TestTimeoutOfASlowTool(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(`
steps:
  - id: slow
    tool: flow__sleep
    args: { ms: 60000 }
    timeout_secs: 2
`, nil)
	b.waitTimers(2) // the attempt's deadline and the sleep
	if d := b.nextTimerIn(); d != 2*time.Second {
		t.Fatalf("first timer in %v", d)
	}
	b.clk.Advance(2 * time.Second)
	info := b.wait(id)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindTimeout {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	mustContain(t, "message", info.Error.Message, "attempt 1 timed out after 2s")
	if st := b.steps(id)["slow"]; st.Attempts != 1 || st.Error.Kind != "timeout" {
		t.Fatalf("step %+v", st)
	}
}

func TestTimeoutIsPerAttemptAndRetried(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__export"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - id: export
    tool: maya__export
    timeout_secs: 5
    retry: { max_attempts: 2, initial_delay_ms: 100, retry_on: [timeout] }
`, nil)
	first := b.nextCall(flowtype.LaneMain)
	if first.Attempt != 1 || !first.Deadline.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("first call %+v", first)
	}
	b.clk.Advance(5 * time.Second) // attempt 1 times out
	b.waitFor("the timed-out call to report Cancelled", func() bool { return b.eng.Host().Cancelled(first.ID) })
	// The host stops the tool (within the interrupt grace): its answer is late, and dropped.
	err := b.eng.Host().Complete(first.ID, output("late"))
	if re := asRunError(err); re == nil || re.Code != run.CodeInvalidState || !errors.Is(err, flowtype.ErrDropped) {
		t.Fatalf("a late result is dropped and reported: %v", err)
	}
	mustContain(t, "late completion", err.Error(), "attempt 1 timed out")
	b.waitStep(id, "export", run.StepRetrying) // the attempt ended: its grace timer is gone
	b.waitTimers(1)
	b.clk.AdvanceToNext() // backoff
	second := b.nextCall(flowtype.LaneMain)
	// Attempt 2's deadline counts from when it was pulled, after the backoff.
	if second.Attempt != 2 || !second.Deadline.Equal(t0.Add(5*time.Second+100*time.Millisecond+5*time.Second)) {
		t.Fatalf("second call %+v", second)
	}
	if err := b.eng.Host().Complete(second.ID, output(map[string]any{"fbx": "a.fbx"})); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if info.Status != run.StatusCompleted || info.Outputs["export"].(map[string]any)["fbx"] != "a.fbx" {
		t.Fatalf("status %s outputs %+v", info.Status, info.Outputs)
	}
}
