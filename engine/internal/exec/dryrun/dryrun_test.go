package dryrun_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec/dryrun"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func parse(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStepID(t *testing.T) {
	for key, want := range map[string]string{"export": "export", "per_file[1].export": "export", "a[0].b[2].c": "c", "": ""} {
		if got := dryrun.StepID(key); got != want {
			t.Errorf("StepID(%q) = %q, want %q", key, got, want)
		}
	}
}

// The most specific fixture name wins: instance key, step id, "dcc/tool", tool; flow__echo with
// no fixture answers its args; no fixture is null; every answer is recorded.
func TestCallerFixturePrecedence(t *testing.T) {
	ctx := context.Background()
	c := dryrun.NewCaller(map[string]any{
		"per_file[1].export": "by key", "export": "by id", "maya/export_fbx": "by dcc/tool", "export_fbx": "by tool",
	})
	for _, tc := range []struct {
		call      tools.Call
		out, from string
		fixture   string
	}{
		{tools.Call{StepKey: "per_file[1].export", Tool: "export_fbx"}, `"by key"`, dryrun.FromKey, "per_file[1].export"},
		{tools.Call{StepKey: "per_file[0].export", Tool: "export_fbx"}, `"by id"`, dryrun.FromStepID, "export"},
		{tools.Call{StepKey: "other", Tool: "export_fbx", DCC: "maya"}, `"by dcc/tool"`, dryrun.FromTool, "maya/export_fbx"},
		{tools.Call{StepKey: "other2", Tool: "export_fbx", DCC: "houdini"}, `"by tool"`, dryrun.FromTool, "export_fbx"},
		{tools.Call{StepKey: "loud", Tool: tools.Echo, Args: map[string]any{"v": 1.0}}, `{"v":1}`, dryrun.FromEcho, ""},
		{tools.Call{StepKey: "quiet", Tool: "unknown_tool"}, `null`, dryrun.FromNone, ""},
	} {
		res, err := c.Call(ctx, tc.call)
		if err != nil || res.Error != nil || string(res.OutputJSON) != tc.out {
			t.Errorf("%s: %s %+v %v; want %s", tc.call.StepKey, res.OutputJSON, res.Error, err, tc.out)
		}
		got := c.Calls()[tc.call.StepKey]
		if got.From != tc.from || got.Fixture != tc.fixture || got.Tool != tc.call.Tool || got.DCC != tc.call.DCC {
			t.Errorf("%s: recorded %+v; want from %s, fixture %q", tc.call.StepKey, got, tc.from, tc.fixture)
		}
	}
	// A top-level step's key is its id: it is found as such.
	res, _ := c.Call(ctx, tools.Call{StepKey: "export", Tool: "export_fbx"})
	if string(res.OutputJSON) != `"by id"` || c.Calls()["export"].From != dryrun.FromStepID {
		t.Errorf("top-level step: %s %+v", res.OutputJSON, c.Calls()["export"])
	}
}

// A fixture that is not JSON-encodable fails the step (invalid_input) or the workflow step.
func TestCallerFixtureNotJSON(t *testing.T) {
	ctx := context.Background()
	c := dryrun.NewCaller(map[string]any{"s": func() {}})
	res, err := c.Call(ctx, tools.Call{StepKey: "s", Tool: "t"})
	if err != nil || res.Error == nil || res.Error.Kind != run.KindInvalidInput || !strings.Contains(res.Error.Message, `fixture "s" is not JSON-encodable`) {
		t.Fatalf("tool step: %+v %v", res, err)
	}
	_, err = c.Join(ctx, exec.ChildRequest{StepKey: "s", Workflow: "w"})
	var ce *exec.ChildError
	if !errors.As(err, &ce) || ce.Kind != run.KindInvalidInput {
		t.Fatalf("workflow step: %v", err)
	}
}

// A workflow step is answered by key, step id or workflow name; Result gives the answer Join
// filed, and no run starts.
func TestCallerWorkflowSteps(t *testing.T) {
	ctx := context.Background()
	c := dryrun.NewCaller(map[string]any{"publish_asset": map[string]any{"ok": true}, "each[1].pub": 7})
	for _, tc := range []struct {
		req       exec.ChildRequest
		out, from string
	}{
		{exec.ChildRequest{StepKey: "each[0].pub", Workflow: "publish_asset", Inputs: map[string]any{"x": 1}}, `{"ok":true}`, dryrun.FromWorkflow},
		{exec.ChildRequest{StepKey: "each[1].pub", Workflow: "publish_asset"}, `7`, dryrun.FromKey},
		{exec.ChildRequest{StepKey: "pub", Workflow: "nothing"}, `null`, dryrun.FromNone},
	} {
		child, err := c.Join(ctx, tc.req)
		if err != nil || child.Run != nil || child.RunID != dryrun.RunID+"/"+tc.req.StepKey {
			t.Fatalf("%s: %+v %v", tc.req.StepKey, child, err)
		}
		res, err := c.Result(ctx, child.RunID)
		if err != nil || res.Status != run.StatusCompleted || string(res.Outputs) != tc.out {
			t.Errorf("%s: %+v %v; want %s", tc.req.StepKey, res, err, tc.out)
		}
		if got := c.Calls()[tc.req.StepKey]; got.From != tc.from || len(got.Args) != len(tc.req.Inputs) {
			t.Errorf("%s: recorded %+v", tc.req.StepKey, got)
		}
	}
	if _, err := c.Result(ctx, "dry-run/never"); err == nil {
		t.Fatal("a result Join never filed")
	}
}

// Run walks the spec on its own executor: fixtures answer tools, approvals are decided by key or
// step id (granted when not named), and what was reached is returned.
func TestRunDecidesApprovalsAndRecordsCalls(t *testing.T) {
	s := parse(t, `name: ship
steps:
  - {id: build, tool: make_it}
  - {id: ok, kind: approve, prompt: "ship {{steps.build.output}}?", depends_on: [build]}
  - {id: send, tool: flow__echo, args: {what: "{{steps.build.output}}"}, depends_on: [ok]}
`)
	o, err := dryrun.Run(context.Background(), dryrun.Config{Fixtures: map[string]any{"make_it": "v1"}}, exec.Params{Spec: s, Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != run.StatusCompleted || o.Error != nil || len(o.Steps) != 3 {
		t.Fatalf("outcome: %+v", o)
	}
	if o.Prompts["ok"] != "ship v1?" || !o.Decided["ok"] {
		t.Fatalf("approval: %v %v", o.Prompts, o.Decided)
	}
	if c := o.Calls["send"]; c.From != dryrun.FromEcho || c.Args["what"] != "v1" {
		t.Fatalf("send: %+v", c)
	}
	if c := o.Calls["build"]; c.From != dryrun.FromTool || c.Fixture != "make_it" {
		t.Fatalf("build: %+v", c)
	}

	o, err = dryrun.Run(context.Background(), dryrun.Config{Approvals: map[string]bool{"ok": false}}, exec.Params{Spec: s, Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if o.Status != run.StatusFailed || o.Decided["ok"] || o.Error == nil {
		t.Fatalf("denied: %+v", o)
	}
	if _, ok := o.Calls["send"]; ok {
		t.Fatal("a step after a denied approval was called")
	}
}

// A context that ends while the run goes on stops the run, and Run returns the context's cause.
func TestRunStopsWhenTheContextEnds(t *testing.T) {
	s := parse(t, "name: wait\nsteps:\n  - {id: a, tool: flow__echo, args: {home: \"{{env.HOME}}\"}}\n")
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("the caller left")
	release := make(chan struct{})
	defer close(release)
	// The run reads the environment while rendering a's args: the caller leaves then, and the
	// run stays there until the test ends.
	environ := func() []string {
		cancel(cause)
		<-release
		return nil
	}
	_, err := dryrun.Run(ctx, dryrun.Config{Environ: environ}, exec.Params{Spec: s, Origin: "local", Env: exec.EnvPolicy{All: true}})
	if !errors.Is(err, cause) {
		t.Fatalf("Run after the context ended: %v", err)
	}
	// A context that has ended before the start: the start fails.
	if _, err := dryrun.Run(ctx, dryrun.Config{}, exec.Params{Spec: s, Origin: "local"}); err == nil {
		t.Fatal("Run on an ended context")
	}
}

// Warnings name the fixtures and approvals that match nothing of the spec, fixtures first, each
// sorted, with a "did you mean".
func TestWarnings(t *testing.T) {
	s := parse(t, `name: w
steps:
  - {id: export, tool: export_fbx}
  - {id: remote, kind: tool_remote, dcc: maya, tool: open_scene}
  - {id: pub, kind: workflow, workflow: publish_asset}
  - {id: ok, kind: approve, prompt: "go?"}
`)
	fixtures := map[string]any{"export": 1, "each[2].export": 1, "export_fbx": 1, "maya/open_scene": 1, "open_scene": 1,
		"publish_asset": 1, "pub": 1, "exprot": 1, "zzz": 1}
	got := dryrun.Warnings(s, fixtures, map[string]bool{"ok": true, "okk": false})
	want := []string{
		`fixture "exprot" names no tool step or tool of the spec, so it is not used; did you mean "export"?`,
		`fixture "zzz" names no tool step or tool of the spec, so it is not used`,
		`approval "okk" names no approve step of the spec, so it is not used; did you mean "ok"?`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := dryrun.Warnings(s, nil, nil); got != nil {
		t.Fatalf("no fixtures: %v", got)
	}
}

// Order lists what a run reached in the order it would start it: dependencies first (ties in
// document order), each foreach iteration after the one before, a control step before its
// children, the branch taken first; an instance without a row is left out.
func TestOrder(t *testing.T) {
	s := parse(t, `name: o
steps:
  - {id: late, tool: flow__echo, depends_on: [early]}
  - {id: early, tool: flow__echo, args: {files: [a, b], urgent: false}, depends_on: []}
  - id: each
    kind: foreach
    items: "$.early.files"
    steps:
      - {id: per, tool: flow__echo}
  - id: both
    kind: parallel
    steps:
      - {id: p2, tool: flow__echo, depends_on: [p1]}
      - {id: p1, tool: flow__echo}
      - {id: p3, tool: flow__echo}
  - id: pick
    kind: branch
    on: "$.early.urgent"
    then:
      - {id: yes, tool: flow__echo}
    else:
      - {id: no, tool: flow__echo}
`)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	o, err := dryrun.Run(context.Background(), dryrun.Config{}, exec.Params{Spec: s, Origin: "local"})
	if err != nil || o.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", o, err)
	}
	var got []string
	for _, in := range dryrun.Order(s, o.Steps) {
		entry := in.Key + "@" + strconv.Itoa(in.Depth)
		switch {
		case in.Items > 0:
			entry += "*" + strconv.Itoa(in.Items)
		case in.Taken != "":
			entry += ":" + in.Taken
		}
		got = append(got, entry)
	}
	want := "early@0 late@0 each@0*2 each[0].per@1 each[1].per@1 both@0 p1@1 p2@1 p3@1 pick@0:else no@1 yes@1"
	if strings.Join(got, " ") != want {
		t.Fatalf("order:\n %s\nwant:\n %s", strings.Join(got, " "), want)
	}
	// Without the rows of the foreach's iterations, it lists itself only; without its own row
	// nothing under it.
	var rows []store.Step
	for _, r := range o.Steps {
		if !strings.HasPrefix(r.Key, "each[") && r.Key != "late" {
			rows = append(rows, r)
		}
	}
	got = got[:0]
	for _, in := range dryrun.Order(s, rows) {
		got = append(got, in.Key)
	}
	if want := "early each both p1 p2 p3 pick no yes"; strings.Join(got, " ") != want {
		t.Fatalf("order of fewer rows: %s; want %s", strings.Join(got, " "), want)
	}
}
