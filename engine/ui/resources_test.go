package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// The dashboard shows a step waiting for its resources as waiting_resources, with what it
// waits for: in the run's instances, in the step's detail and in the live "step" events; the
// status has a badge of its own.
func TestDashboardShowsAStepWaitingForResources(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{DB: filepath.Join(t.TempDir(), "flow.db"), StallAfterSecs: -1,
		Resources: map[string]engine.ResourceConfig{"houdini": {Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	b := benchOver(t, e, ui.Options{})
	s, err := spec.ParseString("name: sim\nsteps: [{id: cook, tool: flow__sleep, args: {ms: 60000}, resources: {houdini: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	holder, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if info, _ := e.Resources(ctx); info.Resources[0].InUse == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first run never held houdini")
		}
	}
	waiter, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	// The run's step events carry the new status at once.
	live := b.stream(t, sctx, "?run="+waiter+"&from=1")
	for seen := false; !seen; {
		select {
		case m := <-live:
			var ch ui.StepChange
			seen = m.event == "step" && json.Unmarshal([]byte(m.data), &ch) == nil && ch.Status == string(run.StepWaitingResources)
		case <-time.After(10 * time.Second):
			t.Fatal("no step event with status waiting_resources")
		}
	}
	var d struct {
		Status    string        `json:"status"`
		Instances []ui.Instance `json:"instances"`
		Attempts  []ui.Attempt  `json:"attempts"`
	}
	b.getJSON(t, "/api/runs/"+waiter, &d)
	// The timeline's bar of the attempt has the status too.
	if len(d.Attempts) != 1 || d.Attempts[0].Status != string(run.StepWaitingResources) {
		t.Errorf("attempts %+v; want one, waiting_resources", d.Attempts)
	}
	if d.Status != "running" || len(d.Instances) != 1 || d.Instances[0].Status != run.StepWaitingResources ||
		d.Instances[0].Waiting == nil || d.Instances[0].Waiting.Place != 1 || d.Instances[0].Waiting.Of != 1 ||
		d.Instances[0].Waiting.Resources["houdini"] != 1 {
		t.Fatalf("run detail %+v", d)
	}
	var st engine.StepInfo
	b.getJSON(t, "/api/runs/"+waiter+"/steps/cook", &st)
	if st.Status != run.StepWaitingResources || st.Waiting == nil || st.Waiting.Since.IsZero() {
		t.Fatalf("step detail %+v", st)
	}
	// The badge, the graph node and the Gantt bar of the state have a colour of their own.
	code, css, _ := b.do(t, http.MethodGet, "/app.css", nil)
	for _, want := range []string{".s-waiting_resources::before", `.graph .node[data-status="waiting_resources"] .stripe`,
		`.gantt [data-status="waiting_resources"] .gbar`} {
		if code != http.StatusOK || !strings.Contains(string(css), want) {
			t.Errorf("app.css (%d) has no rule %s", code, want)
		}
	}
	_, js, _ := b.do(t, http.MethodGet, "/app.js", nil)
	if !strings.Contains(string(js), `"step-waiting"`) {
		t.Error("app.js does not show what a step waits for")
	}
	for _, id := range []string{waiter, holder} {
		if err := e.Cancel(ctx, id, "done"); err != nil {
			t.Fatal(err)
		}
	}
}
