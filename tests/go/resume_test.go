package gotest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// hostLoop answers host calls with fn until ctx ends.
func hostLoop(ctx context.Context, e *engine.Engine, fn func(flowtype.PendingCall) flowtype.ToolResult) {
	for ctx.Err() == nil {
		calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
		if err != nil {
			return
		}
		for _, c := range calls {
			_ = e.Host().Complete(c.ID, fn(c))
		}
	}
}

// engineWithExportTool opens an in-memory engine with a main-lane host tool "export" (answer
// it with hostLoop); both end with the test.
func engineWithExportTool(t *testing.T) (context.Context, *engine.Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "export", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	return ctx, e
}

func TestResumeReusesCompletedInstances(t *testing.T) {
	t.Parallel()
	ctx, e := engineWithExportTool(t)
	var calls [5]atomic.Int32
	var broken atomic.Bool
	broken.Store(true)
	go hostLoop(ctx, e, func(c flowtype.PendingCall) flowtype.ToolResult {
		i := int(c.Args["i"].(float64))
		calls[i].Add(1)
		if i == 3 && broken.Load() {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "fatal", Message: "corrupt scene"}}
		}
		return flowtype.ToolResult{Output: map[string]any{"fbx": i}}
	})
	s, _ := spec.ParseString(`
name: intake
steps:
  - id: per_file
    kind: foreach
    items: [0, 1, 2, 3, 4]
    on_any_fail: continue
    steps: [{id: export, tool: export, args: {i: "{{item}}"}}]
  - {id: after, tool: flow__echo, args: {value: "{{per_file}}"}}
`)
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusFailed {
		t.Fatalf("%v %+v", err, info)
	}
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{ExpectedSpecHash: "0000"}); run.CodeOf(err) != run.CodeSpecChanged {
		t.Fatalf("spec_changed: %v", err)
	}
	broken.Store(false)
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{ExpectedSpecHash: s.Hash()}); err != nil {
		t.Fatal(err)
	}
	info, err = e.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	for i := range calls {
		want := int32(1)
		if i == 3 {
			want = 2
		}
		if got := calls[i].Load(); got != want {
			t.Errorf("export %d called %d times, want %d", i, got, want)
		}
	}
	_, err = e.Resume(ctx, id, engine.ResumeOptions{})
	var rerr *run.Error
	if !errors.As(err, &rerr) || rerr.Code != run.CodeNotResumable || rerr.Details["status"] != "completed" {
		t.Fatalf("completed without force: %v (want not_resumable with details.status completed: the CLI words its own message from it)", err)
	}
	// Forcing one instance re-runs it (and its foreach) and nothing else.
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{ForceSteps: []string{"per_file[1].export"}}); err != nil {
		t.Fatal(err)
	}
	if info, err = e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	if calls[1].Load() != 2 || calls[0].Load() != 1 || calls[4].Load() != 1 {
		t.Fatalf("calls after force: %d %d %d", calls[0].Load(), calls[1].Load(), calls[4].Load())
	}
	if _, err := e.Resume(ctx, "nope", engine.ResumeOptions{}); run.CodeOf(err) != run.CodeNotFound {
		t.Fatalf("unknown: %v", err)
	}
}

// TestResumeForceBypassesIdempotency: a forced step is called again even though its idempotency
// key has a cached output (workflow scope survives resume, so without the bypass forcing would
// only replay the cache); its new output replaces the cached one.
func TestResumeForceBypassesIdempotency(t *testing.T) {
	t.Parallel()
	ctx, e := engineWithExportTool(t)
	var calls [2]atomic.Int32
	go hostLoop(ctx, e, func(c flowtype.PendingCall) flowtype.ToolResult {
		i := int(c.Args["i"].(float64))
		n := calls[i].Add(1)
		return flowtype.ToolResult{Output: map[string]any{"fbx": i, "call": n}}
	})
	s, _ := spec.ParseString(`
name: intake
steps:
  - id: per_file
    kind: foreach
    items: [0, 1]
    steps: [{id: export, tool: export, args: {i: "{{item}}"}, idempotency_key: "export_{{item}}"}]
`)
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{ForceSteps: []string{"per_file[1].export"}}); err != nil {
		t.Fatal(err)
	}
	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	if calls[0].Load() != 1 || calls[1].Load() != 2 {
		t.Fatalf("calls after forcing per_file[1].export: %d %d, want 1 2", calls[0].Load(), calls[1].Load())
	}
	steps, err := e.Steps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		out, _ := json.Marshal(st.Output)
		switch st.Key {
		case "per_file[0].export":
			if st.Cached || !strings.Contains(string(out), `"call":1`) {
				t.Errorf("%s: cached=%v output %s, want the first run's, reused", st.Key, st.Cached, out)
			}
		case "per_file[1].export":
			if st.Cached || !strings.Contains(string(out), `"call":2`) {
				t.Errorf("%s: cached=%v output %s, want a fresh call", st.Key, st.Cached, out)
			}
		}
	}
	// A name that is neither a step id nor an instance of the run is refused, not ignored.
	for _, typo := range []string{"exprot", "per_file[9].export"} {
		_, err := e.Resume(ctx, id, engine.ResumeOptions{ForceSteps: []string{typo}})
		if run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), typo) {
			t.Fatalf("force %q: %v, want invalid_request naming it", typo, err)
		}
	}
	if calls[0].Load() != 1 || calls[1].Load() != 2 {
		t.Fatalf("a refused force ran something: calls %d %d", calls[0].Load(), calls[1].Load())
	}
	// By step id: every instance of export is called again, and the cache now holds call 2.
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{ForceSteps: []string{"export"}}); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	if calls[0].Load() != 2 || calls[1].Load() != 3 {
		t.Fatalf("calls after forcing export: %d %d, want 2 3", calls[0].Load(), calls[1].Load())
	}
}

// A resumed run counts the instances it reuses, those inside a reused foreach included: its
// progress ends equal to the step instances it finished, as a run that was never resumed does.
func TestResumedProgressCountsReusedForeachIterations(t *testing.T) {
	t.Parallel()
	ctx, e := engineWithExportTool(t)
	var broken atomic.Bool
	broken.Store(true)
	go hostLoop(ctx, e, func(c flowtype.PendingCall) flowtype.ToolResult {
		if c.StepKey == "last" && broken.Load() {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "fatal", Message: "not yet"}}
		}
		return flowtype.ToolResult{Output: 1}
	})
	s, _ := spec.ParseString(`
steps:
  - {id: first, tool: export, args: {i: 0}}
  - id: fan
    kind: foreach
    items: [0, 1, 2, 3]
    steps:
      - {id: a, tool: export, args: {i: "{{item}}"}}
      - {id: b, tool: export, args: {i: "{{item}}"}}
  - {id: last, tool: export, args: {i: 9}}
`)
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusFailed {
		t.Fatalf("%v %+v", err, info)
	}
	broken.Store(false)
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, info)
	}
	const instances = 1 + 1 + 4*2 + 1 // first, fan, its iterations' a and b, last
	if info.Progress.Completed != instances || info.Progress.Total != instances {
		t.Fatalf("progress after resume %+v, want %d/%d", info.Progress, instances, instances)
	}
}
