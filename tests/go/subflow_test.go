package gotest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Sub-workflows: docs/reference/spec.md, "workflow".

const childSpec = `
name: child
inputs:
  shot: {type: string, required: true}
steps:
  - {id: a, tool: flow__echo, args: {v: "a-{{inputs.shot}}"}}
  - {id: b, tool: flow__echo, args: {v: "{{steps.a.output.v}}-b"}}
`

func (b *testBundle) register(text string) *spec.Spec {
	b.t.Helper()
	s := parse(b.t, text)
	if err := b.eng.Register(s); err != nil {
		b.t.Fatalf("Register: %v", err)
	}
	return s
}

func TestSubflowOutputsTheChildOutputs(t *testing.T) {
	b := setup(t)
	b.register(childSpec)
	info := b.run(`
name: parent
steps:
  - {id: sub, kind: workflow, workflow: child, inputs: {shot: "sh{{inputs.n}}"}}
  - {id: after, tool: flow__echo, args: {got: "{{steps.sub.output.b.v}}"}}
inputs:
  n: {type: integer}
`, map[string]any{"n": 10})
	if info.Status != run.StatusCompleted {
		t.Fatalf("parent: %s %+v", info.Status, info.Error)
	}
	if got := jsonOf(t, info.Outputs["after"]); got != `{"got":"a-sh10-b"}` {
		t.Fatalf("after: %s", got)
	}
	if got := jsonOf(t, info.Outputs["sub"]); got != `{"a":{"v":"a-sh10"},"b":{"v":"a-sh10-b"}}` {
		t.Fatalf("the workflow step's output is the child's outputs object: %s", got)
	}
	if len(info.Children) != 1 || info.Children[0].StepKey != "sub" || info.Children[0].Status != run.StatusCompleted || info.Children[0].Name != "child" {
		t.Fatalf("children: %+v", info.Children)
	}
	cid := info.Children[0].ID
	var sub engine.StepInfo
	for _, s := range info.Steps {
		if s.Key == "sub" {
			sub = s
		}
	}
	if sub.Kind != "workflow" || sub.ChildRunID != cid || sub.Attempts != 1 {
		t.Fatalf("the workflow step: %+v", sub)
	}
	child := b.status(cid)
	if child.ParentRunID != info.ID || child.ParentStepKey != "sub" || child.ID == info.ID || child.Name != "child" {
		t.Fatalf("the child is a run of its own, linked to its parent: %+v", child)
	}
	if got := jsonOf(t, child.Inputs); got != `{"shot":"sh10"}` {
		t.Fatalf("child inputs: %s", got)
	}
	// Steps gives the child run id too.
	if st := b.steps(info.ID)["sub"]; st.ChildRunID != cid {
		t.Fatalf("Steps: %+v", st)
	}
}

func TestSubflowChildFailureFailsTheStepWithItsKind(t *testing.T) {
	b := setup(t)
	b.register(`
name: broken
steps:
  - {id: boom, tool: flow__fail, args: {kind: permission, message: "no write access"}}
`)
	info := b.run(`
name: parent
steps:
  - {id: sub, kind: workflow, workflow: broken, retry: {max_attempts: 3, initial_delay_ms: 0}}
  - {id: never, tool: flow__echo}
`, nil)
	if info.Status != run.StatusFailed || info.Error == nil || info.Error.Kind != run.KindPermission || info.Error.StepKey != "sub" {
		t.Fatalf("parent: %s %+v", info.Status, info.Error)
	}
	if len(info.Children) != 1 {
		t.Fatalf("permission is not retried: %+v", info.Children)
	}
	mustContain(t, "the step error", info.Error.Message, "child run "+info.Children[0].ID, "workflow broken", "boom", "no write access")
	if st := b.steps(info.ID)["never"]; st.Status != run.StepSkipped {
		t.Fatalf("never: %+v", st)
	}
}

func TestSubflowRetryRunsANewChild(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	calls := 0
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "flaky", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: run.KindTransient, Message: "farm busy"}}
		}
		return output(map[string]any{"ok": calls})
	})
	b.register("name: flaky_child\nsteps:\n  - {id: f, tool: flaky}\n")
	info := b.run(`
name: parent
steps:
  - {id: sub, kind: workflow, workflow: flaky_child, retry: {max_attempts: 2, initial_delay_ms: 0}}
`, nil)
	if info.Status != run.StatusCompleted || len(info.Children) != 2 {
		t.Fatalf("parent: %s %+v %+v", info.Status, info.Error, info.Children)
	}
	if info.Children[0].Status != run.StatusFailed || info.Children[1].Status != run.StatusCompleted || info.Children[0].ID == info.Children[1].ID {
		t.Fatalf("a retry is a new child run: %+v", info.Children)
	}
	if st := b.steps(info.ID)["sub"]; st.Attempts != 2 || st.ChildRunID != info.Children[1].ID {
		t.Fatalf("sub: %+v", st)
	}
	if got := jsonOf(t, info.Outputs["sub"]); got != `{"f":{"ok":2}}` {
		t.Fatalf("output: %s", got)
	}
}

func TestSubflowCancelParentCancelsChild(t *testing.T) {
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "slow", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	b.register("name: slow_child\nsteps:\n  - {id: s, tool: slow}\n")
	id := b.submit("name: parent\nsteps:\n  - {id: sub, kind: workflow, workflow: slow_child}\n", nil)
	call := b.nextCall(flowtype.LaneMain) // the child's tool call is in flight
	if err := b.eng.Cancel(b.ctx, id, "operator stop"); err != nil {
		t.Fatal(err)
	}
	if st := b.status(call.RunID); st.Status != run.StatusCancelled {
		t.Fatalf("the child is cancelled by the time Cancel returns: %s", st.Status)
	}
	info := b.wait(id)
	if info.Status != run.StatusCancelled || len(info.Children) != 1 {
		t.Fatalf("parent: %s %+v", info.Status, info.Children)
	}
	child := b.wait(call.RunID)
	if child.ID != info.Children[0].ID || child.Status != run.StatusCancelled || child.Error == nil {
		t.Fatalf("child: %s %+v", child.Status, child.Error)
	}
	mustContain(t, "the child's cause", child.Error.Message, "parent run "+id, "cancelled", "operator stop")
}

func TestSubflowStepTimeoutCancelsChild(t *testing.T) {
	b := setup(t, withStubClock())
	b.register("name: sleepy\nsteps:\n  - {id: z, tool: flow__sleep, args: {ms: 60000}}\n")
	id := b.submit("name: parent\nsteps:\n  - {id: sub, kind: workflow, workflow: sleepy, timeout_secs: 5}\n", nil)
	b.waitTimers(2) // the step's timeout and the child's sleep
	b.clk.Advance(5 * time.Second)
	info := b.wait(id)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindTimeout {
		t.Fatalf("parent: %s %+v", info.Status, info.Error)
	}
	if c := b.wait(info.Children[0].ID); c.Status != run.StatusCancelled {
		t.Fatalf("child: %s", c.Status)
	}
}

func TestSubflowResumeAfterCloseReusesCompletedChildSteps(t *testing.T) {
	db := filepath.Join(t.TempDir(), "flow.db")
	ctx := context.Background()
	open := func() *engine.Engine {
		e, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
			t.Fatal(err)
		}
		return e
	}
	counts := map[string]int{}
	e := open()
	for _, text := range []string{
		"name: leaf\nsteps:\n  - {id: x, tool: work, args: {k: x}}\n  - {id: y, tool: work, args: {k: y}}\n",
		"name: mid\nsteps:\n  - {id: m1, tool: work, args: {k: m1}}\n  - {id: inner, kind: workflow, workflow: leaf}\n  - {id: m2, tool: work, args: {k: m2}}\n",
	} {
		if err := e.Register(parse(t, text)); err != nil {
			t.Fatal(err)
		}
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: parse(t, "name: top\nsteps:\n  - {id: t1, tool: work, args: {k: t1}}\n  - {id: sub, kind: workflow, workflow: mid}\n  - {id: t2, tool: work, args: {k: t2}}\n")})
	if err != nil {
		t.Fatal(err)
	}
	pull := func(e *engine.Engine) flowtype.PendingCall {
		calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: waitLimit})
		if err != nil || len(calls) != 1 {
			t.Fatalf("Pull: %v %v", calls, err)
		}
		return calls[0]
	}
	// Answer t1, m1 and x; leave y in flight (two levels down), then close the engine.
	for range 3 {
		c := pull(e)
		counts[c.Args["k"].(string)]++
		_ = e.Host().Complete(c.ID, output(map[string]any{"k": c.Args["k"]}))
	}
	if c := pull(e); c.Args["k"] != "y" {
		t.Fatalf("fourth call: %v", c.Args)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}

	e = open()
	defer e.Close(ctx)
	st, err := e.Status(ctx, id)
	if err != nil || st.Status != run.StatusInterrupted || len(st.Children) != 1 || st.Children[0].Status != run.StatusInterrupted {
		t.Fatalf("after close: %+v %v", st, err)
	}
	midID := st.Children[0].ID
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 4, Timeout: waitLimit})
			if err != nil || len(calls) == 0 {
				return
			}
			for _, c := range calls {
				counts[c.Args["k"].(string)]++
				_ = e.Host().Complete(c.ID, output(map[string]any{"k": c.Args["k"]}))
				if c.Args["k"] == "t2" {
					return
				}
			}
		}
	}()
	info, err := e.Wait(ctx, id, waitLimit)
	<-done
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("resumed: %+v %v", info, err)
	}
	for _, k := range []string{"t1", "m1", "x", "y", "m2", "t2"} {
		if counts[k] != 1 {
			t.Errorf("tool calls for %s: %d, want 1 (counts %v)", k, counts[k], counts)
		}
	}
	if len(info.Children) != 1 || info.Children[0].ID != midID {
		t.Fatalf("the interrupted child is resumed under its id, not restarted: %+v (was %s)", info.Children, midID)
	}
	mid, _ := e.Status(ctx, midID)
	if mid.Status != run.StatusCompleted || len(mid.Children) != 1 || mid.Children[0].Status != run.StatusCompleted {
		t.Fatalf("mid: %+v", mid)
	}
	if got := jsonOf(t, info.Outputs["sub"]); !strings.Contains(got, `"inner":{"x":{"k":"x"},"y":{"k":"y"}}`) {
		t.Fatalf("nested outputs: %s", got)
	}
}

func TestSubflowStaticRecursionIsRefused(t *testing.T) {
	b := setup(t)
	b.register("name: a\nsteps:\n  - {id: call_b, kind: workflow, workflow: b}\n") // b unknown yet: fine
	err := b.eng.Register(parse(t, "name: b\nsteps:\n  - {id: call_a, kind: workflow, workflow: a}\n"))
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Code != spec.CodeCycle {
		t.Fatalf("register b: %v", err)
	}
	mustContain(t, "the problem", ve.Problems[0].Message, "b → a → b", `step "call_a" calls workflow a`)
	if ve.Problems[0].Line != 3 {
		t.Fatalf("line: %+v", ve.Problems[0])
	}
	// Unregistered workflows are refused at submit, naming the step and the workflow.
	_, err = b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, "name: top\nsteps:\n  - {id: s, kind: workflow, workflow: top2}\n")})
	if codeOf(err) != run.CodeNotFound || !strings.Contains(err.Error(), `"top2", which is not registered`) {
		t.Fatalf("unknown workflow at submit: %v", err)
	}
	if _, err = b.eng.Submit(b.ctx, engine.StartRequest{Workflow: "a"}); codeOf(err) != run.CodeNotFound || !strings.Contains(err.Error(), `"b"`) {
		t.Fatalf("a names b, not registered: %v", err)
	}
	self := parse(t, "name: selfie\nsteps:\n  - {id: again, kind: workflow, workflow: selfie}\n")
	if err := b.eng.Register(self); !errors.As(err, &ve) || !strings.Contains(err.Error(), "selfie → selfie") {
		t.Fatalf("a workflow calling itself: %v", err)
	}
}

func TestSubflowMaxDepthAtRunTime(t *testing.T) {
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxDepth = 2 }))
	// d0 → d1 → d2 → d3: no recursion, but three levels under the top run.
	b.register("name: d3\nsteps:\n  - {id: leaf, tool: flow__echo}\n")
	b.register("name: d2\nsteps:\n  - {id: down, kind: workflow, workflow: d3}\n")
	b.register("name: d1\nsteps:\n  - {id: down, kind: workflow, workflow: d2}\n")
	info := b.run("name: d0\nsteps:\n  - {id: down, kind: workflow, workflow: d1}\n", nil)
	if info.Status != run.StatusFailed || info.Error.Kind != "limit_exceeded" {
		t.Fatalf("d0: %s %+v", info.Status, info.Error)
	}
	mustContain(t, "the error", info.Error.Message, "max_depth", "3 deep", "limit of 2")
	// With the default (8), the same chain runs.
	b2 := setup(t)
	b2.register("name: d3\nsteps:\n  - {id: leaf, tool: flow__echo}\n")
	b2.register("name: d2\nsteps:\n  - {id: down, kind: workflow, workflow: d3}\n")
	b2.register("name: d1\nsteps:\n  - {id: down, kind: workflow, workflow: d2}\n")
	if info := b2.run("name: d0\nsteps:\n  - {id: down, kind: workflow, workflow: d1}\n", nil); info.Status != run.StatusCompleted {
		t.Fatalf("default depth: %s %+v", info.Status, info.Error)
	}
	if _, err := engine.Open(context.Background(), engine.Config{MaxDepth: 65}); codeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "max_depth") {
		t.Fatalf("max_depth 65: %v", err)
	}
}

// TestSubflowSpecDocExampleRuns runs the example of docs/reference/spec.md, "workflow": the first block
// is registered, the second runs and reads the child's output.
func TestSubflowSpecDocExampleRuns(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "reference", "spec.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "### `workflow`")
	if start < 0 {
		t.Fatal("docs/reference/spec.md has no workflow section")
	}
	section := doc[start:]
	section = section[:strings.Index(section, "\n## ")]
	var blocks []string
	for _, part := range strings.Split(section, "```yaml\n")[1:] {
		blocks = append(blocks, part[:strings.Index(part, "```")])
	}
	if len(blocks) != 2 {
		t.Fatalf("want 2 yaml blocks in the workflow section, got %d", len(blocks))
	}
	b := setup(t)
	b.register(blocks[0])
	info := b.run(blocks[1], nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("%s %+v", info.Status, info.Error)
	}
	if got := jsonOf(t, info.Outputs["notify"]); got != `{"text":"published /publish/hero.fbx"}` {
		t.Fatalf("notify: %s", got)
	}
}

// TestSubflowHostCallsArePulledWithTheParentRun: a host thread that drives one run (a pull
// with its run id, as Python's Run.wait does) gets the host tool calls of its child runs too,
// two levels down; a pull for another run does not.
func TestSubflowHostCallsArePulledWithTheParentRun(t *testing.T) {
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	b.register("name: leaf\nsteps:\n  - {id: w, tool: work}\n")
	b.register("name: mid\nsteps:\n  - {id: down, kind: workflow, workflow: leaf}\n")
	id := b.submit("name: top\nsteps:\n  - {id: down, kind: workflow, workflow: mid}\n", nil)
	other := b.submit("name: other\nsteps:\n  - {id: z, tool: flow__echo}\n", nil)
	b.wait(other)
	none, err := b.eng.Host().Pull(b.ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, RunID: other, Max: 1, Timeout: 50 * time.Millisecond})
	if err != nil || len(none) != 0 {
		t.Fatalf("a pull for another run: %v %v", none, err)
	}
	calls, err := b.eng.Host().Pull(b.ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, RunID: id, Max: 1, Timeout: waitLimit})
	if err != nil || len(calls) != 1 || calls[0].RunID == id {
		t.Fatalf("a pull for the top run: %v %v", calls, err)
	}
	if err := b.eng.Host().Complete(calls[0].ID, output(map[string]any{"ok": true})); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCompleted {
		t.Fatalf("top: %s %+v", info.Status, info.Error)
	}
}

// TestSubflowResumeOfAFailedChild: resuming the parent resumes its failed child under the same
// id (its completed step is not called again); forcing the workflow step starts a new child.
func TestSubflowResumeOfAFailedChild(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	calls := map[string]int{}
	broken := true
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	b.serve(flowtype.LaneWorker, func(c flowtype.PendingCall) flowtype.ToolResult {
		mu.Lock()
		defer mu.Unlock()
		k := c.Args["k"].(string)
		calls[k]++
		if k == "second" && broken {
			return flowtype.ToolResult{Error: &flowtype.ToolError{Kind: run.KindFatal, Message: "corrupt cache"}}
		}
		return output(map[string]any{"k": k})
	})
	b.register("name: two\nsteps:\n  - {id: first, tool: work, args: {k: first}}\n  - {id: second, tool: work, args: {k: second}}\n")
	failed := b.run("name: p\nsteps:\n  - {id: sub, kind: workflow, workflow: two}\n", nil)
	if failed.Status != run.StatusFailed || failed.Error.Kind != run.KindFatal || len(failed.Children) != 1 {
		t.Fatalf("first run: %s %+v %+v", failed.Status, failed.Error, failed.Children)
	}
	childID := failed.Children[0].ID
	mu.Lock()
	broken = false
	mu.Unlock()
	if _, err := b.eng.Resume(b.ctx, failed.ID, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	info := b.wait(failed.ID)
	if info.Status != run.StatusCompleted || len(info.Children) != 1 || info.Children[0].ID != childID {
		t.Fatalf("resumed: %s %+v %+v", info.Status, info.Error, info.Children)
	}
	mu.Lock()
	if calls["first"] != 1 || calls["second"] != 2 {
		t.Errorf("calls %v: the child's completed step must not run again", calls)
	}
	mu.Unlock()
	if _, err := b.eng.Resume(b.ctx, failed.ID, engine.ResumeOptions{ForceSteps: []string{"sub"}}); err != nil {
		t.Fatal(err)
	}
	info = b.wait(failed.ID)
	if info.Status != run.StatusCompleted || len(info.Children) != 2 || info.Children[1].ID == childID {
		t.Fatalf("forced: a new child: %s %+v", info.Status, info.Children)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls["first"] != 2 {
		t.Errorf("calls %v: the forced step's new child runs its steps", calls)
	}
}

// TestSubflowChildCancelledOnItsOwnOrUnregistered: a child cancelled by itself fails the step
// with kind cancelled; a workflow unregistered after the submit fails the step with not_found.
func TestSubflowChildCancelledOnItsOwnOrUnregistered(t *testing.T) {
	b := setup(t)
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "slow", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	b.register("name: slow_child\nsteps:\n  - {id: s, tool: slow}\n")
	id := b.submit("name: p\nsteps:\n  - {id: sub, kind: workflow, workflow: slow_child}\n", nil)
	call := b.nextCall(flowtype.LaneMain)
	if err := b.eng.Cancel(b.ctx, call.RunID, "not this one"); err != nil {
		t.Fatal(err)
	}
	info := b.wait(id)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindCancelled {
		t.Fatalf("parent: %s %+v", info.Status, info.Error)
	}
	mustContain(t, "the error", info.Error.Message, call.RunID, "cancelled", "not this one")

	b.register("name: later\nsteps:\n  - {id: x, tool: flow__echo}\n")
	id = b.submit("name: p2\nsteps:\n  - {id: gate, kind: approve}\n  - {id: sub, kind: workflow, workflow: later}\n", nil)
	b.eng.Unregister("later")
	b.waitFor("the gate", func() bool { return len(b.status(id).Approvals) == 1 })
	if err := b.eng.Approve(b.ctx, id, "gate", true, "", ""); err != nil {
		t.Fatal(err)
	}
	info = b.wait(id)
	if info.Status != run.StatusFailed || info.Error.Kind != run.KindNotFound || !strings.Contains(info.Error.Message, `no workflow named "later"`) {
		t.Fatalf("unregistered: %s %+v", info.Status, info.Error)
	}
}
