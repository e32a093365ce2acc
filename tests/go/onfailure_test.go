package gotest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// alertSpec fails at `export` (flow__fail: `times` failures of kind fatal, then success; -1 =
// always) and alerts from on_failure with the run's error.
func alertSpec(times int) string {
	return `
name: nightly
steps:
  - {id: prep, tool: flow__echo, args: {scene: /proj/a.ma}}
  - {id: export, tool: flow__fail, args: {times: ` + itoa(times) + `, kind: fatal, message: corrupt scene}}
on_failure:
  - id: alert
    tool: flow__echo
    args:
      text: "{{run.name}} {{run.id}}: {{run.error.step_key}} {{run.error.kind}}: {{run.error.message}}"
      prep: "{{steps.prep.output.scene}}"
      export: "{{steps.export.status}}"
`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// terminalDetail returns the detail of the run's last workflow_terminal event.
func terminalDetail(t *testing.T, b *testBundle, id string) map[string]any {
	t.Helper()
	var d map[string]any
	for _, e := range b.events(id) {
		if e.Type == run.EventWorkflowTerminal {
			d = nil
			mustUnmarshal(t, e.Detail, &d)
		}
	}
	return d
}

func TestOnFailureRunsOnceWithTheError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(alertSpec(-1), nil)
	if info.Status != run.StatusFailed || info.Error == nil || info.Error.Kind != run.KindFatal || info.Error.StepKey != "export" {
		t.Fatalf("status %s error %+v: the run keeps its own error", info.Status, info.Error)
	}
	alert := b.steps(info.ID)["on_failure.alert"]
	if alert.Status != run.StepCompleted || alert.StepID != "alert" {
		t.Fatalf("alert %+v", alert)
	}
	out := alert.Output.(map[string]any)
	want := "nightly " + info.ID + ": export fatal: corrupt scene"
	if out["text"] != want || out["prep"] != "/proj/a.ma" || out["export"] != "failed" {
		t.Fatalf("alert output %v; want text %q", out, want)
	}
	// Visible in the run's status, in order, and announced by one on_failure_started event.
	var keys []string
	for _, s := range b.status(info.ID).Steps {
		keys = append(keys, s.Key)
	}
	if jsonOf(t, keys) != `["prep","export","on_failure.alert"]` {
		t.Fatalf("status steps %v", keys)
	}
	evs := b.eventTypes(info.ID, run.EventOnFailureStarted, run.EventWorkflowTerminal)
	if jsonOf(t, evs) != `["on_failure_started::running","workflow_terminal::failed"]` {
		t.Fatalf("events %v", evs)
	}
	d := terminalDetail(t, b, info.ID)
	if d["on_failure"] != "completed" || d["error"].(map[string]any)["step_key"] != "export" {
		t.Fatalf("terminal detail %v", d)
	}
	if p := info.Progress; p.Completed != 3 || p.Total != 3 {
		t.Fatalf("progress %+v", p)
	}
}

func TestOnFailureNotRunOnSuccessOrCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(alertSpec(0), nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("status %s", info.Status)
	}
	if _, ran := b.steps(info.ID)["on_failure.alert"]; ran || len(b.eventTypes(info.ID, run.EventOnFailureStarted)) != 0 {
		t.Fatal("on_failure ran for a completed run")
	}
	if _, ok := terminalDetail(t, b, info.ID)["on_failure"]; ok {
		t.Fatal("terminal detail names on_failure")
	}

	id := b.submit(`
steps:
  - {id: long, tool: flow__sleep, args: {ms: 60000}}
on_failure:
  - {id: alert, tool: flow__echo, args: {x: 1}}
`, nil)
	b.waitStep(id, "long", run.StepRunning)
	if err := b.eng.Cancel(b.ctx, id, "operator"); err != nil {
		t.Fatal(err)
	}
	info = b.wait(id)
	if info.Status != run.StatusCancelled {
		t.Fatalf("status %s", info.Status)
	}
	if _, ran := b.steps(id)["on_failure.alert"]; ran || len(b.eventTypes(id, run.EventOnFailureStarted)) != 0 {
		t.Fatal("on_failure ran for a cancelled run")
	}
}

func TestFailingOnFailureKeepsTheRunError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(`
steps:
  - {id: export, tool: flow__fail, args: {kind: fatal, message: corrupt scene}}
on_failure:
  - {id: alert, tool: flow__fail, args: {kind: transient, message: slack down}, retry: {max_attempts: 2, initial_delay_ms: 0}}
  - {id: after, tool: flow__echo, args: {x: 1}}
`, nil)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindFatal || info.Error.Message != "corrupt scene" {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	steps := b.steps(info.ID)
	if a := steps["on_failure.alert"]; a.Status != run.StepFailed || a.Attempts != 2 || a.Error.Message != "slack down" {
		t.Fatalf("alert %+v %+v", a, a.Error)
	}
	if a := steps["on_failure.after"]; a.Status != run.StepSkipped {
		t.Fatalf("after %+v", a)
	}
	if d := terminalDetail(t, b, info.ID); d["on_failure"] != "failed" {
		t.Fatalf("terminal detail %v", d)
	}
}

// A cancel while the on_failure steps run stops them; the run stays failed with its own error.
func TestCancelDuringOnFailureKeepsFailed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(`
steps:
  - {id: export, tool: flow__fail, args: {kind: fatal, message: corrupt scene}}
on_failure:
  - {id: slow_alert, tool: flow__sleep, args: {ms: 60000}}
`, nil)
	b.waitStep(id, "on_failure.slow_alert", run.StepRunning)
	if err := b.eng.Cancel(b.ctx, id, "enough"); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindFatal {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	if s := b.steps(id)["on_failure.slow_alert"]; s.Status != run.StepCancelled {
		t.Fatalf("slow_alert %s", s.Status)
	}
	if d := terminalDetail(t, b, id); d["on_failure"] != "cancelled" {
		t.Fatalf("terminal detail %v", d)
	}
}

// Resuming a failed run re-runs its failed step: when that succeeds the on_failure steps do
// not run again; when the run fails again they do, once more.
func TestOnFailureAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// flow__fail counts per run: fails once, so the resume succeeds.
	info := b.run(alertSpec(1), nil)
	if info.Status != run.StatusFailed {
		t.Fatalf("status %s", info.Status)
	}
	if _, err := b.eng.Resume(b.ctx, info.ID, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	if info = b.wait(info.ID); info.Status != run.StatusCompleted {
		t.Fatalf("resumed: %s %+v", info.Status, info.Error)
	}
	if got := b.eventTypes(info.ID, run.EventOnFailureStarted, run.EventStepEnter); jsonOf(t, got) !=
		`["step_enter:prep:running","step_enter:export:running","on_failure_started::running","step_enter:on_failure.alert:running","step_enter:export:running"]` {
		t.Fatalf("events %v", got)
	}
	if d := terminalDetail(t, b, info.ID); d["on_failure"] != nil {
		t.Fatalf("terminal detail %v", d)
	}

	info = b.run(alertSpec(-1), nil)
	if _, err := b.eng.Resume(b.ctx, info.ID, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	if info = b.wait(info.ID); info.Status != run.StatusFailed {
		t.Fatalf("resumed: %s", info.Status)
	}
	if n := len(b.eventTypes(info.ID, run.EventOnFailureStarted)); n != 2 {
		t.Fatalf("%d on_failure_started events, want 2 (one per failure)", n)
	}
	if got := b.eventTypes(info.ID, run.EventStepEnter); len(got) != 5 {
		t.Fatalf("step_enter events %v: prep reused, export and alert twice", got)
	}
}

// An engine that stops while the on_failure steps run leaves the run interrupted; resuming it
// finishes those steps (reusing the completed ones), does not run the failed step again, and
// ends the run failed with its own error.
func TestResumeFinishesInterruptedOnFailure(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "flow.db")
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "page_oncall", Lane: flowtype.LaneMain}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	s, err := spec.ParseString(`
name: nightly
steps:
  - {id: export, tool: flow__fail, args: {kind: fatal, message: corrupt scene}}
on_failure:
  - {id: note, tool: flow__echo, args: {x: 1}}
  - {id: page, tool: page_oncall, args: {why: "{{run.error.kind}}: {{run.error.message}} at {{run.error.step_key}}"}}
`)
	if err != nil {
		t.Fatal(err)
	}
	e1 := open()
	id, err := e1.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	calls, err := e1.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: waitLimit})
	if err != nil || len(calls) != 1 || calls[0].StepKey != "on_failure.page" {
		t.Fatalf("pull: %v %+v", err, calls)
	}
	if err := e1.Close(ctx); err != nil { // the page is never answered
		t.Fatal(err)
	}

	e2 := open()
	defer func() { _ = e2.Close(context.Background()) }()
	info, err := e2.Status(ctx, id)
	if err != nil || info.Status != run.StatusInterrupted {
		t.Fatalf("after the stop: %v %+v", err, info)
	}
	var pages atomic.Int32
	var why atomic.Value
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	go hostLoop(hctx, e2, func(c flowtype.PendingCall) flowtype.ToolResult {
		pages.Add(1)
		why.Store(c.Args["why"])
		return flowtype.ToolResult{Output: map[string]any{"paged": true}}
	})
	if _, err := e2.Resume(ctx, id, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err = e2.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusFailed || info.Error.Kind != run.KindFatal || info.Error.StepKey != "export" {
		t.Fatalf("%v %+v %+v", err, info, info.Error)
	}
	if pages.Load() != 1 || why.Load() != "fatal: corrupt scene at export" {
		t.Fatalf("paged %d times with %v", pages.Load(), why.Load())
	}
	b := &testBundle{t: t, ctx: ctx, eng: e2}
	enters := b.eventTypes(id, run.EventStepEnter, run.EventOnFailureStarted)
	if jsonOf(t, enters) != `["step_enter:export:running","on_failure_started::running","step_enter:on_failure.note:running","step_enter:on_failure.page:running","on_failure_started::running","step_enter:on_failure.page:running"]` {
		t.Fatalf("events %v: export and note must not run again", enters)
	}
	steps := b.steps(id)
	if steps["on_failure.page"].Status != run.StepCompleted || steps["export"].Status != run.StepFailed {
		t.Fatalf("steps %+v", steps)
	}
	if d := terminalDetail(t, b, id); d["on_failure"] != "completed" {
		t.Fatalf("terminal detail %v", d)
	}
	// Once the handler has finished, a resume is an ordinary one: export runs again.
	if _, err := e2.Resume(ctx, id, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	if info, err = e2.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusFailed {
		t.Fatalf("%v %+v", err, info)
	}
	if n := len(b.eventTypes(id, run.EventStepEnter)); n != 7 || pages.Load() != 2 {
		t.Fatalf("%d step_enter, %d pages; want export, note and page once more", n, pages.Load())
	}
}

// The tools of on_failure steps are checked when the run is submitted, like the others: a
// missing alert tool is found before the pipeline runs, not when it fails at night.
func TestOnFailureToolsCheckedAtSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, `
steps: [{id: a, tool: flow__echo, args: {}}]
on_failure: [{id: alert, tool: studio__post_slack}]
`)})
	if codeOf(err) != run.CodeUnknownTool {
		t.Fatalf("submit: %v", err)
	}
	mustContain(t, "error", err.Error(), "studio__post_slack")
}
