package exec_test

import (
	"context"
	"encoding/json"
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
