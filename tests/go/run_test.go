package gotest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func TestSequentialToolStepsAndTemplates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	info := b.run(`
name: seq
inputs:
  date: { type: string, format: date, required: true }
  scope: { type: string, default: all }
steps:
  - id: list
    tool: flow__echo
    args: { files: [{ path: "/in/a.ma" }, { path: "/in/b.ma" }], date: "{{inputs.date}}" }
  - id: first
    tool: flow__echo
    args:
      whole: "{{list.files}}"
      path: "{{steps.list.output.files[1].path}}"
      text: "{{date}}/{{scope}} has {{list.files[0].path}}"
      status: "{{steps.list.status}}"
      attempts: "{{steps.list.attempts}}"
      missing: "{{list.nope.deeper}}"
      run: "{{run.name}}"
`, map[string]any{"date": "2026-03-08"})
	if info.Status != run.StatusCompleted || info.Error != nil {
		t.Fatalf("status %s error %+v", info.Status, info.Error)
	}
	got := info.Outputs["first"].(map[string]any)
	want := map[string]any{
		"whole":    []any{map[string]any{"path": "/in/a.ma"}, map[string]any{"path": "/in/b.ma"}},
		"path":     "/in/b.ma",
		"text":     "2026-03-08/all has /in/a.ma",
		"status":   "completed",
		"attempts": 1.0,
		"missing":  nil,
		"run":      "seq",
	}
	if jsonOf(t, got) != jsonOf(t, want) {
		t.Fatalf("output\n got %s\nwant %s", jsonOf(t, got), jsonOf(t, want))
	}
	if info.Progress != (run.Progress{Completed: 2, Total: 2}) {
		t.Fatalf("progress %+v", info.Progress)
	}
	if info.Inputs["scope"] != "all" || info.Inputs["date"] != "2026-03-08" {
		t.Fatalf("inputs with defaults: %+v", info.Inputs)
	}
	if len(info.Steps) != 2 || info.Steps[0].Key != "list" || info.Steps[0].Attempts != 1 || info.Steps[1].Status != run.StepCompleted {
		t.Fatalf("steps %+v", info.Steps)
	}
	types := b.eventTypes(info.ID)
	want2 := []string{
		"workflow_started::running",
		"step_enter:list:running", "step_exit:list:completed",
		"step_enter:first:running", "step_exit:first:completed",
		"workflow_terminal::completed",
	}
	if jsonOf(t, types) != jsonOf(t, want2) {
		t.Fatalf("events\n got %v\nwant %v", types, want2)
	}
}

func TestRunDocumentTriggerAndEnv(t *testing.T) {
	t.Parallel()
	environ := func() []string { return []string{"DCC_ROOT=/studio", "SECRET_TOKEN=hunter2", "DCC_SHOT=sh010"} }
	b := setup(t, withConfig(func(c *engine.Config) { c.EnvAllow = []string{"DCC_*"} }), withOptions(engine.WithEnviron(environ)))
	text := `
name: envy
steps:
  - id: e
    tool: flow__echo
    args: { root: "{{env.DCC_ROOT}}", secret: "{{env.SECRET_TOKEN}}", x: "{{trigger.payload.x}}", sched: "{{trigger.schedule_id}}", id: "{{run.id}}" }
`
	cases := []struct {
		origin     string
		wantSecret any
	}{
		{engine.OriginLocal, "hunter2"},
		{engine.OriginMCP, nil},
		{engine.OriginWebhook, nil},
		{engine.OriginSchedule, nil},
	}
	for _, c := range cases {
		info, err := b.eng.Run(b.ctx, engine.StartRequest{Spec: parse(t, text), Origin: c.origin,
			Trigger: map[string]any{"payload": map[string]any{"x": 7.0}, "schedule_id": "nightly"}})
		if err != nil {
			t.Fatal(err)
		}
		out := info.Outputs["e"].(map[string]any)
		if out["root"] != "/studio" || out["secret"] != c.wantSecret || out["x"] != 7.0 || out["sched"] != "nightly" || out["id"] != info.ID {
			t.Errorf("origin %s: output %+v", c.origin, out)
		}
		if info.Origin != c.origin || info.Trigger["schedule_id"] != "nightly" {
			t.Errorf("origin %s: info %+v", c.origin, info)
		}
	}
	if _, err := b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, text), Origin: "email"}); codeOf(err) != run.CodeInvalidRequest {
		t.Fatalf("bad origin: %v", err)
	}
}

func TestInputsAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	text := `
name: inputs
inputs:
  date: { type: string, format: date, required: true }
  count: { type: integer, default: 3 }
  mode: { type: string, enum: [fast, full] }
steps:
  - id: e
    tool: flow__echo
    args: { date: "{{inputs.date}}", count: "{{count}}", mode: "{{mode}}" }
`
	cases := []struct {
		name   string
		inputs map[string]any
		names  []string // inputs the error must name
		wants  []string
	}{
		{"missing required", map[string]any{}, []string{"date"}, []string{`input "date" is required`}},
		{"wrong type", map[string]any{"date": "2026-03-08", "count": "three"}, []string{"count"}, []string{`input "count" must be of type integer`}},
		{"not an integer", map[string]any{"date": "2026-03-08", "count": 2.5}, []string{"count"}, []string{`"count"`}},
		{"bad format", map[string]any{"date": "March 8"}, []string{"date"}, []string{`input "date" must be a date`}},
		{"not in enum", map[string]any{"date": "2026-03-08", "mode": "slow"}, []string{"mode"}, []string{`must be one of`}},
		{"undeclared", map[string]any{"date": "2026-03-08", "dat": 1}, []string{"dat"}, []string{`input "dat" is not declared`}},
		{"several at once", map[string]any{"count": true, "mode": 1}, []string{"date", "count", "mode"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := b.sub(t)
			_, err := b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, text), Inputs: c.inputs})
			re := asRunError(err)
			if re == nil || re.Code != run.CodeInvalidInput {
				t.Fatalf("err %v", err)
			}
			mustContain(t, "message", re.Message, c.wants...)
			problems := re.Details["problems"]
			for _, n := range c.names {
				mustContain(t, "problems", jsonOf(t, problems), `"input":"`+n+`"`)
			}
		})
	}
	info, err := b.eng.Run(b.ctx, engine.StartRequest{Spec: parse(t, text), Inputs: map[string]any{"date": "2026-03-08", "count": 5, "mode": nil}})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("good inputs: %v %+v", err, info)
	}
	out := info.Outputs["e"].(map[string]any)
	if out["count"] != 5.0 || out["mode"] != nil {
		t.Fatalf("Go ints become JSON numbers; absent optional input is null: %+v", out)
	}
	runs, _ := b.eng.Runs(b.ctx, engine.RunFilter{})
	if len(runs) != 1 {
		t.Fatalf("a rejected start must not record a run: %d runs", len(runs))
	}
}

func TestUnknownToolsFailBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, `
name: unknown
steps:
  - id: a
    tool: flow__echo
  - id: b
    tool: maya__export_fbx
  - id: c
    kind: branch
    on: false
    then:
      - { id: d, tool: houdini__cook }
      - { id: e, tool: maya__export_fbx }
  - id: r
    kind: tool_remote
    dcc: unreal
    tool: import_assets
`)})
	re := asRunError(err)
	if re == nil || re.Code != run.CodeUnknownTool {
		t.Fatalf("err %v", err)
	}
	if got := jsonOf(t, re.Details["tools"]); got != `["houdini__cook","maya__export_fbx","unreal/import_assets"]` {
		t.Fatalf("tools %s", got)
	}
	mustContain(t, "message", re.Message, "houdini__cook, maya__export_fbx", "unreal/import_assets")
	if runs, _ := b.eng.Runs(b.ctx, engine.RunFilter{}); len(runs) != 0 {
		t.Fatalf("no run may be recorded: %+v", runs)
	}
}

// A mistyped tool, remote or workflow name is answered with the closest registered one.
func TestUnknownNamesSuggestTheClosest(t *testing.T) {
	t.Parallel()
	rd := &remoteDouble{block: make(chan struct{})}
	t.Cleanup(func() { close(rd.block) })
	b := setup(t,
		withConfig(func(c *engine.Config) {
			c.Remotes = map[string]engine.RemoteConfig{"unreal": {URL: "http://127.0.0.1:9/mcp"}}
		}),
		withOptions(engine.WithRemoteCaller(rd)))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__export_fbx"}); err != nil {
		t.Fatal(err)
	}
	_, err := b.eng.Submit(b.ctx, engine.StartRequest{Spec: parse(t, `
name: typos
steps:
  - { id: a, tool: maya__exprot_fbx }
  - { id: b, tool: zzz_nothing_like_it }
  - { id: r, kind: tool_remote, dcc: unrael, tool: import_assets }
`)})
	re := asRunError(err)
	if re == nil || re.Code != run.CodeUnknownTool {
		t.Fatalf("err %v", err)
	}
	mustContain(t, "message", re.Message,
		`maya__exprot_fbx (did you mean "maya__export_fbx"?)`,
		`unrael/import_assets (did you mean "unreal/import_assets"?)`)
	if strings.Contains(re.Message, `zzz_nothing_like_it (`) {
		t.Fatalf("no suggestion for a name close to nothing: %s", re.Message)
	}
	if got := jsonOf(t, re.Details["suggestions"]); got != `{"maya__exprot_fbx":"maya__export_fbx","unrael/import_assets":"unreal/import_assets"}` {
		t.Fatalf("suggestions %s", got)
	}

	if err := b.eng.Register(parse(t, "name: nightly_intake\nsteps: [{ id: a, tool: flow__echo }]")); err != nil {
		t.Fatal(err)
	}
	_, err = b.eng.Submit(b.ctx, engine.StartRequest{Workflow: "nightly_intkae"})
	if run.CodeOf(err) != run.CodeNotFound || !strings.Contains(err.Error(), `did you mean "nightly_intake"?`) {
		t.Fatalf("typo of a workflow name: %v", err)
	}
	_, err = b.eng.Submit(b.ctx, engine.StartRequest{Workflow: "render"})
	if run.CodeOf(err) != run.CodeNotFound || strings.Contains(err.Error(), "did you mean") {
		t.Fatalf("no suggestion for an unrelated name: %v", err)
	}
}

func TestInvalidSpecIsRejected(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := spec.ParseString(`
name: cyclic
steps:
  - { id: a, tool: flow__echo, depends_on: [c] }
  - { id: b, tool: flow__echo, depends_on: [a] }
  - { id: c, tool: flow__echo, depends_on: [b] }
`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.eng.Submit(b.ctx, engine.StartRequest{Spec: s})
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || ve.Problems[0].Code != spec.CodeCycle {
		t.Fatalf("err %v", err)
	}
	mustContain(t, "cycle message", ve.Error(), "a → b → c → a")
	if err := b.eng.Register(s); !errors.As(err, &ve) {
		t.Fatalf("Register of an invalid spec: %v", err)
	}
	if _, err := b.eng.Submit(b.ctx, engine.StartRequest{}); codeOf(err) != run.CodeInvalidRequest {
		t.Fatalf("empty request: %v", err)
	}
}

func TestCatalog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, text := range []string{
		"name: vendor_intake\ndescription: Import vendor Maya files\ninputs: { date: { type: string, required: true } }\nsteps: [{ id: a, tool: flow__echo, args: { d: '{{inputs.date}}' } }]",
		"name: nightly_export\ndescription: Export FBX for the vendor\nsteps: [{ id: a, tool: flow__echo }]",
		"name: intake_qc\nsteps: [{ id: a, tool: flow__echo }]",
	} {
		if err := b.eng.Register(parse(t, text)); err != nil {
			t.Fatal(err)
		}
	}
	names := func(q string) string {
		out := ""
		for _, e := range b.eng.Lookup(q) {
			out += e.Name + " "
		}
		return out
	}
	cases := map[string]string{
		"":               "intake_qc nightly_export vendor_intake ",
		"intake":         "intake_qc vendor_intake ",
		"VENDOR":         "vendor_intake nightly_export ",
		"vendor fbx":     "nightly_export ",
		"nightly_export": "nightly_export ",
		"unreal":         "",
	}
	for q, want := range cases {
		if got := names(q); got != want {
			t.Errorf("Lookup(%q) = %q, want %q", q, got, want)
		}
	}
	entry := b.eng.Lookup("vendor_intake")[0]
	if entry.Steps != 1 || len(entry.SpecHash) != 64 || len(entry.Inputs) != 1 || !entry.Inputs[0].Required {
		t.Fatalf("entry %+v", entry)
	}
	info, err := b.eng.Run(b.ctx, engine.StartRequest{Workflow: "vendor_intake", Inputs: map[string]any{"date": "d"}})
	if err != nil || info.Status != run.StatusCompleted || info.Name != "vendor_intake" {
		t.Fatalf("run by name: %v %+v", err, info)
	}
	_, err = b.eng.Submit(b.ctx, engine.StartRequest{Workflow: "vendor_intak"})
	if codeOf(err) != run.CodeNotFound {
		t.Fatalf("unknown workflow: %v", err)
	}
	mustContain(t, "message", err.Error(), `did you mean "vendor_intake"`)
	if err := b.eng.Register(parse(t, "steps: [{ id: a, tool: flow__echo }]")); codeOf(err) != run.CodeInvalidRequest {
		t.Fatalf("unnamed workflow: %v", err)
	}
	if _, ok := b.eng.Workflow("intake_qc"); !ok || !b.eng.Unregister("intake_qc") || b.eng.Unregister("intake_qc") {
		t.Fatal("Workflow/Unregister")
	}
}

func TestStatusRunsAndErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := b.run("name: good\nsteps: [{ id: a, tool: flow__echo }]", nil)
	bad := b.run("name: bad\nsteps: [{ id: a, tool: flow__fail, args: { kind: fatal, message: boom, trace: 'Traceback: x' } }, { id: z, tool: flow__echo }]", nil)
	if bad.Status != run.StatusFailed || bad.Error == nil || bad.Error.Kind != "fatal" || bad.Error.StepKey != "a" ||
		bad.Error.Message != "boom" || bad.Error.Trace != "Traceback: x" {
		t.Fatalf("failed run: %+v %+v", bad, bad.Error)
	}
	st := b.steps(bad.ID)
	if st["a"].Status != run.StepFailed || st["a"].Error.Kind != "fatal" || st["a"].Error.Trace != "Traceback: x" {
		t.Fatalf("failed step %+v", st["a"])
	}
	if st["z"].Status != run.StepSkipped {
		t.Fatalf("the step after a failure is skipped: %+v", st["z"])
	}
	if bad.Progress != (run.Progress{Completed: 2, Total: 2}) {
		t.Fatalf("progress %+v", bad.Progress)
	}
	all, err := b.eng.Runs(b.ctx, engine.RunFilter{})
	if err != nil || len(all) != 2 {
		t.Fatalf("runs %v %v", all, err)
	}
	failed, _ := b.eng.Runs(b.ctx, engine.RunFilter{Statuses: []run.Status{run.StatusFailed}})
	if len(failed) != 1 || failed[0].ID != bad.ID {
		t.Fatalf("failed runs %+v", failed)
	}
	named, _ := b.eng.Runs(b.ctx, engine.RunFilter{Name: "good", Limit: 5})
	if len(named) != 1 || named[0].ID != ok.ID || named[0].Steps != nil {
		t.Fatalf("runs named good %+v", named)
	}
	if _, err := b.eng.Status(b.ctx, "r-nope"); codeOf(err) != run.CodeNotFound {
		t.Fatalf("Status of unknown: %v", err)
	}
	if _, err := b.eng.Wait(b.ctx, "r-nope", time.Second); codeOf(err) != run.CodeNotFound {
		t.Fatalf("Wait of unknown: %v", err)
	}
	if err := b.eng.Cancel(b.ctx, "r-nope", ""); codeOf(err) != run.CodeNotFound {
		t.Fatalf("Cancel of unknown: %v", err)
	}
	if err := b.eng.Cancel(b.ctx, ok.ID, "late"); err != nil {
		t.Fatalf("cancelling a finished run is not an error: %v", err)
	}
	if again := b.status(ok.ID); again.Status != run.StatusCompleted {
		t.Fatalf("a finished run stays finished: %s", again.Status)
	}
}
