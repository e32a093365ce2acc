package gotest

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A host tool's schema is checked before every call and its output_schema after it
// (docs/reference/c-abi/engine.md "dccflow_tool_register").

const exportArgsSchema = `{"type": "object", "required": ["scene", "frames"],
  "properties": {"scene": {"type": "string"}, "frames": {"type": "integer", "minimum": 1},
                 "asset_id": {"type": "integer", "maximum": 9223372036854775807}}}`

func registerExport(t *testing.T, b *testBundle, output string) {
	t.Helper()
	info := flowtype.ToolInfo{Name: "maya__export", Lane: flowtype.LaneMain, Schema: json.RawMessage(exportArgsSchema)}
	if output != "" {
		info.OutputSchema = json.RawMessage(output)
	}
	if err := b.eng.RegisterTool(info); err != nil {
		t.Fatal(err)
	}
}

func exportSpec(args, retry string) string {
	return `
name: export
steps:
  - id: export
    tool: maya__export
    args: ` + args + `
    retry: ` + retry + `
`
}

const threeTries = `{max_attempts: 3, backoff: fixed, initial_delay_ms: 1, max_delay_ms: 1, retry_on: [invalid_input, invalid_output, error]}`

func TestSchemaValidArgsReachTheTool(t *testing.T) {
	t.Parallel()
	b := setup(t)
	registerExport(t, b, `{"type":"object","required":["fbx"]}`)
	srv := b.serve(flowtype.LaneMain, func(c flowtype.PendingCall) flowtype.ToolResult {
		return output(map[string]any{"fbx": c.Args["scene"], "id": c.Args["asset_id"]})
	})
	// 2^63-1 is the schema's maximum exactly: it passes, and reaches the tool unrounded.
	info := b.run(exportSpec(`{scene: a.ma, frames: 12, asset_id: 9223372036854775807}`, threeTries), nil)
	if info.Status != run.StatusCompleted || srv.calls.Load() != 1 {
		t.Fatalf("status %s (%+v), %d calls", info.Status, info.Error, srv.calls.Load())
	}
	if id := srv.pulled()[0].Args["asset_id"]; id != json.Number("9223372036854775807") {
		t.Fatalf("asset_id reached the tool as %T %v", id, id)
	}
}

func TestSchemaInvalidArgsFailBeforeTheCallAndAreNotRetried(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, args, want string }{
		{"minimum", `{scene: a.ma, frames: 0}`, "step export: args.frames: must be >= 1; got 0 (schema of tool maya__export)"},
		{"required", `{scene: a.ma}`, "step export: args.frames: is required (schema of tool maya__export)"},
		{"type", `{scene: 3, frames: 2}`, "args.scene: must be string; got number"},
		// 2^63 is one over the maximum: a float64 comparison would call them equal.
		{"large integer", `{scene: a.ma, frames: 2, asset_id: 9223372036854775808}`,
			"args.asset_id: must be <= 9223372036854775807; got 9223372036854775808"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			registerExport(t, b, "")
			srv := b.serve(flowtype.LaneMain, func(flowtype.PendingCall) flowtype.ToolResult { return output(nil) })
			info := b.run(exportSpec(c.args, threeTries), nil)
			step := b.steps(info.ID)["export"]
			if info.Status != run.StatusFailed || step.Error == nil || step.Error.Kind != run.KindInvalidInput ||
				!strings.Contains(step.Error.Message, c.want) {
				t.Fatalf("status %s, step error %+v; want invalid_input containing %q", info.Status, step.Error, c.want)
			}
			// retry_on lists invalid_input, yet the same args would fail the same way: one attempt.
			if step.Attempts != 1 || len(b.eventTypes(info.ID, run.EventStepRetry)) != 0 {
				t.Fatalf("attempts %d, retries %v", step.Attempts, b.eventTypes(info.ID, run.EventStepRetry))
			}
			if srv.calls.Load() != 0 {
				t.Fatalf("the tool was called %d times", srv.calls.Load())
			}
		})
	}
}

func TestSchemaOutputViolationIsInvalidOutput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	registerExport(t, b, `{"type":"object","required":["fbx"],"properties":{"fbx":{"type":"string","pattern":"\\.fbx$"}}}`)
	srv := b.serve(flowtype.LaneMain, func(flowtype.PendingCall) flowtype.ToolResult { return output(map[string]any{"fbx": "a.abc"}) })
	info := b.run(exportSpec(`{scene: a.ma, frames: 2}`, `{max_attempts: 3, backoff: fixed, initial_delay_ms: 1, max_delay_ms: 1}`), nil)
	step := b.steps(info.ID)["export"]
	want := `step export: output.fbx: must match the pattern "\\.fbx$" (output_schema of tool maya__export)`
	if info.Status != run.StatusFailed || step.Error == nil || step.Error.Kind != run.KindInvalidOutput || step.Error.Message != want {
		t.Fatalf("status %s, step error %+v; want invalid_output %q", info.Status, step.Error, want)
	}
	if step.Attempts != 1 || srv.calls.Load() != 1 || info.Outputs["export"] != nil {
		t.Fatalf("attempts %d, calls %d, outputs %v: invalid_output is not retried by default", step.Attempts, srv.calls.Load(), info.Outputs)
	}

	// Listed in retry_on, an output violation is retried: the tool may answer differently.
	calls := srv.calls.Load()
	info = b.run(exportSpec(`{scene: a.ma, frames: 2}`, threeTries), nil)
	if step := b.steps(info.ID)["export"]; info.Status != run.StatusFailed || step.Attempts != 3 || srv.calls.Load()-calls != 3 {
		t.Fatalf("with retry_on [invalid_output]: status %s, attempts %d, calls %d", info.Status, step.Attempts, srv.calls.Load()-calls)
	}
}

func TestSchemaBadSchemaRefusedAtRegister(t *testing.T) {
	t.Parallel()
	b := setup(t)
	err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__export", Schema: json.RawMessage(`{"type":"object","properties":{"frames":{"minimum":"1"}}}`)})
	mustContain(t, "register error", errString(err), "tool maya__export: schema is not a valid JSON Schema: schema.properties.frames.minimum: must be number; got string")
	if codeOf(err) != run.CodeInvalidRequest {
		t.Fatalf("code %s", codeOf(err))
	}
	err = b.eng.RegisterTool(flowtype.ToolInfo{Name: "maya__export", OutputSchema: json.RawMessage(`{"type":"obj"}`)})
	mustContain(t, "register error", errString(err), "tool maya__export: output_schema is not a valid JSON Schema: schema.type")
	for _, ti := range b.eng.Tools() {
		if ti.Name == "maya__export" {
			t.Fatal("a tool with a bad schema was registered")
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

type poolDouble struct{ calls atomic.Int32 }

func (p *poolDouble) CallRemote(_ context.Context, dcc, tool string, args map[string]any) (flowtype.ToolResult, error) {
	p.calls.Add(1)
	return flowtype.ToolResult{Output: map[string]any{"fbx": args["scene"]}}, nil
}

// A tool step routed to a pool is checked against the host tool of the same name.
func TestSchemaOfAPoolRoutedStep(t *testing.T) {
	t.Parallel()
	pool := &poolDouble{}
	b := setup(t, withConfig(func(c *engine.Config) {
		c.Remotes = map[string]engine.RemoteConfig{"maya": {Command: []string{"mayapy", "-m", "dcc_flow", "worker"}}}
	}), withOptions(engine.WithRemoteCaller(pool)))
	registerExport(t, b, `{"type":"object","required":["fbx"]}`)
	info := b.run(`
steps:
  - {id: export, tool: maya__export, pool: maya, args: {scene: a.ma, frames: 0}}
`, nil)
	step := b.steps(info.ID)["export"]
	if info.Status != run.StatusFailed || step.Error == nil || step.Error.Kind != run.KindInvalidInput ||
		step.Error.Message != "step export: args.frames: must be >= 1; got 0 (schema of tool maya__export)" || pool.calls.Load() != 0 {
		t.Fatalf("status %s, error %+v, pool calls %d", info.Status, step.Error, pool.calls.Load())
	}
	info = b.run(`
steps:
  - {id: export, tool: maya__export, pool: maya, args: {scene: a.ma, frames: 2}}
`, nil)
	if info.Status != run.StatusCompleted || pool.calls.Load() != 1 {
		t.Fatalf("status %s (%+v), pool calls %d", info.Status, info.Error, pool.calls.Load())
	}
}
