package gotest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// noCallWithin fails the test if a host call of lane is handed out within d.
func (b *testBundle) noCallWithin(lane string, d time.Duration) {
	b.t.Helper()
	if b.testPuller == 0 {
		b.testPuller = b.puller()
	}
	calls, err := b.eng.Host().Pull(b.ctx, flowtype.PullRequest{Lanes: []string{lane}, Max: 1, Timeout: d, Puller: b.testPuller})
	if err != nil {
		b.t.Fatal(err)
	}
	if len(calls) > 0 {
		b.t.Fatalf("a paused run started %s (%s)", calls[0].StepKey, calls[0].Tool)
	}
}

// pauseEvents returns the detail of the run's run_paused and run_unpaused events, in order.
func (b *testBundle) pauseEvents(id string) []string {
	var out []string
	for _, ev := range b.events(id) {
		if ev.Type == run.EventRunPaused || ev.Type == run.EventRunUnpaused {
			out = append(out, ev.Type+":"+ev.Status+":"+string(ev.Detail))
		}
	}
	return out
}

// Pausing a foreach in the middle: the iterations in flight finish and record their results, no
// new one starts; unpause lets the rest run.
func TestPauseMidForeachStartsNoNewItem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__export"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - id: each
    kind: foreach
    items: [a, b, c, d, e, f]
    concurrency: 2
    steps:
      - { id: export, tool: maya__export, args: { shot: "{{item}}" } }
  - { id: after, tool: flow__echo, args: { value: done } }
`, nil)
	first, second := b.nextCall(flowtype.LaneMain), b.nextCall(flowtype.LaneMain)
	if err := b.eng.Pause(b.ctx, id, "render farm full", "ana"); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Pause(b.ctx, id, "again", "bo"); err != nil {
		t.Fatalf("pausing a paused run is not an error: %v", err)
	}
	if st := b.status(id).Status; st != run.StatusPaused {
		t.Fatalf("status after Pause: %s", st)
	}
	// The two in flight finish and record their results.
	for _, c := range []flowtype.PendingCall{first, second} {
		if err := b.eng.Host().Complete(c.ID, output("ok")); err != nil {
			t.Fatal(err)
		}
	}
	b.waitStep(id, first.StepKey, run.StepCompleted)
	b.waitStep(id, second.StepKey, run.StepCompleted)
	b.noCallWithin(flowtype.LaneMain, 300*time.Millisecond)
	if n := len(b.steps(id)); n != 3 { // each, and the two iterations that ran
		t.Fatalf("paused run has %d step instances: %v", n, b.steps(id))
	}
	if info := b.status(id); info.Status != run.StatusPaused || info.Terminal {
		t.Fatalf("run while paused: %s terminal=%v", info.Status, info.Terminal)
	}
	want := []string{`run_paused:paused:{"reason":"render farm full","by":"ana"}`}
	if got := b.pauseEvents(id); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("pause events %v; want %v (the second pause writes nothing)", got, want)
	}

	if err := b.eng.Unpause(b.ctx, id, "farm free", "ana"); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Unpause(b.ctx, id, "", ""); err != nil {
		t.Fatalf("unpausing a running run is not an error: %v", err)
	}
	srv := b.serve(flowtype.LaneMain, func(flowtype.PendingCall) flowtype.ToolResult { return output("ok") })
	info := b.wait(id)
	if info.Status != run.StatusCompleted {
		t.Fatalf("after unpause: %s %+v", info.Status, info.Error)
	}
	if n := srv.calls.Load(); n != 4 {
		t.Fatalf("after unpause %d calls; want the 4 items left", n)
	}
	// No step started between run_paused and run_unpaused.
	paused := false
	for _, ev := range b.events(id) {
		switch ev.Type {
		case run.EventRunPaused:
			paused = true
		case run.EventRunUnpaused:
			paused = false
			if ev.Status != string(run.StatusRunning) {
				t.Errorf("run_unpaused status %s", ev.Status)
			}
		case run.EventStepEnter:
			if paused {
				t.Errorf("%s started while the run was paused", ev.StepKey)
			}
		}
	}
	if err := b.eng.Pause(b.ctx, id, "", ""); codeOf(err) != run.CodeInvalidState {
		t.Fatalf("pausing a completed run: %v", err)
	}
	if err := b.eng.Unpause(b.ctx, id, "", ""); codeOf(err) != run.CodeInvalidState {
		t.Fatalf("unpausing a completed run: %v", err)
	}
	if err := b.eng.Pause(b.ctx, "r-nope", "", ""); codeOf(err) != run.CodeNotFound {
		t.Fatalf("pausing an unknown run: %v", err)
	}
}

// A retry whose backoff ends while the run is paused waits for the unpause.
func TestPauseHoldsARetryUntilUnpause(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(`
steps:
  - id: flaky
    tool: flow__fail
    args: { kind: transient }
    retry: { max_attempts: 3, backoff: fixed, initial_delay_ms: 1000, max_delay_ms: 1000 }
`, nil)
	b.waitTimers(1)
	b.waitStep(id, "flaky", run.StepRetrying)
	if err := b.eng.Pause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	b.clk.Advance(time.Hour)
	time.Sleep(200 * time.Millisecond) // the attempt would start now if the pause let it
	if st := b.steps(id)["flaky"]; st.Status != run.StepRetrying || st.Attempts != 2 {
		t.Fatalf("a paused retry: %+v; want still retrying before attempt 2", st)
	}
	if err := b.eng.Unpause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	b.waitTimers(1) // attempt 2 failed: the next backoff
	b.clk.Advance(time.Hour)
	info := b.wait(id)
	if st := b.steps(id)["flaky"]; info.Status != run.StatusFailed || st.Attempts != 3 {
		t.Fatalf("after unpause: %s, step %+v", info.Status, st)
	}
}

// A paused run's open approval can be answered, but the next step does not start.
func TestApprovingAPausedRunStartsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(`
steps:
  - { id: gate, kind: approve, prompt: "ship?" }
  - { id: after, tool: flow__echo, args: { value: shipped } }
`, nil)
	b.waitRunStatus(id, run.StatusWaiting)
	if err := b.eng.Pause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Approve(b.ctx, id, "gate", true, "", "lead"); err != nil {
		t.Fatalf("approving a paused run's gate: %v", err)
	}
	b.waitStep(id, "gate", run.StepCompleted)
	time.Sleep(100 * time.Millisecond)
	if _, started := b.steps(id)["after"]; started {
		t.Fatal("the step after the approval started while the run was paused")
	}
	if st := b.status(id).Status; st != run.StatusPaused {
		t.Fatalf("status %s; want paused", st)
	}
	if err := b.eng.Unpause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCompleted {
		t.Fatalf("after unpause: %s", info.Status)
	}
}

func TestCancelAPausedRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(`
steps:
  - { id: gate, kind: approve, prompt: "ship?" }
  - { id: after, tool: flow__echo }
`, nil)
	b.waitRunStatus(id, run.StatusWaiting)
	if err := b.eng.Pause(b.ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	b.cancelAndWait(id, "not this week")
	if err := b.eng.Unpause(b.ctx, id, "", ""); codeOf(err) != run.CodeInvalidState {
		t.Fatalf("unpausing a cancelled run: %v", err)
	}
}

// A paused run outlives its engine: closed while paused, its step in flight becomes
// interrupted and the run stays paused; the next engine neither resumes it on its own nor lets
// Resume touch it, and Unpause resumes it without calling its completed steps again.
func TestPausedRunSurvivesReopen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	db := filepath.Join(t.TempDir(), "flow.db")
	s, err := spec.ParseString(`
name: chain
steps:
  - { id: a, tool: maya__export, args: { n: 1 } }
  - { id: b, tool: maya__export, args: { n: 2 } }
  - { id: c, tool: maya__export, args: { n: 3 } }
`)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "maya__export"}); err != nil {
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
		calls[got[0].StepKey]++
		return got[0]
	}

	e1 := open()
	id, err := e1.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := e1.Host().Complete(next(e1).ID, output("a done")); err != nil {
		t.Fatal(err)
	}
	inFlight := next(e1) // b
	if err := e1.Pause(ctx, id, "end of day", "ana"); err != nil {
		t.Fatal(err)
	}
	if err := e1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	_ = inFlight

	e2 := open()
	defer e2.Close(ctx)
	info, err := e2.Status(ctx, id)
	if err != nil || info.Status != run.StatusPaused || info.Terminal {
		t.Fatalf("after reopen: %v %+v; want paused", err, info)
	}
	byKey := map[string]run.StepStatus{}
	for _, st := range info.Steps {
		byKey[st.Key] = st.Status
	}
	if byKey["a"] != run.StepCompleted || byKey["b"] != run.StepInterrupted || byKey["c"] != "" {
		t.Fatalf("steps after reopen: %v; want a completed, b interrupted, c not started", byKey)
	}
	if ids, err := e2.Interrupted(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("a paused run is not interrupted: %v %v", ids, err)
	}
	if _, err := e2.Resume(ctx, id, engine.ResumeOptions{}); codeOf(err) != run.CodeNotResumable || !strings.Contains(err.Error(), "unpause") {
		t.Fatalf("resuming a paused run: %v", err)
	}
	if err := e2.Pause(ctx, id, "", ""); err != nil {
		t.Fatalf("pausing a stored paused run: %v", err)
	}
	// Wait on a paused run that no engine runs waits (it changes only by an unpause or a cancel)
	// and follows it once unpaused here.
	start := time.Now()
	if info, err := e2.Wait(ctx, id, 200*time.Millisecond); err != nil || info.Status != run.StatusPaused || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("Wait on a stored paused run: %v %+v after %v; want paused after the timeout", err, info, time.Since(start))
	}
	waited := make(chan *engine.RunInfo, 1)
	go func() {
		info, _ := e2.Wait(ctx, id, 0)
		waited <- info
	}()
	last, _ := e2.LastSeq(ctx)
	if err := e2.Unpause(ctx, id, "morning", "bo"); err != nil {
		t.Fatal(err)
	}
	if err := e2.Host().Complete(next(e2).ID, output("b done")); err != nil {
		t.Fatal(err)
	}
	if err := e2.Host().Complete(next(e2).ID, output("c done")); err != nil {
		t.Fatal(err)
	}
	info, err = e2.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("after unpause: %v %+v", err, info)
	}
	if w := <-waited; w == nil || w.Status != run.StatusCompleted {
		t.Fatalf("a Wait begun while the run was paused returned %+v; want it completed", w)
	}
	if calls["a"] != 1 || calls["b"] != 2 || calls["c"] != 1 {
		t.Fatalf("tool calls per step %v; want a once (completed before the pause), b twice (interrupted), c once", calls)
	}
	evs, err := e2.PollEvents(ctx, engine.EventQuery{FromSeq: last + 1, RunID: id}, time.Second)
	if err != nil || len(evs) < 2 || evs[0].Type != run.EventRunUnpaused || evs[1].Type != run.EventWorkflowResumed {
		t.Fatalf("events of the unpause: %v %+v; want run_unpaused then workflow_resumed", err, evs)
	}
	var detail map[string]string
	if err := json.Unmarshal(evs[0].Detail, &detail); err != nil || detail["reason"] != "morning" || detail["by"] != "bo" {
		t.Fatalf("run_unpaused detail %s", evs[0].Detail)
	}
}

// A paused run left by a closed engine is cancelled by the next one: cancelled, with its
// workflow_terminal event.
func TestCancelAStoredPausedRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	db := filepath.Join(t.TempDir(), "flow.db")
	s, err := spec.ParseString(`
name: gated
steps:
  - { id: gate, kind: approve, prompt: "ship?" }
`)
	if err != nil {
		t.Fatal(err)
	}
	e1, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	id, err := e1.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, e1, id, run.StatusWaiting)
	if err := e1.Pause(ctx, id, "", ""); err != nil {
		t.Fatal(err)
	}
	_ = e1.Close(ctx)
	e2, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close(ctx)
	if err := e2.Cancel(ctx, id, "dropped"); err != nil {
		t.Fatal(err)
	}
	info, err := e2.Status(ctx, id)
	if err != nil || info.Status != run.StatusCancelled || info.Error == nil || !strings.Contains(info.Error.Message, "dropped") || info.FinishedAt.IsZero() {
		t.Fatalf("cancelled paused run: %v %+v", err, info)
	}
	evs, _ := e2.PollEvents(ctx, engine.EventQuery{RunID: id}, 0)
	if last := evs[len(evs)-1]; last.Type != run.EventWorkflowTerminal || last.Status != string(run.StatusCancelled) {
		t.Fatalf("last event %+v", last)
	}
}

// A read-only engine beside the owner pauses and unpauses through control requests.
func TestReadOnlyEnginePausesThroughTheOwner(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	db := filepath.Join(t.TempDir(), "flow.db")
	owner, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	s, err := spec.ParseString(`
name: gated
steps:
  - { id: gate, kind: approve, prompt: "ship?" }
  - { id: after, tool: flow__echo, args: { value: shipped } }
`)
	if err != nil {
		t.Fatal(err)
	}
	id, err := owner.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, owner, id, run.StatusWaiting)
	ro, err := engine.Open(ctx, engine.Config{DB: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)
	if err := ro.Pause(ctx, id, "hold", "td"); err != nil {
		t.Fatal(err)
	}
	if info, err := ro.Status(ctx, id); err != nil || info.Status != run.StatusPaused {
		t.Fatalf("after a read-only pause: %v %+v", err, info)
	}
	if err := ro.Approve(ctx, id, "gate", true, "", "td"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, owner, id, run.StatusPaused) // the approval is in; after does not start
	time.Sleep(100 * time.Millisecond)
	if info, _ := ro.Status(ctx, id); info.Status != run.StatusPaused {
		t.Fatalf("status %s; want still paused", info.Status)
	}
	if err := ro.Unpause(ctx, id, "go", "td"); err != nil {
		t.Fatal(err)
	}
	if info, err := ro.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("after a read-only unpause: %v %+v", err, info)
	}
	if err := ro.Pause(ctx, id, "", ""); !hasCode(err, run.CodeInvalidState) {
		t.Fatalf("read-only pause of a completed run: %v", err)
	}
}
