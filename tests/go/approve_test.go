package gotest

import (
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

const gated = `
name: gated
inputs: { date: { type: string, default: "2026-03-08" } }
steps:
  - id: human_gate
    kind: approve
    prompt: "Push the {{inputs.date}} vendor drop to Unreal?"
    timeout_secs: 3600
  - { id: push, tool: flow__echo, args: { ok: "{{human_gate.approved}}", by: "{{human_gate.by}}" } }
`

func (b *testBundle) waitRunStatus(id string, want run.Status) *engine.RunInfo {
	b.t.Helper()
	var info *engine.RunInfo
	b.waitFor("run status "+string(want), func() bool {
		info = b.status(id)
		return info.Status == want
	})
	return info
}

func TestApproveResolved(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(gated, nil)
	info := b.waitRunStatus(id, run.StatusWaiting)
	if len(info.Approvals) != 1 || info.Approvals[0].StepKey != "human_gate" || info.Approvals[0].Prompt != "Push the 2026-03-08 vendor drop to Unreal?" ||
		!info.Approvals[0].ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("approvals %+v", info.Approvals)
	}
	if st := b.steps(id)["human_gate"]; st.Status != run.StepWaitingApproval {
		t.Fatalf("step %s", st.Status)
	}
	if err := b.eng.Approve(b.ctx, id, "human_gate", true, "looks good", "alice"); err != nil {
		t.Fatal(err)
	}
	info = b.wait(id)
	if info.Status != run.StatusCompleted {
		t.Fatalf("status %s %+v", info.Status, info.Error)
	}
	if got := jsonOf(t, info.Outputs["human_gate"]); got != `{"approved":true,"by":"alice","reason":"looks good"}` {
		t.Fatalf("approve output %s", got)
	}
	if got := jsonOf(t, info.Outputs["push"]); got != `{"by":"alice","ok":true}` {
		t.Fatalf("push %s", got)
	}
	want := []string{"approve_requested:human_gate:waiting_approval", "approve_resolved:human_gate:completed"}
	if got := b.eventTypes(id, run.EventApproveRequested, run.EventApproveResolved); jsonOf(t, got) != jsonOf(t, want) {
		t.Fatalf("events %v", got)
	}
	for _, e := range b.events(id) {
		if e.Type == run.EventApproveRequested {
			mustContain(t, "detail", string(e.Detail), `"prompt":"Push the 2026-03-08 vendor drop to Unreal?"`, `"timeout_secs":3600`)
		}
	}
	// Approving again: no open approval.
	err := b.eng.Approve(b.ctx, id, "human_gate", true, "", "")
	if codeOf(err) != run.CodeInvalidState {
		t.Fatalf("second approve: %v", err)
	}
}

func TestApproveDenied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.submit(gated, nil)
	b.waitRunStatus(id, run.StatusWaiting)
	if err := b.eng.Approve(b.ctx, id, "nope", true, "", ""); codeOf(err) != run.CodeInvalidState {
		t.Fatalf("approving a step without an open approval: %v", err)
	} else {
		mustContain(t, "message", err.Error(), "open approvals: human_gate")
	}
	if err := b.eng.Approve(b.ctx, "r-nope", "human_gate", true, "", ""); codeOf(err) != run.CodeNotFound {
		t.Fatalf("unknown run: %v", err)
	}
	if err := b.eng.Approve(b.ctx, id, "human_gate", false, "wrong drop", "bob"); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if info.Status != run.StatusFailed || info.Error.Kind != "denied" || info.Error.StepKey != "human_gate" {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	mustContain(t, "message", info.Error.Message, "denied by bob: wrong drop")
	st := b.steps(id)
	if jsonOf(t, st["human_gate"].Output) != `{"approved":false,"by":"bob","reason":"wrong drop"}` || st["push"].Status != run.StepSkipped {
		t.Fatalf("gate %+v push %+v", st["human_gate"], st["push"])
	}
}

func TestApproveTimesOut(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(gated, nil)
	b.waitRunStatus(id, run.StatusWaiting)
	b.waitTimers(1)
	if d := b.nextTimerIn(); d != time.Hour {
		t.Fatalf("approval timeout in %v", d)
	}
	b.clk.Advance(time.Hour)
	info := b.wait(id)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindTimeout {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	if got := jsonOf(t, b.steps(id)["human_gate"].Output); got != `{"approved":false,"by":"","reason":"timeout"}` {
		t.Fatalf("output %s", got)
	}
	if err := b.eng.Approve(b.ctx, id, "human_gate", true, "", ""); codeOf(err) != run.CodeInvalidState {
		t.Fatalf("approving a finished run: %v", err)
	}
}

func TestApprovalInsideForeachAndWaitingStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - id: both
    kind: parallel
    steps:
      - { id: work, tool: t }
      - id: each
        kind: foreach
        items: [a, b]
        steps:
          - { id: review, kind: approve, prompt: "ok {{item}}?" }
`, nil)
	call := b.nextCall(flowtype.LaneMain)
	b.waitStep(id, "each[0].review", run.StepWaitingApproval)
	if st := b.status(id).Status; st != run.StatusRunning {
		t.Fatalf("a tool is in flight: the run is %s, want running", st)
	}
	if err := b.eng.Host().Complete(call.ID, output(nil)); err != nil {
		t.Fatal(err)
	}
	info := b.waitRunStatus(id, run.StatusWaiting)
	if len(info.Approvals) != 1 || info.Approvals[0].Prompt != "ok a?" {
		t.Fatalf("approvals %+v", info.Approvals)
	}
	if err := b.eng.Approve(b.ctx, id, "each[0].review", true, "", "carol"); err != nil {
		t.Fatal(err)
	}
	b.waitStep(id, "each[1].review", run.StepWaitingApproval)
	if err := b.eng.Approve(b.ctx, id, "each[1].review", true, "", "carol"); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCompleted {
		t.Fatalf("status %s", info.Status)
	}
}
