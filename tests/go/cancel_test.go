package gotest

import (
	"context"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// promptly bounds how long a cancelled run may take to become terminal in these tests. The
// goal is 5 ms (make bench measures it); the bound is generous for the race detector.
const promptly = 2 * time.Second

func (b *testBundle) cancelAndWait(id, reason string) *engine.RunInfo {
	b.t.Helper()
	start := time.Now()
	if err := b.eng.Cancel(b.ctx, id, reason); err != nil {
		b.t.Fatalf("Cancel: %v", err)
	}
	info, err := b.eng.Wait(b.ctx, id, promptly)
	if err != nil {
		b.t.Fatal(err)
	}
	if !info.Terminal {
		b.t.Fatalf("run still %s %v after Cancel", info.Status, time.Since(start))
	}
	if info.Status != run.StatusCancelled || info.Error == nil || info.Error.Kind != run.KindCancelled {
		b.t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	mustContain(b.t, "cancel message", info.Error.Message, reason)
	return info
}

func TestCancelDuringAToolCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__export"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - { id: export, tool: maya__export }
  - { id: after, tool: flow__echo }
`, nil)
	call := b.nextCall(flowtype.LaneMain)
	if b.eng.Host().Cancelled(call.ID) {
		t.Fatal("cancelled too early")
	}
	b.cancelAndWait(id, "operator pressed stop")
	if !b.eng.Host().Cancelled(call.ID) {
		t.Fatal("the host call must report Cancelled")
	}
	if err := b.eng.Host().Complete(call.ID, output("late")); codeOf(err) != run.CodeInvalidState {
		t.Fatalf("late completion: %v", err)
	}
	st := b.steps(id)
	if st["export"].Status != run.StepCancelled {
		t.Fatalf("export %+v", st["export"])
	}
	if _, started := st["after"]; started {
		t.Fatal("no new step starts after a cancel")
	}
	if err := b.eng.Cancel(b.ctx, id, "again"); err != nil {
		t.Fatalf("Cancel is idempotent: %v", err)
	}
	if last := b.eventTypes(id); last[len(last)-1] != "workflow_terminal::cancelled" {
		t.Fatalf("events %v", last)
	}
}

func TestCancelDuringABackoffSleep(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(`
steps:
  - id: flaky
    tool: flow__fail
    args: { kind: transient }
    retry: { max_attempts: 5, backoff: fixed, initial_delay_ms: 3600000, max_delay_ms: 3600000 }
`, nil)
	b.waitTimers(1)
	b.waitStep(id, "flaky", run.StepRetrying)
	b.cancelAndWait(id, "no more retries")
	// Attempt 2 was waiting for its backoff: it never started, so it is not counted.
	if st := b.steps(id)["flaky"]; st.Status != run.StepCancelled || st.Attempts != 1 {
		t.Fatalf("step %+v", st)
	}
	b.waitFor("the backoff timer to be stopped", func() bool { return b.clk.Pending() == 0 })
}

func TestCancelDuringAnApprovalWait(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(gated, nil)
	b.waitRunStatus(id, run.StatusWaiting)
	b.cancelAndWait(id, "drop cancelled")
	if st := b.steps(id)["human_gate"]; st.Status != run.StepCancelled {
		t.Fatalf("gate %+v", st)
	}
	if err := b.eng.Approve(b.ctx, id, "human_gate", true, "", ""); codeOf(err) != run.CodeInvalidState {
		t.Fatalf("approving a cancelled run: %v", err)
	}
	b.waitFor("the approval timer to be stopped", func() bool { return b.clk.Pending() == 0 })
}

func TestCancelDuringAThousandItemForeach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	items := make([]any, 1000)
	for i := range items {
		items[i] = float64(i)
	}
	id := b.submit(`
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 100
    steps:
      - { id: nap, tool: flow__sleep, args: { ms: 600000 } }
`, map[string]any{"items": items})
	b.waitFor("100 iterations in flight", func() bool { return b.status(id).Progress.Completed == 0 && len(b.steps(id)) >= 101 })
	info := b.cancelAndWait(id, "too many")
	st := b.steps(id)
	cancelled := 0
	for k, s := range st {
		if k != "each" && s.Status != run.StepCancelled {
			t.Fatalf("%s is %s", k, s.Status)
		}
		cancelled++
	}
	if cancelled != 101 || st["each"].Status != run.StepCancelled {
		t.Fatalf("%d instances; foreach %s", cancelled, st["each"].Status)
	}
	if info.Progress.Total != 1001 || info.Progress.Completed != 101 {
		t.Fatalf("progress %+v", info.Progress)
	}
}

// The tools sleep on the stub clock, which only the test advances: the run must become
// cancelled while all three still sleep. Ordered by events, not by a stopwatch: an engine that
// waited for them would never see Wait return (cancelAndWait fails after promptly).
func TestCancelEvenIfTheToolIgnoresIt(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(`
steps:
  - id: each
    kind: foreach
    items: [1, 2, 3]
    concurrency: 3
    steps:
      - { id: stubborn, tool: flow__sleep, args: { ms: 300, ignore_cancel: true } }
`, nil)
	b.waitStep(id, "each[2].stubborn", run.StepRunning)
	b.waitTimers(3) // the three tools sleep
	b.cancelAndWait(id, "now")
	if p := b.clk.Pending(); p != 3 {
		t.Fatalf("%d sleeping tools when the run was cancelled, want all 3 still sleeping", p)
	}
	b.clk.Advance(300 * time.Millisecond) // let the abandoned tools return (the leak check waits for them)
}

func TestCloseInterruptsRuns(t *testing.T) {
	t.Parallel()
	mem := engine.NewMemoryStore()
	b := setup(t, withOptions(engine.WithStore(mem)))
	id := b.submit(`
steps:
  - { id: nap, tool: flow__sleep, args: { ms: 600000 } }
  - { id: after, tool: flow__echo }
`, nil)
	b.waitStep(id, "nap", run.StepRunning)
	sub, err := b.eng.Events(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), promptly)
	defer cancel()
	if err := b.eng.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.eng.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := sub.Next(ctx); codeOf(err) != run.CodeClosed {
		t.Fatalf("subscription after Close: %v", err)
	}
	if _, err := b.eng.Submit(ctx, engine.StartRequest{Spec: parse(t, "steps: [{id: a, tool: flow__echo}]")}); codeOf(err) != run.CodeClosed {
		t.Fatalf("Submit after Close: %v", err)
	}
	if _, err := b.eng.Status(ctx, id); codeOf(err) != run.CodeClosed {
		t.Fatalf("Status after Close: %v", err)
	}
	if _, err := b.eng.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: time.Second}); codeOf(err) != run.CodeClosed {
		t.Fatalf("Host().Pull after Close: %v", err)
	}

	// The records outlive the engine: a second engine on the same store sees an interrupted run.
	again, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1}, engine.WithStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	info, err := again.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if info.Status != run.StatusInterrupted || info.Error == nil || info.Error.Kind != "interrupted" {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	steps, _ := again.Steps(ctx, id)
	if len(steps) != 1 || steps[0].Status != run.StepInterrupted {
		t.Fatalf("steps %+v", steps)
	}
	evs, _ := again.EventsSince(0, 100)
	if last := evs[len(evs)-1]; last.Type != run.EventWorkflowTerminal || last.Status != string(run.StatusInterrupted) || last.RunID != id {
		t.Fatalf("last event %+v", last)
	}
}

func TestCancelDuringParallelBranchesIsTerminalWhenCancelReturns(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "hold"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - id: par
    kind: parallel
    steps:
      - { id: call, tool: hold }
      - { id: nap, tool: flow__sleep, args: { ms: 600000 } }
      - { id: gate, kind: approve, prompt: go }
      - id: flaky
        tool: flow__fail
        args: { kind: transient }
        retry: { max_attempts: 3, initial_delay_ms: 3600000, max_delay_ms: 3600000 }
  - { id: after, tool: flow__echo }
`, nil)
	call := b.nextCall(flowtype.LaneMain)
	b.waitStep(id, "flaky", run.StepRetrying)
	b.waitStep(id, "gate", run.StepWaitingApproval)
	b.waitStep(id, "nap", run.StepRunning)
	if err := b.eng.Cancel(b.ctx, id, "stop everything"); err != nil {
		t.Fatal(err)
	}
	// No Wait: Cancel returns once the terminal record is written.
	info := b.status(id)
	if info.Status != run.StatusCancelled {
		t.Fatalf("status right after Cancel: %s", info.Status)
	}
	st := b.steps(id)
	for _, k := range []string{"par", "call", "nap", "gate", "flaky"} {
		if st[k].Status != run.StepCancelled || st[k].Error == nil || st[k].Error.Kind != run.KindCancelled {
			t.Errorf("%s: %+v", k, st[k])
		}
	}
	if st["flaky"].Attempts != 1 {
		t.Errorf("the retrying step counts the attempt it made, not the one it waited for: %+v", st["flaky"])
	}
	if _, started := st["after"]; started {
		t.Error("no step starts after a cancel")
	}
	evs := b.eventTypes(id)
	if last := evs[len(evs)-1]; last != "workflow_terminal::cancelled" {
		t.Fatalf("last event %s", last)
	}
	// The steps' goroutines unwind afterwards and write nothing more.
	b.waitFor("the host call to be withdrawn", func() bool { return b.eng.Host().Cancelled(call.ID) })
	b.waitFor("the timers to stop", func() bool { return b.clk.Pending() == 0 })
	if again := b.eventTypes(id); len(again) != len(evs) {
		t.Fatalf("events written after the terminal one: %v", again[len(evs):])
	}
	if info.Progress.Completed != info.Progress.Total-1 {
		t.Fatalf("progress %+v (only `after` never ran)", info.Progress)
	}
}
