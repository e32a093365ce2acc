package exec_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

type testBundle struct {
	x     *exec.Executor
	store *memstore.Store
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	c := clock.New()
	return &testBundle{x: exec.New(exec.Config{Store: st, Clock: c, Router: tools.NewRouter(c, nil)}), store: st}
}

func (b *testBundle) start(t *testing.T, p exec.Params) store.Run {
	t.Helper()
	h, err := b.x.Start(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("run did not finish")
	}
	rec, err := b.store.GetRun(context.Background(), p.RunID)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func mustSpec(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPriorInstancesAreReused is the hook resume builds on: completed instances of an earlier
// execution of the run, foreach iterations included, are not run again and feed templates;
// the iteration that failed and the one the abort never started run.
func TestPriorInstancesAreReused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := mustSpec(t, `
steps:
  - { id: list, tool: flow__echo, args: { items: [{ n: 0 }, { n: 1 }, { n: 0 }] } }
  - id: each
    kind: foreach
    items: "$.list.items"
    steps:
      - { id: s, tool: flow__fail, args: { times: "{{item.n}}", kind: fatal } }
  - { id: after, tool: flow__echo, args: { all: "{{each}}", first: "{{list.items[0]}}" } }
`)
	ctx := context.Background()
	first := b.start(t, exec.Params{RunID: "r1", Spec: s, Origin: "local"})
	if first.Status != run.StatusFailed || first.Error.StepKey != "each[1].s" {
		t.Fatalf("first execution: %s %+v", first.Status, first.Error)
	}
	lastSeq, _ := b.store.LastSeq(ctx)
	prior, _ := b.store.ListSteps(ctx, "r1")
	second := b.start(t, exec.Params{RunID: "r1", Spec: s, Origin: "local", Prior: prior, Resume: true})
	if second.Status != run.StatusCompleted || second.Error != nil {
		t.Fatalf("second execution: %s %+v", second.Status, second.Error)
	}
	evs, _ := b.store.ListEvents(ctx, store.EventFilter{AfterSeq: lastSeq})
	var entered []string
	for _, e := range evs {
		if e.Type == run.EventStepEnter {
			entered = append(entered, e.StepKey)
		}
	}
	if got, _ := json.Marshal(entered); string(got) != `["each","each[1].s","each[2].s","after"]` {
		t.Fatalf("entered %s", got)
	}
	if evs[0].Type != run.EventWorkflowResumed || evs[len(evs)-1].Type != run.EventWorkflowTerminal {
		t.Fatalf("first %s last %s", evs[0].Type, evs[len(evs)-1].Type)
	}
	steps, _ := b.store.ListSteps(ctx, "r1")
	var after store.Step
	for _, st := range steps {
		if st.Key == "after" {
			after = st
		}
	}
	var out map[string]any
	_ = json.Unmarshal(after.Output, &out)
	all, _ := json.Marshal(out["all"])
	if string(all) != `[{"s":{"attempt":1,"failures":0}},{"s":{"attempt":1,"failures":1}},{"s":{"attempt":1,"failures":0}}]` {
		t.Fatalf("after sees %s", all)
	}
	if first, _ := json.Marshal(out["first"]); string(first) != `{"n":0}` {
		t.Fatalf("reused step output %s", first)
	}
	if second.Progress != (run.Progress{Completed: 6, Total: 6}) {
		t.Fatalf("progress %+v", second.Progress)
	}
}

func TestCheckInputs(t *testing.T) {
	t.Parallel()
	s := mustSpec(t, `
inputs:
  tags: { type: array, default: [a] }
  n: { type: number }
steps: [{ id: e, tool: flow__echo }]
`)
	got, err := exec.CheckInputs(s, map[string]any{"n": int64(3)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	if string(b) != `{"n":3,"tags":["a"]}` {
		t.Fatalf("inputs %s", b)
	}
	got["tags"].([]any)[0] = "changed"
	again, _ := exec.CheckInputs(s, nil)
	if again["tags"].([]any)[0] != "a" {
		t.Fatal("a run must not alias the spec's defaults")
	}
	open := mustSpec(t, "steps: [{ id: e, tool: flow__echo }]")
	if got, err := exec.CheckInputs(open, map[string]any{"anything": true}); err != nil || got["anything"] != true {
		t.Fatalf("a spec without declared inputs accepts any: %v %v", got, err)
	}
	if _, err := exec.CheckInputs(open, map[string]any{"f": func() {}}); run.CodeOf(err) != run.CodeInvalidInput {
		t.Fatalf("non-JSON input: %v", err)
	}
}

func TestPanicsInToolsBecomeStepFailures(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	c := clock.New()
	router := tools.NewRouter(c, panicky{})
	x := exec.New(exec.Config{Store: st, Clock: c, Router: router})
	s := mustSpec(t, `
steps:
  - id: both
    kind: parallel
    steps:
      - { id: p, kind: tool_remote, dcc: x, tool: boom }
      - { id: ok, tool: flow__echo }
`)
	h, err := x.Start(context.Background(), exec.Params{RunID: "r", Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	rec, _ := st.GetRun(context.Background(), "r")
	if rec.Status != run.StatusFailed || rec.Error.Kind != exec.KindInternal {
		t.Fatalf("status %s error %+v", rec.Status, rec.Error)
	}
}

type panicky struct{}

func (panicky) CallRemote(context.Context, string, string, map[string]any) (tools.Result, error) {
	panic("remote caller bug")
}

// recorder is a store that keeps a summary of every batch written: "row:status" for each step
// row and "event:key" for each event.
type recorder struct {
	*memstore.Store
	mu      sync.Mutex
	batches [][]string
}

func (r *recorder) Write(ctx context.Context, b *store.Batch) error {
	var sum []string
	for _, st := range b.Steps {
		sum = append(sum, fmt.Sprintf("row %s:%s", st.Key, st.Status))
	}
	for _, e := range b.Events {
		sum = append(sum, fmt.Sprintf("%s %s", e.Type, e.StepKey))
	}
	r.mu.Lock()
	r.batches = append(r.batches, sum)
	r.mu.Unlock()
	return r.Store.Write(ctx, b)
}

// TestStepWrites: an inline built-in tool step is written once, its step_enter with its exit
// (one commit per step on SQLite); a retry carries the held-back step_enter; a host tool step is
// written as running, with its step_enter, before the host can pull the call.
func TestStepWrites(t *testing.T) {
	t.Parallel()
	rec := &recorder{Store: memstore.New()}
	t.Cleanup(func() { _ = rec.Close() })
	c := clock.New()
	router := tools.NewRouter(c, nil)
	if err := router.RegisterHost(tools.ToolInfo{Name: "host_tool"}); err != nil {
		t.Fatal(err)
	}
	x := exec.New(exec.Config{Store: rec, Clock: c, Router: router})
	s := mustSpec(t, `
steps:
  - { id: a, tool: flow__echo }
  - id: b
    tool: flow__fail
    args: { times: 1, kind: transient }
    retry: { max_attempts: 2, backoff: fixed, initial_delay_ms: 1, max_delay_ms: 1 }
  - { id: c, tool: host_tool }
`)
	h, err := x.Start(context.Background(), exec.Params{RunID: "r", Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	calls, err := router.Host().Pull(context.Background(), tools.PullRequest{Lanes: []string{tools.LaneMain}, Max: 1, Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 {
		t.Fatalf("host calls %v %v", calls, err)
	}
	steps, _ := rec.ListSteps(context.Background(), "r")
	if last := steps[len(steps)-1]; last.Key != "c" || last.Status != run.StepRunning {
		t.Fatalf("while the host runs c, its row is %s:%s", last.Key, last.Status)
	}
	if err := router.Host().Complete(calls[0].ID, tools.Result{Output: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	rec.mu.Lock()
	got, _ := json.Marshal(rec.batches)
	rec.mu.Unlock()
	want := `[["workflow_started "],` +
		`["row a:completed","step_enter a","step_exit a"],` +
		`["row b:retrying","step_enter b","step_retry b"],["row b:running"],["row b:completed","step_exit b"],` +
		`["row c:running","step_enter c"],["row c:completed","step_exit c"],` +
		`["workflow_terminal "]]`
	if string(got) != want {
		t.Fatalf("batches\n%s\nwant\n%s", got, want)
	}
	evs, _ := rec.ListEvents(context.Background(), store.EventFilter{RunID: "r"})
	for _, e := range evs {
		if e.Type == run.EventStepExit && e.StepKey == "a" && e.Progress.Completed != 1 {
			t.Fatalf("step_exit a progress %+v", e.Progress)
		}
		if e.Type == run.EventStepEnter && e.StepKey == "c" && e.Progress.Completed != 2 {
			t.Fatalf("step_enter c progress %+v", e.Progress)
		}
	}
}

// OnStart sees the run before any of its steps starts: a caller registers the run there, so a
// host that sees one of its calls (or a child run's id) finds it registered.
func TestOnStartComesBeforeTheFirstStep(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	c := clock.New()
	rec := &startedCheck{}
	x := exec.New(exec.Config{Store: st, Clock: c, Router: tools.NewRouter(c, rec)})
	s := mustSpec(t, "steps: [{ id: a, kind: tool_remote, dcc: x, tool: t }]")
	for i := range 50 { // one run at a time
		var got *exec.Run
		h, err := x.Start(context.Background(), exec.Params{RunID: fmt.Sprintf("r%d", i), Spec: s, OnStart: func(h *exec.Run) {
			got = h
			rec.started.Store(true)
		}})
		if err != nil {
			t.Fatal(err)
		}
		<-h.Done()
		rec.started.Store(false)
		if got != h {
			t.Fatalf("run %d: OnStart got %p, Start returned %p", i, got, h)
		}
	}
	if n := rec.early.Load(); n != 0 {
		t.Fatalf("%d calls arrived before OnStart", n)
	}
	if n := rec.calls.Load(); n != 50 {
		t.Fatalf("%d calls, want 50", n)
	}
}

type startedCheck struct {
	started      atomic.Bool
	early, calls atomic.Int32
}

func (s *startedCheck) CallRemote(context.Context, string, string, map[string]any) (tools.Result, error) {
	s.calls.Add(1)
	if !s.started.Load() {
		s.early.Add(1)
	}
	return tools.Result{Output: "ok"}, nil
}
