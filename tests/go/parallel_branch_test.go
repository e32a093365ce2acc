package gotest

import (
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestParallelRunsBranchesTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "t", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - id: both
    kind: parallel
    steps:
      - { id: left, tool: t, args: { side: left } }
      - { id: right, tool: t, args: { side: right } }
      - { id: third, tool: flow__echo, args: { n: 3 } }
  - { id: after, tool: flow__echo, args: { l: "{{left.side}}", all: "{{both}}" } }
`, nil)
	// Both host calls are pending at once: neither waits for the other.
	calls, err := b.eng.Host().Pull(b.ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 2, Timeout: waitLimit})
	for err == nil && len(calls) < 2 {
		var more []flowtype.PendingCall
		more, err = b.eng.Host().Pull(b.ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 2, Timeout: waitLimit})
		calls = append(calls, more...)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		if err := b.eng.Host().Complete(c.ID, output(map[string]any{"side": c.Args["side"]})); err != nil {
			t.Fatal(err)
		}
	}
	info := b.wait(id)
	if info.Status != run.StatusCompleted {
		t.Fatalf("status %s %+v", info.Status, info.Error)
	}
	want := `{"left":{"side":"left"},"right":{"side":"right"},"third":{"n":3}}`
	if got := jsonOf(t, info.Outputs["both"]); got != want {
		t.Fatalf("parallel output %s", got)
	}
	after := info.Outputs["after"].(map[string]any)
	if after["l"] != "left" || jsonOf(t, after["all"]) != want {
		t.Fatalf("after %s", jsonOf(t, after))
	}
}

func TestParallelOnAnyFail(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mode      string
		slowState run.StepStatus
	}{
		{"abort", run.StepCancelled},
		{"continue", run.StepCompleted},
	}
	for _, c := range cases {
		t.Run(c.mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "slow"}); err != nil {
				t.Fatal(err)
			}
			if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "bad", Lane: flowtype.LaneWorker}); err != nil {
				t.Fatal(err)
			}
			id := b.submit(`
steps:
  - id: par
    kind: parallel
    on_any_fail: `+c.mode+`
    steps:
      - { id: slow, tool: slow }
      - { id: bad, tool: bad }
      - { id: waits, tool: flow__echo, depends_on: [bad] }
  - { id: next, tool: flow__echo }
`, nil)
			call := b.nextCall(flowtype.LaneMain)
			bad := b.nextCall(flowtype.LaneWorker)
			if err := b.eng.Host().Complete(bad.ID, flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "fatal", Message: "nope"}}); err != nil {
				t.Fatal(err)
			}
			b.waitStep(id, "bad", run.StepFailed)
			if c.mode == "continue" {
				if b.eng.Host().Cancelled(call.ID) {
					t.Fatal("continue must let the sibling finish")
				}
				if err := b.eng.Host().Complete(call.ID, output("done")); err != nil {
					t.Fatal(err)
				}
			}
			info := b.wait(id)
			if info.Status != run.StatusFailed || info.Error.StepKey != "bad" || info.Error.Kind != "fatal" {
				t.Fatalf("status %s error %+v", info.Status, info.Error)
			}
			st := b.steps(id)
			if st["slow"].Status != c.slowState || st["bad"].Status != run.StepFailed || st["waits"].Status != run.StepSkipped ||
				st["par"].Status != run.StepFailed || st["next"].Status != run.StepSkipped {
				t.Fatalf("slow %s bad %s waits %s par %s next %s", st["slow"].Status, st["bad"].Status, st["waits"].Status, st["par"].Status, st["next"].Status)
			}
			if c.mode == "abort" && !b.eng.Host().Cancelled(call.ID) {
				t.Fatal("abort must cancel the sibling's call")
			}
		})
	}
}

func TestBranchBothWays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	text := `
inputs: { qc: { type: any } }
steps:
  - { id: check, tool: flow__echo, args: { passed: "{{inputs.qc}}" } }
  - id: gate
    kind: branch
    on: "$.check.passed"
    then:
      - { id: publish, tool: flow__echo, args: { ok: true } }
      - { id: notify, tool: flow__echo }
    else:
      - { id: reject, tool: flow__echo, args: { ok: false } }
  - { id: done, tool: flow__echo, args: { taken: "{{gate.taken}}", pub: "{{steps.publish.status}}" } }
`
	cases := []struct {
		qc      any
		taken   string
		ran     []string
		skipped []string
	}{
		{true, "then", []string{"publish", "notify"}, []string{"reject"}},
		{"yes", "then", []string{"publish", "notify"}, []string{"reject"}},
		{[]any{0.0}, "then", []string{"publish", "notify"}, []string{"reject"}},
		{false, "else", []string{"reject"}, []string{"publish", "notify"}},
		{0.0, "else", []string{"reject"}, []string{"publish", "notify"}},
		{"", "else", []string{"reject"}, []string{"publish", "notify"}},
		{[]any{}, "else", []string{"reject"}, []string{"publish", "notify"}},
		{map[string]any{}, "else", []string{"reject"}, []string{"publish", "notify"}},
		{nil, "else", []string{"reject"}, []string{"publish", "notify"}},
	}
	for _, c := range cases {
		t.Run(jsonOf(t, c.qc), func(t *testing.T) {
			t.Parallel()
			b := b.sub(t)
			info := b.run(text, map[string]any{"qc": c.qc})
			if info.Status != run.StatusCompleted {
				t.Fatalf("status %s %+v", info.Status, info.Error)
			}
			gate := info.Outputs["gate"].(map[string]any)
			if gate["taken"] != c.taken || jsonOf(t, gate["condition"]) != jsonOf(t, c.qc) {
				t.Fatalf("branch output %s", jsonOf(t, gate))
			}
			st := b.steps(info.ID)
			for _, k := range c.ran {
				if st[k].Status != run.StepCompleted {
					t.Fatalf("%s: %s", k, st[k].Status)
				}
			}
			for _, k := range c.skipped {
				if st[k].Status != run.StepSkipped {
					t.Fatalf("%s: %s", k, st[k].Status)
				}
			}
			wantPub := "completed"
			if c.taken == "else" {
				wantPub = "skipped"
			}
			if done := info.Outputs["done"].(map[string]any); done["taken"] != c.taken || done["pub"] != wantPub {
				t.Fatalf("done %s", jsonOf(t, done))
			}
			if info.Progress.Completed != 6 || info.Progress.Total != 6 {
				t.Fatalf("progress %+v", info.Progress)
			}
		})
	}
}

func TestBranchOnTemplateAndFailure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(`
steps:
  - id: br
    kind: branch
    condition: "{{inputs.go}}"
    then:
      - { id: boom, tool: flow__fail, args: { kind: fatal } }
`, map[string]any{"go": 1.0})
	st := b.steps(info.ID)
	if info.Status != run.StatusFailed || info.Error.StepKey != "boom" || st["br"].Status != run.StepFailed {
		t.Fatalf("status %s error %+v br %+v", info.Status, info.Error, st["br"])
	}
}

func TestDAGDiamond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit(`
steps:
  - { id: top, tool: flow__echo, args: { v: 1 } }
  - { id: left, tool: t, args: { side: left }, depends_on: [top] }
  - { id: right, tool: t, args: { side: right }, depends_on: [top] }
  - { id: bottom, tool: flow__echo, args: { l: "{{left.side}}", r: "{{right.side}}" }, depends_on: [left, right] }
`, nil)
	// left and right are ready together after top.
	var calls []flowtype.PendingCall
	for len(calls) < 2 {
		calls = append(calls, b.nextCall(flowtype.LaneMain))
	}
	st := b.steps(id)
	if st["top"].Status != run.StepCompleted {
		t.Fatal("left and right must wait for top")
	}
	if _, started := st["bottom"]; started {
		t.Fatal("bottom must wait for left and right")
	}
	if err := b.eng.Host().Complete(calls[0].ID, output(map[string]any{"side": calls[0].Args["side"]})); err != nil {
		t.Fatal(err)
	}
	b.waitStep(id, calls[0].StepKey, run.StepCompleted)
	if _, started := b.steps(id)["bottom"]; started {
		t.Fatal("bottom started with one of its two dependencies")
	}
	if err := b.eng.Host().Complete(calls[1].ID, output(map[string]any{"side": calls[1].Args["side"]})); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if info.Status != run.StatusCompleted || jsonOf(t, info.Outputs["bottom"]) != `{"l":"left","r":"right"}` {
		t.Fatalf("status %s outputs %s", info.Status, jsonOf(t, info.Outputs))
	}
	// Order in the event stream: top exits before left/right enter; both exit before bottom enters.
	pos := map[string]int{}
	for i, e := range b.events(id) {
		pos[e.Type+":"+e.StepKey] = i
	}
	if !(pos["step_exit:top"] < pos["step_enter:left"] && pos["step_exit:top"] < pos["step_enter:right"] &&
		pos["step_exit:left"] < pos["step_enter:bottom"] && pos["step_exit:right"] < pos["step_enter:bottom"]) {
		t.Fatalf("event order %v", pos)
	}
}

func TestDAGDependentsOfAFailureAreSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(`
steps:
  - { id: a, tool: flow__fail, args: { kind: fatal }, depends_on: [] }
  - { id: b, tool: flow__echo, depends_on: [a] }
  - { id: c, tool: flow__echo, depends_on: [b] }
  - { id: independent, tool: flow__echo, depends_on: [] }
  - { id: after_independent, tool: flow__echo, depends_on: [independent] }
  - id: group
    kind: parallel
    depends_on: [a]
    steps:
      - { id: inside, tool: flow__echo }
`, nil)
	if info.Status != run.StatusFailed {
		t.Fatalf("status %s", info.Status)
	}
	st := b.steps(info.ID)
	want := map[string]run.StepStatus{
		"a": run.StepFailed, "b": run.StepSkipped, "c": run.StepSkipped, "group": run.StepSkipped, "inside": run.StepSkipped,
		"independent": run.StepCompleted, "after_independent": run.StepCompleted,
	}
	for k, w := range want {
		if st[k].Status != w {
			t.Errorf("%s is %s, want %s", k, st[k].Status, w)
		}
	}
	skips := b.eventTypes(info.ID, run.EventStepSkipped)
	if len(skips) != 4 {
		t.Fatalf("skip events %v", skips)
	}
	if info.Progress != (run.Progress{Completed: 7, Total: 7}) {
		t.Fatalf("progress %+v", info.Progress)
	}
}

func TestStepTimeoutOfAControlStep(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock())
	id := b.submit(`
steps:
  - id: each
    kind: foreach
    items: [1, 2]
    concurrency: 2
    timeout_secs: 10
    steps:
      - { id: nap, tool: flow__sleep, args: { ms: 60000 } }
`, nil)
	b.waitTimers(3) // the step's deadline and two sleeps
	b.clk.Advance(10 * time.Second)
	info := b.wait(id)
	st := b.steps(id)
	if info.Status != run.StatusFailed || st["each"].Status != run.StepFailed || st["each"].Error.Kind != run.KindTimeout ||
		st["each[0].nap"].Status != run.StepCancelled || st["each[1].nap"].Status != run.StepCancelled {
		t.Fatalf("status %s error %+v each %+v naps %s %s", info.Status, info.Error, st["each"], st["each[0].nap"].Status, st["each[1].nap"].Status)
	}
	mustContain(t, "message", info.Error.Message, "each timed out after 10s")
}
