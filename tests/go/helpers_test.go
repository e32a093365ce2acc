// Package gotest holds the black-box tests of dcc-flow: everything goes through the engine
// facade (and, for tool hosts, its Host queue), as the C ABI and MCP do.
package gotest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

var t0 = time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC)

// waitLimit bounds every blocking wait of a test; a test that reaches it has failed.
const waitLimit = 20 * time.Second

type testBundle struct {
	t   *testing.T
	eng *engine.Engine
	clk *engine.StubClock // nil unless setup got withStubClock
	ctx context.Context
	// testPuller is the puller nextCall pulls with (0 until the first nextCall).
	testPuller uint64
}

type setupConfig struct {
	cfg  engine.Config
	stub bool
	opts []engine.Option
}

type setupOpt func(*setupConfig)

// withStubClock runs the engine on a stub clock starting at t0.
func withStubClock() setupOpt { return func(c *setupConfig) { c.stub = true } }

// withConfig edits the engine config.
func withConfig(fn func(*engine.Config)) setupOpt { return func(c *setupConfig) { fn(&c.cfg) } }

// withOptions adds engine options.
func withOptions(opts ...engine.Option) setupOpt {
	return func(c *setupConfig) { c.opts = append(c.opts, opts...) }
}

// setup opens an in-memory engine (stall detection off, seed 42) closed at the end of the test.
func setup(t *testing.T, opts ...setupOpt) *testBundle {
	t.Helper()
	c := setupConfig{cfg: engine.Config{StallAfterSecs: -1, Seed: 42}}
	for _, o := range opts {
		o(&c)
	}
	b := &testBundle{t: t}
	if c.stub {
		b.clk = engine.NewStubClock(t0)
		c.opts = append(c.opts, engine.WithClock(b.clk))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	b.ctx = ctx
	eng, err := engine.Open(ctx, c.cfg, c.opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	b.eng = eng
	t.Cleanup(func() {
		if err := eng.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func parse(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if err := s.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return s
}

// sub returns the bundle for a parallel subtest t of the test that set b up: the same engine,
// with t (so that a failure is the subtest's) and a context whose waitLimit starts now (a
// parallel subtest may start long after the bundle was set up, once the package's other
// parallel tests leave it a slot).
func (b *testBundle) sub(t *testing.T) *testBundle {
	t.Helper()
	c := *b
	c.t = t
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	t.Cleanup(cancel)
	c.ctx = ctx
	return &c
}

// run runs a spec to the end and returns its status.
func (b *testBundle) run(text string, inputs map[string]any) *engine.RunInfo {
	b.t.Helper()
	info, err := b.eng.Run(b.ctx, engine.StartRequest{Spec: parse(b.t, text), Inputs: inputs})
	if err != nil {
		b.t.Fatalf("Run: %v", err)
	}
	if !info.Terminal {
		b.t.Fatalf("Run returned a non-terminal run: %+v", info)
	}
	return info
}

func (b *testBundle) submit(text string, inputs map[string]any) string {
	b.t.Helper()
	id, err := b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(b.t, text), Inputs: inputs})
	if err != nil {
		b.t.Fatalf("Submit: %v", err)
	}
	return id
}

func (b *testBundle) wait(id string) *engine.RunInfo {
	b.t.Helper()
	info, err := b.eng.Wait(b.ctx, id, 0)
	if err != nil {
		b.t.Fatalf("Wait: %v", err)
	}
	return info
}

func (b *testBundle) status(id string) *engine.RunInfo {
	b.t.Helper()
	info, err := b.eng.Status(b.ctx, id)
	if err != nil {
		b.t.Fatalf("Status: %v", err)
	}
	return info
}

// steps returns every step instance of a run by key.
func (b *testBundle) steps(id string) map[string]engine.StepInfo {
	b.t.Helper()
	all, err := b.eng.Steps(b.ctx, id)
	if err != nil {
		b.t.Fatalf("Steps: %v", err)
	}
	out := make(map[string]engine.StepInfo, len(all))
	for _, s := range all {
		out[s.Key] = s
	}
	return out
}

// events returns every event of a run written so far.
func (b *testBundle) events(id string) []run.Event {
	b.t.Helper()
	var out []run.Event
	q := engine.EventQuery{RunID: id, Max: 10000}
	for {
		evs, err := b.eng.PollEvents(b.ctx, q, 0)
		if err != nil {
			b.t.Fatalf("PollEvents: %v", err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		q.FromSeq = evs[len(evs)-1].Seq + 1
	}
}

// eventTypes lists "type:step_key:status" of a run's events of the given types (all when none).
func (b *testBundle) eventTypes(id string, types ...string) []string {
	b.t.Helper()
	var out []string
	for _, e := range b.events(id) {
		if len(types) > 0 && !contains(types, e.Type) {
			continue
		}
		out = append(out, e.Type+":"+e.StepKey+":"+e.Status)
	}
	return out
}

// waitFor polls cond (in real time) until it holds.
func (b *testBundle) waitFor(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// waitStep waits until a step instance has the given status.
func (b *testBundle) waitStep(id, key string, status run.StepStatus) {
	b.t.Helper()
	b.waitFor(key+" to be "+string(status), func() bool {
		all, err := b.eng.Steps(b.ctx, id)
		if err != nil {
			return false
		}
		for _, s := range all {
			if s.Key == key {
				return s.Status == status
			}
		}
		return false
	})
}

// waitTimers waits until the stub clock has n pending timers.
func (b *testBundle) waitTimers(n int) {
	b.t.Helper()
	if err := b.clk.WaitForTimers(b.ctx, n); err != nil {
		b.t.Fatalf("waiting for %d timers (have %d): %v", n, b.clk.Pending(), err)
	}
}

// nextTimerIn returns how far in the future the earliest pending timer is.
func (b *testBundle) nextTimerIn() time.Duration {
	b.t.Helper()
	when, ok := b.clk.Next()
	if !ok {
		b.t.Fatal("no timer pending")
	}
	return when.Sub(b.clk.Now())
}

// server serves host tools in a goroutine, like a Python host would.
type server struct {
	calls    atomic.Int64
	inFlight atomic.Int64
	maxSeen  atomic.Int64
	mu       sync.Mutex
	seen     []flowtype.PendingCall
}

// serve pulls calls of lane and answers each with handle, in its own goroutine per call, until
// the test ends. It pulls as a host thread does in production (Python through the C ABI): with
// its own puller, in batches, and a pull that waits for the next call.
func (b *testBundle) serve(lane string, handle func(flowtype.PendingCall) flowtype.ToolResult) *server {
	s := &server{}
	puller := b.puller()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		pull := flowtype.PullRequest{Lanes: []string{lane}, Max: 16, Timeout: 50 * time.Millisecond, Puller: puller}
		for ctx.Err() == nil {
			calls, err := b.eng.Host().Pull(ctx, pull)
			if err != nil {
				return
			}
			for _, c := range calls {
				s.calls.Add(1)
				n := s.inFlight.Add(1)
				for {
					m := s.maxSeen.Load()
					if n <= m || s.maxSeen.CompareAndSwap(m, n) {
						break
					}
				}
				s.mu.Lock()
				s.seen = append(s.seen, c)
				s.mu.Unlock()
				go func(c flowtype.PendingCall) {
					res := handle(c)
					s.inFlight.Add(-1)
					_ = b.eng.Host().Complete(c.ID, res)
				}(c)
			}
		}
	}()
	return s
}

func (s *server) pulled() []flowtype.PendingCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]flowtype.PendingCall(nil), s.seen...)
}

// nextCall pulls exactly one host call of lane, failing the test if none comes. The test's
// own puller holds it (b.puller) until it is answered.
func (b *testBundle) nextCall(lane string) flowtype.PendingCall {
	b.t.Helper()
	if b.testPuller == 0 {
		b.testPuller = b.puller()
	}
	calls, err := b.eng.Host().Pull(b.ctx, flowtype.PullRequest{Lanes: []string{lane}, Max: 1, Timeout: waitLimit, Puller: b.testPuller})
	if err != nil || len(calls) != 1 {
		b.t.Fatalf("Pull: %v %v", calls, err)
	}
	return calls[0]
}

// puller opens a puller on the engine's host for the test: production pulls as one per host
// thread (dccflow_puller_open). It is closed when the test ends (the calls it still holds go
// back to their lanes), before the engine is.
func (b *testBundle) puller() uint64 {
	b.t.Helper()
	id, err := b.eng.Host().OpenPuller("")
	if err != nil {
		b.t.Fatalf("OpenPuller: %v", err)
	}
	b.t.Cleanup(func() { b.eng.Host().ClosePuller(id) })
	return id
}

func output(v any) flowtype.ToolResult { return flowtype.ToolResult{Output: v} }

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	bs, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(bs)
}

func codeOf(err error) string { return run.CodeOf(err) }

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s %q does not contain %q", what, s, sub)
		}
	}
}

func asRunError(err error) *run.Error {
	var re *run.Error
	if errors.As(err, &re) {
		return re
	}
	return nil
}

func mustUnmarshal(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("unmarshal %s: %v", data, err)
	}
}
