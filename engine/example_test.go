package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// An engine in memory runs a two-step workflow: a host tool the embedding process answers
// (here this function; in a DCC, Python through the C ABI), then a built-in tool that uses its
// output.
func Example() {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{}) // the zero Config: in memory, defaults
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)

	// A host tool: its calls queue on the main lane until the host pulls them.
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "maya__export", Lane: flowtype.LaneMain}); err != nil {
		fmt.Println(err)
		return
	}
	s, err := spec.ParseString(`
name: export_shot
inputs:
  shot: {type: string}
steps:
  - {id: export, tool: maya__export, args: {shot: "{{inputs.shot}}"}}
  - {id: report, tool: flow__echo, args: {value: "exported {{export.path}}"}}
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s, Inputs: map[string]any{"shot": "sh010"}})
	if err != nil {
		fmt.Println(err)
		return
	}

	// The host: pull the call (waiting up to 10 s for it), run the tool, answer.
	calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 {
		fmt.Println(calls, err)
		return
	}
	c := calls[0]
	fmt.Printf("host runs %s for step %s with %v\n", c.Tool, c.StepKey, c.Args)
	path := fmt.Sprintf("/shots/%s.fbx", c.Args["shot"])
	if err := e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"path": path}}); err != nil {
		fmt.Println(err)
		return
	}

	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Status, info.Outputs["report"])
	// Output:
	// host runs maya__export for step export with map[shot:sh010]
	// completed map[value:exported /shots/sh010.fbx]
}

// A failed run is resumed under the same id: completed steps are not called again, their
// outputs feed the steps that run.
func ExampleEngine_Resume() {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "render", Lane: flowtype.LaneMain}); err != nil {
		fmt.Println(err)
		return
	}
	s, err := spec.ParseString(`
name: turntable
steps:
  - {id: layout, tool: render, args: {pass: layout}}
  - {id: beauty, tool: render, args: {pass: beauty, after: "{{layout.frames}}"}}
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	// answer pulls one call and answers it with the tool's output, or with a failure.
	answer := func(fail bool) {
		calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Timeout: 10 * time.Second})
		if err != nil || len(calls) != 1 {
			fmt.Println(calls, err)
			return
		}
		c := calls[0]
		res := flowtype.ToolResult{Output: map[string]any{"frames": 24}}
		if fail {
			res = flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "fatal", Message: "out of licences"}}
		}
		fmt.Printf("call %s (pass %v, fail %v)\n", c.StepKey, c.Args["pass"], fail)
		if err := e.Host().Complete(c.ID, res); err != nil {
			fmt.Println(err)
		}
	}

	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		fmt.Println(err)
		return
	}
	answer(false)
	answer(true)
	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Status, info.Error.Message)

	if _, err := e.Resume(ctx, id, engine.ResumeOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	answer(false) // only beauty is called again
	info, err = e.Wait(ctx, id, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Status, info.Outputs["beauty"])
	// Output:
	// call layout (pass layout, fail false)
	// call beauty (pass beauty, fail true)
	// failed out of licences
	// call beauty (pass beauty, fail false)
	// completed map[frames:24]
}

// Cancelling a run withdraws the host calls it waits for: the host sees it with Cancelled (long
// tools poll it) and a late answer is dropped.
func ExampleEngine_Cancel() {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close(ctx)
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "simulate", Lane: flowtype.LaneWorker}); err != nil {
		fmt.Println(err)
		return
	}
	s, err := spec.ParseString(`
name: sim
steps:
  - {id: cloth, tool: simulate, args: {frames: 240}}
`)
	if err != nil {
		fmt.Println(err)
		return
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		fmt.Println(err)
		return
	}
	calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 {
		fmt.Println(calls, err)
		return
	}
	c := calls[0]
	fmt.Println("cancelled before:", e.Host().Cancelled(c.ID))

	if err := e.Cancel(ctx, id, "wrong frame range"); err != nil {
		fmt.Println(err)
		return
	}
	info, err := e.Wait(ctx, id, 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Status)
	fmt.Println("cancelled after:", e.Host().Cancelled(c.ID))
	err = e.Host().Complete(c.ID, flowtype.ToolResult{Output: "done"})
	fmt.Println("late answer:", run.CodeOf(err))
	// Output:
	// cancelled before: false
	// cancelled
	// cancelled after: true
	// late answer: invalid_state
}
