package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// A run whose step asks for a resource the engine does not declare, or for more than its
// limit, is refused when it starts, naming the step, the field and the fix; one within the
// limits starts. An engine config with a zero limit does not open.
func TestSubmitChecksResources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Resources: map[string]engine.ResourceConfig{"houdini": {Limit: 4}, "gpu": {Limit: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	submit := func(text string) error {
		s, err := spec.ParseString(text)
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
		if err == nil {
			if _, err := e.Wait(ctx, id, 0); err != nil {
				t.Fatal(err)
			}
		}
		return err
	}
	err = submit("steps: [{id: cook, tool: flow__echo, resources: {houdinni: 1}}]")
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 1 || ve.Problems[0].Code != spec.ResourceUnknown ||
		!strings.Contains(ve.Problems[0].Message, `step "cook"`) && !strings.Contains(ve.Problems[0].Message, `(id "cook")`) ||
		!strings.Contains(ve.Problems[0].Message, `did you mean "houdini"?`) {
		t.Fatalf("unknown resource: %v", err)
	}
	if run.CodeOf(err) != spec.CodeValidationFailed {
		t.Fatalf("code %q", run.CodeOf(err))
	}
	err = submit("steps: [{id: cook, tool: flow__echo, resources: {gpu: 3}}]")
	if !errors.As(err, &ve) || ve.Problems[0].Code != spec.ResourceOverLimit || !strings.Contains(ve.Problems[0].Message, "ask for at most 2") {
		t.Fatalf("over the limit: %v", err)
	}
	if err := submit("priority: 10\nsteps: [{id: cook, tool: flow__echo, resources: {gpu: 2, houdini: 1}}]"); err != nil {
		t.Fatal(err)
	}

	_, err = engine.Open(ctx, engine.Config{Resources: map[string]engine.ResourceConfig{"gpu": {}}})
	if run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "resources.gpu.limit: must be 1 to 1,000,000") {
		t.Fatalf("a zero limit: %v", err)
	}
}

// The executor takes a step's resources around its call: with a limit of 1, of three runs whose
// step asks for houdini ×1 the host sees one call at a time; the others wait, visibly (their
// step is waiting_resources, with what it waits for and its place), and Resources lists
// the holder and the queue in order, a run of a higher priority first (its own, given when it
// started, over its spec's). A priority out of range is refused. A cancelled waiter leaves the
// queue; every unit is given back at the end.
func TestStepsWaitForTheirResources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "flow.db")
	e, err := engine.Open(ctx, engine.Config{DB: db, Resources: map[string]engine.ResourceConfig{"houdini": {Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(ctx) })
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	// submit starts a run of a spec of priority 0; own, when not nil, is the run's priority.
	submit := func(own *int) string {
		t.Helper()
		s, err := spec.ParseString("name: sim\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]")
		if err != nil {
			t.Fatal(err)
		}
		id, err := e.Submit(ctx, engine.StartRequest{Spec: s, Priority: own})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	resource := func() engine.ResourceInfo {
		t.Helper()
		info, err := e.Resources(ctx)
		if err != nil || len(info.Resources) != 1 {
			t.Fatalf("Resources = %+v, %v", info, err)
		}
		return info.Resources[0]
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, resource())
			}
		}
	}
	pull := func() flowtype.PendingCall {
		t.Helper()
		cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 5, Timeout: 5 * time.Second})
		if err != nil || len(cs) != 1 {
			t.Fatalf("pull: %+v, %v; want one call", cs, err)
		}
		return cs[0]
	}
	first := submit(nil)
	until("the first run to hold houdini", func() bool { return resource().InUse == 1 })
	low := submit(nil)
	until("the low-priority run to queue", func() bool { return len(resource().Queue) == 1 })
	five := 5
	high := submit(&five) // the run's own priority, over its spec's 0
	until("the high-priority run to queue", func() bool { return len(resource().Queue) == 2 })
	r := resource()
	if r.Limit != 1 || len(r.Holders) != 1 || r.Holders[0].RunID != first || r.Queue[0].Label != high+"/cook" || r.Queue[1].Label != low+"/cook" || r.Queue[0].Priority != 5 {
		t.Fatalf("resource %+v; want %s holding, %s then %s queued", r, first, high, low)
	}
	// The waiters are waiting_resources (their runs running), with what they wait for and
	// their place in the queue now: the high-priority run's step first.
	waiting := func(id string) engine.StepInfo {
		t.Helper()
		info, err := e.Status(ctx, id)
		if err != nil || len(info.Steps) != 1 || info.Status != run.StatusRunning {
			t.Fatalf("the waiting run: %+v, %v", info, err)
		}
		return info.Steps[0]
	}
	for id, place := range map[string]int{high: 1, low: 2} {
		// (The step's record is written just after it queues.)
		until("the waiting step's record", func() bool { return waiting(id).Status == run.StepWaitingResources })
		st := waiting(id)
		w := st.Waiting
		if st.Status != run.StepWaitingResources || w == nil || w.Place != place || w.Of != 2 || w.OtherEngines ||
			!maps.Equal(w.Resources, map[string]int{"houdini": 1}) || w.Since.IsZero() || st.Progress == nil ||
			st.Progress.Message != fmt.Sprintf("waiting for houdini ×1: %s of 2 in this engine's queue", map[int]string{1: "1st", 2: "2nd"}[place]) {
			t.Fatalf("waiting step of %s: %+v (waiting %+v, progress %+v); want waiting_resources, place %d of 2", id, st, w, st.Progress, place)
		}
		if all, err := e.Steps(ctx, id); err != nil || len(all) != 1 || !reflect.DeepEqual(all[0].Waiting, w) {
			t.Fatalf("Steps(%s) = %+v, %v; want the waiting of Status", id, all, err)
		}
	}
	// Another process reading the file (a read-only engine) sees the record as written when
	// the wait started: low was then 1st of 1.
	reader, err := engine.Open(ctx, engine.Config{DB: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := reader.Status(ctx, low); err != nil || len(info.Steps) != 1 || info.Steps[0].Status != run.StepWaitingResources ||
		info.Steps[0].Waiting == nil || info.Steps[0].Waiting.Place != 1 || info.Steps[0].Waiting.Of != 1 ||
		info.Steps[0].Progress.Message != "waiting for houdini ×1: 1st of 1 in this engine's queue" {
		t.Fatalf("low read by another process: %+v, %v", info, err)
	}
	_ = reader.Close(ctx)
	c := pull()
	if c.RunID != first {
		t.Fatalf("the host got a call of %s, want %s", c.RunID, first)
	}
	if err := e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"ok": true}}); err != nil {
		t.Fatal(err)
	}
	if c = pull(); c.RunID != high {
		t.Fatalf("after the first, the host got a call of %s, want the high-priority %s", c.RunID, high)
	}
	// Holding its units, the step is running; its progress says what it holds and how long it
	// waited. The other waiter moved up.
	if st := waiting(high); st.Status != run.StepRunning || st.Waiting != nil || st.Progress == nil ||
		!strings.HasPrefix(st.Progress.Message, "holds houdini ×1 (waited ") {
		t.Fatalf("the step that got its units: %+v (progress %+v)", st, st.Progress)
	}
	if st := waiting(low); st.Waiting == nil || st.Waiting.Place != 1 || st.Waiting.Of != 1 {
		t.Fatalf("the step left waiting: %+v", st.Waiting)
	}
	if err := e.Cancel(ctx, low, "not needed"); err != nil {
		t.Fatal(err)
	}
	until("the cancelled run to leave the queue", func() bool { return len(resource().Queue) == 0 })
	if err := e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"ok": true}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, high, low} {
		if _, err := e.Wait(ctx, id, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	until("every unit to be given back", func() bool { r := resource(); return r.InUse == 0 && len(r.Holders) == 0 })
	if info, _ := e.Status(ctx, low); info.Status != run.StatusCancelled || info.Steps[0].Status != run.StepCancelled || info.Steps[0].Waiting != nil {
		t.Fatalf("the cancelled waiter's run is %s, its step %+v", info.Status, info.Steps[0])
	}
	s, _ := spec.ParseString("steps: [{id: a, tool: flow__echo}]")
	tooHigh := 5000
	if _, err := e.Submit(ctx, engine.StartRequest{Spec: s, Priority: &tooHigh}); run.CodeOf(err) != run.CodeInvalidRequest ||
		!strings.Contains(err.Error(), "priority must be -1000 to 1000") {
		t.Fatalf("a priority of 5000: %v", err)
	}
}

// The metrics of an engine with resources: each resource's limit, the units its step attempts
// hold, how many wait, and the histogram of the waits; an engine without resources has none.
func TestResourceMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	scrape := func(e *engine.Engine) string {
		t.Helper()
		h, err := e.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1, Resources: map[string]engine.ResourceConfig{"houdini": {Limit: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	_ = scrape(e) // enables the metrics: the waits from now on are counted
	s, err := spec.ParseString("steps: [{id: cook, tool: flow__echo, resources: {houdini: 2}}]")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(ctx, engine.StartRequest{Spec: s}); err != nil {
		t.Fatal(err)
	}
	body := scrape(e)
	for _, want := range []string{`dccflow_resource_limit{resource="houdini"} 4`, `dccflow_resource_in_use{resource="houdini"} 0`,
		`dccflow_resource_waiting{resource="houdini"} 0`, `dccflow_resource_wait_seconds_count{resource="houdini"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	plain, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	if body := scrape(plain); strings.Contains(body, "dccflow_resource") {
		t.Error("an engine without resources reports dccflow_resource_* metrics")
	}
}

// A spec's `fair_share` renders from the run's inputs: the runs of show A waiting for a unit share
// the key fair_share:A (one round-robin turn between them), a run of show B has its own and goes
// before them.
func TestFairShareKeyFromInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1, Resources: map[string]engine.ResourceConfig{"nuke": {Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "render", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString("name: comp\nfair_share: \"{{inputs.show}}\"\ninputs: {show: string}\nsteps: [{id: render, tool: render, resources: {nuke: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	state := func() engine.ResourceInfo {
		info, err := e.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Resources[0]
	}
	queue := func() []engine.ResourceWaiter { return state().Queue }
	var ids []string
	for i, show := range []string{"A", "A", "A", "B"} {
		id, err := e.Submit(ctx, engine.StartRequest{Spec: s, Inputs: map[string]any{"show": show}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
			if r := state(); r.InUse+len(r.Queue) == i+1 { // the first holds the unit; each next one queues
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %d did not reach the unit or its queue: %+v", i, state())
			}
		}
	}
	q := queue()
	// Round robin across the keys: B's run first (A was served last: its first run holds the
	// unit), then A's second and third, though B's run came last.
	got := []string{q[0].Label, q[1].Label, q[2].Label}
	want := []string{ids[3] + "/render", ids[1] + "/render", ids[2] + "/render"}
	if !slices.Equal(got, want) || q[0].FairShare != "fair_share:B" || q[1].FairShare != "fair_share:A" {
		t.Fatalf("queue %+v; want %v", q, want)
	}
	for _, id := range ids {
		if err := e.Cancel(ctx, id, "done"); err != nil {
			t.Fatal(err)
		}
	}
}
