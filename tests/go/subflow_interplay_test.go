package gotest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Sub-workflows with pause, on_failure, defaults and dry runs (docs/reference/spec.md, "workflow").

const slowChild = "name: slow_child\nsteps:\n  - {id: s, tool: slow, args: {k: \"{{inputs.k}}\"}}\ninputs:\n  k: {type: string}\n"

// Pausing a parent: the child in flight (a step instance of the parent) goes on and ends; no new
// child starts until the unpause.
func TestSubflowPausedParentStartsNoNewChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "slow", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	b.register(slowChild)
	id := b.submit(`
name: parent
steps:
  - {id: one, kind: workflow, workflow: slow_child, inputs: {k: one}}
  - {id: two, kind: workflow, workflow: slow_child, inputs: {k: two}}
`, nil)
	first := b.nextCall(flowtype.LaneMain)
	if err := b.eng.Pause(b.ctx, id, "farm full", "ana"); err != nil {
		t.Fatal(err)
	}
	if st := b.status(id).Status; st != run.StatusPaused {
		t.Fatalf("parent after Pause: %s", st)
	}
	if st := b.status(first.RunID).Status; st != run.StatusRunning {
		t.Fatalf("the child in flight is not paused with its parent: %s", st)
	}
	if err := b.eng.Host().Complete(first.ID, output("one done")); err != nil {
		t.Fatal(err)
	}
	if c := b.wait(first.RunID); c.Status != run.StatusCompleted {
		t.Fatalf("the child in flight ends: %s", c.Status)
	}
	b.waitStep(id, "one", run.StepCompleted)
	b.noCallWithin(flowtype.LaneMain, 300*time.Millisecond)
	info := b.status(id)
	if info.Status != run.StatusPaused || len(info.Children) != 1 {
		t.Fatalf("paused parent: %s, children %+v; want paused with the one child", info.Status, info.Children)
	}
	if _, started := b.steps(id)["two"]; started {
		t.Fatal("step two started while its run was paused")
	}
	if err := b.eng.Unpause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	second := b.nextCall(flowtype.LaneMain)
	if second.Args["k"] != "two" || second.RunID == first.RunID {
		t.Fatalf("after unpause: %+v", second)
	}
	if err := b.eng.Host().Complete(second.ID, output("two done")); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCompleted || len(info.Children) != 2 {
		t.Fatalf("after unpause: %s %+v", info.Status, info.Children)
	}
}

// Cancelling a paused parent cancels the child it waits for.
func TestSubflowCancelPausedParentCancelsChild(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "slow", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	b.register(slowChild)
	id := b.submit("name: parent\nsteps:\n  - {id: sub, kind: workflow, workflow: slow_child, inputs: {k: a}}\n", nil)
	call := b.nextCall(flowtype.LaneMain)
	if err := b.eng.Pause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Cancel(b.ctx, id, "dropped"); err != nil {
		t.Fatal(err)
	}
	if st := b.status(call.RunID).Status; st != run.StatusCancelled {
		t.Fatalf("the child of a cancelled paused parent: %s", st)
	}
	if info := b.wait(id); info.Status != run.StatusCancelled {
		t.Fatalf("parent: %s", info.Status)
	}
}

// A workflow step's retry whose delay ends while the run is paused starts no new child until
// the unpause.
func TestSubflowPauseHoldsAWorkflowRetry(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	b.register("name: broken\nsteps:\n  - {id: f, tool: flow__fail, args: {kind: transient}}\n")
	id := b.submit(`
name: parent
steps:
  - id: sub
    kind: workflow
    workflow: broken
    retry: {max_attempts: 2, backoff: fixed, initial_delay_ms: 1000, max_delay_ms: 1000}
`, nil)
	b.waitStep(id, "sub", run.StepRetrying)
	b.waitTimers(1)
	if err := b.eng.Pause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(time.Hour)
	time.Sleep(200 * time.Millisecond) // the second child would start now if the pause let it
	if info := b.status(id); len(info.Children) != 1 || b.steps(id)["sub"].Status != run.StepRetrying {
		t.Fatalf("paused retry: children %+v, step %+v; want one child and the step still retrying", info.Children, b.steps(id)["sub"])
	}
	if err := b.eng.Unpause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if info.Status != run.StatusFailed || len(info.Children) != 2 || info.Error.Kind != run.KindTransient {
		t.Fatalf("after unpause: %s %+v children %+v", info.Status, info.Error, info.Children)
	}
}

// A parent paused when its engine closes stays paused, its child interrupted; Unpause in the
// next engine resumes the child under its id (its tool called again: it was interrupted).
// A child paused on its own when the engine closes is unpaused by the resume of its parent; a
// stored paused parent cancelled cancels its stored paused child.
func TestSubflowPauseAcrossReopen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	db := filepath.Join(t.TempDir(), "flow.db")
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "slow", Lane: flowtype.LaneMain}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	next := func(e *engine.Engine) flowtype.PendingCall {
		t.Helper()
		got, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: 5 * time.Second})
		if err != nil || len(got) != 1 {
			t.Fatalf("pull: %v %v", got, err)
		}
		return got[0]
	}
	status := func(e *engine.Engine, id string) *engine.RunInfo {
		t.Helper()
		info, err := e.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	parentSpec := parse(t, "name: parent\nsteps:\n  - {id: sub, kind: workflow, workflow: slow_child, inputs: {k: a}}\n")

	// 1. The parent paused.
	e := open()
	if err := e.Register(parse(t, slowChild)); err != nil {
		t.Fatal(err)
	}
	p1, err := e.Submit(ctx, engine.StartRequest{Spec: parentSpec})
	if err != nil {
		t.Fatal(err)
	}
	c1 := next(e).RunID
	if err := e.Pause(ctx, p1, "end of day", ""); err != nil {
		t.Fatal(err)
	}
	// 2. The child paused on its own, its parent running.
	p2, err := e.Submit(ctx, engine.StartRequest{Spec: parentSpec})
	if err != nil {
		t.Fatal(err)
	}
	c2 := next(e).RunID
	if err := e.Pause(ctx, c2, "", ""); err != nil {
		t.Fatal(err)
	}
	// 3. Both paused, to be cancelled.
	p3, err := e.Submit(ctx, engine.StartRequest{Spec: parentSpec})
	if err != nil {
		t.Fatal(err)
	}
	c3 := next(e).RunID
	for _, id := range []string{c3, p3} {
		if err := e.Pause(ctx, id, "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}

	e = open()
	defer e.Close(ctx)
	for id, want := range map[string]run.Status{p1: run.StatusPaused, c1: run.StatusInterrupted, p2: run.StatusInterrupted,
		c2: run.StatusPaused, p3: run.StatusPaused, c3: run.StatusPaused} {
		if got := status(e, id); got.Status != want {
			t.Fatalf("after reopen, run %s (%s, child of %q) is %s (%+v); want %s", id, got.Name, got.ParentRunID, got.Status, got.Error, want)
		}
	}
	if err := e.Unpause(ctx, p1, "morning", ""); err != nil {
		t.Fatal(err)
	}
	if c := next(e); c.RunID != c1 {
		t.Fatalf("the unpaused parent's call comes from run %s; want its child %s resumed", c.RunID, c1)
	} else if err := e.Host().Complete(c.ID, output("done")); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, p1, waitLimit); err != nil || info.Status != run.StatusCompleted || len(info.Children) != 1 || info.Children[0].ID != c1 {
		t.Fatalf("parent 1 after unpause: %v %+v", err, info)
	}

	if _, err := e.Resume(ctx, p2, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	if c := next(e); c.RunID != c2 {
		t.Fatalf("the resumed parent's call comes from run %s; want its paused child %s unpaused", c.RunID, c2)
	} else if err := e.Host().Complete(c.ID, output("done")); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, p2, waitLimit); err != nil || info.Status != run.StatusCompleted || len(info.Children) != 1 || info.Children[0].ID != c2 {
		t.Fatalf("parent 2 after resume: %v %+v", err, info)
	}
	evs, _ := e.PollEvents(ctx, engine.EventQuery{RunID: c2}, 0)
	unpaused := false
	for _, ev := range evs {
		unpaused = unpaused || (ev.Type == run.EventRunUnpaused && strings.Contains(string(ev.Detail), "its parent run "+p2+" was resumed"))
	}
	if !unpaused {
		t.Fatalf("child 2 has no run_unpaused event naming its parent: %+v", evs)
	}

	if err := e.Cancel(ctx, p3, "dropped"); err != nil {
		t.Fatal(err)
	}
	if st := status(e, p3).Status; st != run.StatusCancelled {
		t.Fatalf("parent 3: %s", st)
	}
	c := status(e, c3)
	if c.Status != run.StatusCancelled || c.Error == nil {
		t.Fatalf("the stored paused child of a cancelled stored paused parent: %s %+v", c.Status, c.Error)
	}
	mustContain(t, "the child's cause", c.Error.Message, "parent run "+p3, "dropped")
}

// A child that fails fails its workflow step like any step: the parent's on_failure steps run,
// with the step's error as {{run.error}}; an on_failure step may itself be a workflow step.
func TestSubflowChildFailureRunsParentOnFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.register("name: broken\nsteps:\n  - {id: boom, tool: flow__fail, args: {kind: permission, message: no write access}}\n")
	b.register("name: alert\ninputs:\n  text: {type: string}\nsteps:\n  - {id: post, tool: flow__echo, args: {text: \"{{inputs.text}}\"}}\n")
	info := b.run(`
name: parent
steps:
  - {id: sub, kind: workflow, workflow: broken}
on_failure:
  - {id: note, tool: flow__echo, args: {kind: "{{run.error.kind}}", at: "{{run.error.step_key}}"}}
  - {id: page, kind: workflow, workflow: alert, inputs: {text: "failed at {{run.error.step_key}}: {{run.error.kind}}"}}
`, nil)
	if info.Status != run.StatusFailed || info.Error == nil || info.Error.Kind != run.KindPermission || info.Error.StepKey != "sub" {
		t.Fatalf("parent: %s %+v", info.Status, info.Error)
	}
	steps := b.steps(info.ID)
	note, page := steps["on_failure.note"], steps["on_failure.page"]
	if note.Status != run.StepCompleted || jsonOf(t, note.Output) != `{"at":"sub","kind":"permission"}` {
		t.Fatalf("on_failure.note: %+v", note)
	}
	if page.Status != run.StepCompleted || page.ChildRunID == "" {
		t.Fatalf("on_failure.page: %+v", page)
	}
	alert := b.wait(page.ChildRunID)
	if alert.ParentStepKey != "on_failure.page" || jsonOf(t, alert.Outputs["post"]) != `{"text":"failed at sub: permission"}` {
		t.Fatalf("the on_failure child: %+v %s", alert.ParentStepKey, jsonOf(t, alert.Outputs["post"]))
	}
}

// The spec's and the engine's defaults (retry, timeout_secs) are for tool steps: a workflow
// step keeps its own policy (here none: one attempt, one child).
func TestSubflowDefaultsDoNotApplyToWorkflowSteps(t *testing.T) {
	t.Parallel()
	b := setup(t, withConfig(func(c *engine.Config) {
		c.Defaults = &engine.PolicyDefaults{Retry: map[string]any{"max_attempts": 4, "initial_delay_ms": 0}}
	}))
	b.register("name: broken\nsteps:\n  - {id: f, tool: flow__fail, args: {kind: transient}}\n")
	info := b.run(`
name: parent
defaults:
  retry: {max_attempts: 3, initial_delay_ms: 0}
  timeout_secs: 0.001
steps:
  - {id: sub, kind: workflow, workflow: broken}
`, nil)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindTransient || len(info.Children) != 1 {
		t.Fatalf("parent: %s %+v children %+v; want failed transient after one child", info.Status, info.Error, info.Children)
	}
	// The child's own tool steps get the engine's defaults (its spec has none): 4 attempts.
	if st := b.steps(info.Children[0].ID)["f"]; st.Attempts != 4 {
		t.Fatalf("the child's tool step: %+v; want the engine default of 4 attempts", st)
	}
}
