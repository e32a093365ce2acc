package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

const dryIntake = `
name: vendor_intake
inputs:
  date: {type: string, required: true}
steps:
  - id: list
    tool: vendor__list_sftp
    args: {date: "{{inputs.date}}"}
  - id: per_file
    kind: foreach
    items: "$.list.files"
    as: file
    concurrency: 4
    steps:
      - id: export
        tool: maya__export_fbx
        args: {scene: "{{file.path}}", run: "{{run.id}}"}
        idempotency_key: "export_{{file.path}}"
      - id: qc
        tool: flow__echo
        args: {fbx: "{{export.fbx}}"}
  - id: check
    kind: branch
    on: "$.list.urgent"
    then:
      - {id: page, tool: notify__page, args: {count: "{{per_file}}"}}
    else:
      - {id: mail, tool: notify__mail, args: {}}
  - id: human_gate
    kind: approve
    prompt: "Push the {{inputs.date}} drop?"
  - id: push
    tool: flow__fail
    args: {message: "would fail if called"}
`

func dryOpen(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	e, err := engine.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func drySpec(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func dryLine(ds engine.DryStep) string {
	args, _ := json.Marshal(ds.Args)
	out, _ := json.Marshal(ds.Output)
	return strings.Join([]string{ds.Key, string(ds.Status), ds.OutputFrom, ds.Fixture, string(args), string(out)}, " ")
}

// TestDryRunOrderArgsFixtures: the steps in the order a run takes them, each tool step with its
// rendered args and the fixture its output came from (instance key over step id over tool name),
// foreach iterating the fixture's items, a branch following the fixture's condition, the
// approval granted, flow__echo evaluated and flow__fail not called.
func TestDryRunOrderArgsFixtures(t *testing.T) {
	t.Parallel()
	e := dryOpen(t, engine.Config{})
	res, err := e.DryRun(context.Background(), engine.DryRunRequest{
		StartRequest: engine.StartRequest{Spec: drySpec(t, dryIntake), Inputs: map[string]any{"date": "2026-11-24"}},
		Fixtures: map[string]any{
			"list":                map[string]any{"files": []any{map[string]any{"path": "a.ma"}, map[string]any{"path": "b.ma"}}, "urgent": true},
			"maya__export_fbx":    map[string]any{"fbx": "by_tool.fbx"},
			"per_file[1].export":  map[string]any{"fbx": "by_key.fbx"},
			"notify__page":        "paged",
			"no_such_step_or_too": 1,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusCompleted || res.Error != nil {
		t.Fatalf("status %s, error %+v", res.Status, res.Error)
	}
	var got []string
	for _, ds := range res.Steps {
		got = append(got, dryLine(ds))
	}
	want := []string{
		`list completed step_id list {"date":"2026-11-24"} {"files":[{"path":"a.ma"},{"path":"b.ma"}],"urgent":true}`,
		`per_file completed   null [{"export":{"fbx":"by_tool.fbx"},"qc":{"fbx":"by_tool.fbx"}},{"export":{"fbx":"by_key.fbx"},"qc":{"fbx":"by_key.fbx"}}]`,
		`per_file[0].export completed tool maya__export_fbx {"run":"dry-run","scene":"a.ma"} {"fbx":"by_tool.fbx"}`,
		`per_file[0].qc completed echo  {"fbx":"by_tool.fbx"} {"fbx":"by_tool.fbx"}`,
		`per_file[1].export completed key per_file[1].export {"run":"dry-run","scene":"b.ma"} {"fbx":"by_key.fbx"}`,
		`per_file[1].qc completed echo  {"fbx":"by_key.fbx"} {"fbx":"by_key.fbx"}`,
		`check completed   null {"condition":true,"taken":"then"}`,
		`page completed tool notify__page {"count":[{"export":{"fbx":"by_tool.fbx"},"qc":{"fbx":"by_tool.fbx"}},{"export":{"fbx":"by_key.fbx"},"qc":{"fbx":"by_key.fbx"}}]} "paged"`,
		`mail skipped   null null`,
		`human_gate completed   null {"approved":true,"by":"dry-run","reason":"dry run: approved automatically"}`,
		`push completed none  {"message":"would fail if called"} null`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var orders []int
	for _, ds := range res.Steps {
		orders = append(orders, ds.Order)
	}
	if want := []int{1, 0, 2, 3, 4, 5, 0, 6, 0, 7, 8}; !reflect.DeepEqual(orders, want) {
		t.Errorf("orders %v, want %v", orders, want)
	}
	foreach, gate := res.Steps[1], res.Steps[9]
	if foreach.Items == nil || *foreach.Items != 2 || foreach.Depth != 0 || res.Steps[2].Depth != 1 {
		t.Errorf("foreach items %v, depths %d/%d", foreach.Items, foreach.Depth, res.Steps[2].Depth)
	}
	if res.Steps[6].Taken != "then" {
		t.Errorf("branch taken %q", res.Steps[6].Taken)
	}
	if gate.Prompt != "Push the 2026-11-24 drop?" || gate.Approved == nil || !*gate.Approved {
		t.Errorf("approval: prompt %q approved %v", gate.Prompt, gate.Approved)
	}
	wantUnknown := []string{"maya__export_fbx", "notify__mail", "notify__page", "vendor__list_sftp"}
	if !reflect.DeepEqual(res.UnknownTools, wantUnknown) {
		t.Errorf("unknown tools %v, want %v", res.UnknownTools, wantUnknown)
	}
	for _, ds := range res.Steps {
		if (ds.Tool != "" && !strings.HasPrefix(ds.Tool, "flow__")) != ds.UnknownTool {
			t.Errorf("%s: unknown_tool %v", ds.Key, ds.UnknownTool)
		}
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `fixture "no_such_step_or_too" names no tool step or tool`) {
		t.Errorf("warnings %q", res.Warnings)
	}
	if _, ok := res.Outputs["push"]; !ok || res.Outputs["human_gate"] == nil || len(res.Outputs) != 6 {
		t.Errorf("outputs %v", res.Outputs)
	}
}

// TestDryRunElseAndDenial: without fixtures the foreach has nothing to iterate and the branch
// takes else; a denied approval fails the dry run as it would fail the run, and skips the rest.
func TestDryRunElseAndDenial(t *testing.T) {
	t.Parallel()
	e := dryOpen(t, engine.Config{})
	res, err := e.DryRun(context.Background(), engine.DryRunRequest{
		StartRequest: engine.StartRequest{Spec: drySpec(t, strings.Replace(dryIntake, `items: "$.list.files"`, `items: "{{list}}"`, 1)),
			Inputs: map[string]any{"date": "d"}},
		Fixtures:  map[string]any{"list": []any{}},
		Approvals: map[string]bool{"human_gate": false, "human_gaet": true},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != run.StatusFailed || res.Error == nil || res.Error.Kind != "denied" || res.Error.StepKey != "human_gate" {
		t.Fatalf("status %s, error %+v", res.Status, res.Error)
	}
	var got []string
	for _, ds := range res.Steps {
		got = append(got, ds.Key+" "+string(ds.Status))
	}
	want := []string{"list completed", "per_file completed", "check completed", "mail completed", "page skipped",
		"human_gate failed", "push skipped"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps %v, want %v", got, want)
	}
	if n := res.Steps[1].Items; n == nil || *n != 0 {
		t.Errorf("items %v", n)
	}
	if g := res.Steps[5]; g.Approved == nil || *g.Approved || g.Order != 3 {
		t.Errorf("gate %+v", g)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `approval "human_gaet" names no approve step`) ||
		!strings.Contains(res.Warnings[0], `did you mean "human_gate"?`) {
		t.Errorf("warnings %q", res.Warnings)
	}
}

// TestDryRunPersistsNothing: on a file database with a registered host tool, a dry run writes no
// run, no event and no idempotency entry, queues no call for the host, and does not read the
// idempotency cache a real run filled.
func TestDryRunPersistsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := dryOpen(t, engine.Config{DB: filepath.Join(t.TempDir(), "flow.db")})
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "maya__export_fbx", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	cached := drySpec(t, `
name: cached
steps:
  - {id: export, tool: flow__echo, args: {fbx: real.fbx}, idempotency_key: "k", idempotency_scope: global}
`)
	info, err := e.Run(ctx, engine.StartRequest{Spec: cached})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("real run: %v %+v", err, info)
	}
	seq, err := e.LastSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.DryRun(ctx, engine.DryRunRequest{StartRequest: engine.StartRequest{Spec: cached},
		Fixtures: map[string]any{"export": map[string]any{"fbx": "fixture.fbx"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := json.Marshal(res.Outputs["export"]); string(out) != `{"fbx":"fixture.fbx"}` {
		t.Errorf("the dry run read the idempotency cache: output %s", out)
	}
	res, err = e.DryRun(ctx, engine.DryRunRequest{StartRequest: engine.StartRequest{Spec: drySpec(t, dryIntake), Inputs: map[string]any{"date": "d"}},
		Fixtures: map[string]any{"list": map[string]any{"files": []any{map[string]any{"path": "a.ma"}}}}})
	if err != nil || res.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, res)
	}
	if len(res.UnknownTools) != 3 || res.Steps[2].UnknownTool {
		t.Errorf("a registered tool is not unknown: %v", res.UnknownTools)
	}
	runs, err := e.Runs(ctx, engine.RunFilter{})
	if err != nil || len(runs) != 1 || runs[0].ID != info.ID {
		t.Errorf("runs after the dry runs: %v %v", runs, err)
	}
	if after, _ := e.LastSeq(ctx); after != seq {
		t.Errorf("events written: seq %d → %d", seq, after)
	}
	if _, err := e.Status(ctx, engine.DryRunID); run.CodeOf(err) != run.CodeNotFound {
		t.Errorf("status of the dry run id: %v", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	calls, err := e.Host().Pull(pctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Timeout: 20 * time.Millisecond})
	if len(calls) != 0 {
		t.Errorf("the dry run queued host calls: %v (%v)", calls, err)
	}
}

// TestDryRunRefusals: a dry run refuses what a run refuses before it starts (a bad input, an
// unknown workflow) and works on an engine with no tools.
func TestDryRunRefusals(t *testing.T) {
	t.Parallel()
	e := dryOpen(t, engine.Config{})
	_, err := e.DryRun(context.Background(), engine.DryRunRequest{StartRequest: engine.StartRequest{Spec: drySpec(t, dryIntake)}})
	if run.CodeOf(err) != run.CodeInvalidInput || !strings.Contains(err.Error(), "date") {
		t.Errorf("missing input: %v", err)
	}
	_, err = e.DryRun(context.Background(), engine.DryRunRequest{StartRequest: engine.StartRequest{Workflow: "nope"}})
	if run.CodeOf(err) != run.CodeNotFound {
		t.Errorf("unknown workflow: %v", err)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, err = e.DryRun(context.Background(), engine.DryRunRequest{StartRequest: engine.StartRequest{Spec: drySpec(t, dryIntake)}})
	if run.CodeOf(err) != run.CodeClosed {
		t.Errorf("closed engine: %v", err)
	}
}

// TestDryRunDocExample: the order and args docs/reference/spec.md "Dry runs" states for its example.
func TestDryRunDocExample(t *testing.T) {
	t.Parallel()
	e := dryOpen(t, engine.Config{})
	res, err := e.DryRun(context.Background(), engine.DryRunRequest{
		StartRequest: engine.StartRequest{Spec: drySpec(t, `
name: dry_example
steps:
  - id: list
    tool: vendor__list_sftp
  - id: per_file
    kind: foreach
    items: "$.list.files"
    as: file
    concurrency: 4
    steps:
      - id: export
        tool: maya__export_fbx
        args: { scene: "{{file.path}}" }
  - id: notify
    tool: flow__echo
    args: { exported: "{{per_file}}" }
`)},
		Fixtures: map[string]any{"list": map[string]any{"files": []any{map[string]any{"path": "a.ma"}, map[string]any{"path": "b.ma"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ds := range res.Steps {
		args, _ := json.Marshal(ds.Args)
		got = append(got, ds.Key+" "+string(args))
	}
	want := []string{"list {}", "per_file null", `per_file[0].export {"scene":"a.ma"}`, `per_file[1].export {"scene":"b.ma"}`,
		`notify {"exported":[{"export":null},{"export":null}]}`}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps %q, want %q", got, want)
	}
}

// TestDryRunEnvFollowsOrigin: a dry run's rendered args see the environment a run of the same
// origin would: all of it locally, only env_allow over MCP (an agent must not read secrets
// through a dry run).
func TestDryRunEnvFollowsOrigin(t *testing.T) {
	t.Parallel()
	e, err := engine.Open(context.Background(), engine.Config{EnvAllow: []string{"STUDIO_*"}},
		engine.WithEnviron(func() []string { return []string{"DRY_SECRET=s3cret", "STUDIO_ROOT=/studio"} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	s := drySpec(t, `steps: [{id: a, tool: x__y, args: {secret: "{{env.DRY_SECRET}}", root: "{{env.STUDIO_ROOT}}"}}]`)
	for origin, want := range map[string]string{engine.OriginLocal: "s3cret /studio", engine.OriginMCP: "<nil> /studio"} {
		res, err := e.DryRun(context.Background(), engine.DryRunRequest{StartRequest: engine.StartRequest{Spec: s, Origin: origin}})
		if err != nil {
			t.Fatal(err)
		}
		args := res.Steps[0].Args
		if got := fmt.Sprint(args["secret"]) + " " + fmt.Sprint(args["root"]); got != want {
			t.Errorf("origin %s: args %v, want %q", origin, args, want)
		}
	}
}

// TestDryRunWorkflowStep: a workflow step (sub-workflow) starts no child run in a dry run: it is
// a leaf of the plan, answered from the fixtures as a tool step is (instance key, step id, then
// the workflow's name; null when none), with the child's rendered inputs as its args. A
// workflow that is not registered is a warning (a real run would be refused).
func TestDryRunWorkflowStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := dryOpen(t, engine.Config{DB: filepath.Join(t.TempDir(), "flow.db")})
	child := drySpec(t, "name: publish_asset\ninputs:\n  asset: {type: string}\nsteps:\n  - {id: export, tool: flow__fail, args: {message: never called}}\n")
	if err := e.Register(child); err != nil {
		t.Fatal(err)
	}
	parent := drySpec(t, `
name: nightly
steps:
  - {id: hero, kind: workflow, workflow: publish_asset, inputs: {asset: "hero_{{run.id}}"}}
  - {id: prop, kind: workflow, workflow: publish_asset, inputs: {asset: prop}}
  - {id: each, kind: foreach, items: [a], steps: [{id: inner, kind: workflow, workflow: publish_asset, inputs: {asset: "{{item}}"}}]}
  - {id: ghost, kind: workflow, workflow: publish_assett}
  - {id: notify, tool: flow__echo, args: {path: "{{steps.hero.output.export.path}}"}}
`)
	res, err := e.DryRun(ctx, engine.DryRunRequest{StartRequest: engine.StartRequest{Spec: parent}, Fixtures: map[string]any{
		"hero":          map[string]any{"export": map[string]any{"path": "/p/hero.fbx"}},
		"publish_asset": map[string]any{"export": "by name"},
	}})
	if err != nil || res.Status != run.StatusCompleted {
		t.Fatalf("%v %+v", err, res)
	}
	var got []string
	for _, ds := range res.Steps {
		got = append(got, fmt.Sprintf("%d %s %s %s", ds.Order, ds.Kind, ds.Workflow, dryLine(ds)))
	}
	want := []string{
		`1 workflow publish_asset hero completed step_id hero {"asset":"hero_dry-run"} {"export":{"path":"/p/hero.fbx"}}`,
		`2 workflow publish_asset prop completed workflow publish_asset {"asset":"prop"} {"export":"by name"}`,
		`0 foreach  each completed   null [{"inner":{"export":"by name"}}]`,
		`3 workflow publish_asset each[0].inner completed workflow publish_asset {"asset":"a"} {"export":"by name"}`,
		`4 workflow publish_assett ghost completed none  {} null`,
		`5 tool  notify completed echo  {"path":"/p/hero.fbx"} {"path":"/p/hero.fbx"}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], `"publish_assett", which is not registered`) || !strings.Contains(res.Warnings[0], `did you mean "publish_asset"`) {
		t.Errorf("warnings: %q", res.Warnings)
	}
	if runs, err := e.Runs(ctx, engine.RunFilter{}); err != nil || len(runs) != 0 {
		t.Errorf("a dry run started child runs: %v %v", runs, err)
	}
}
