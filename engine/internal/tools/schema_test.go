package tools_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

const exportSchema = `{"type": "object",
 "properties": {"scene": {"type": "string", "minLength": 1}, "frames": {"type": "integer", "minimum": 1},
                "asset_id": {"type": "integer", "maximum": 9223372036854775807},
                "files": {"type": "array", "items": {"type": "string"}}, "day": {"type": "string", "format": "date"},
                "note": {"type": "string", "format": "studio-shot-code"}},
 "required": ["scene"], "additionalProperties": false}`

// callOnce makes one call and answers it (when it reaches the host) with output; called reports
// whether it reached the host.
func callOnce(t *testing.T, b *bundle, args map[string]any, output string) (res tools.Result, called bool) {
	t.Helper()
	out := b.callAsync(context.Background(), tools.Call{RunID: "r", StepKey: "export", Tool: "maya__export", Args: args, Attempt: 1})
	deadline := time.Now().Add(time.Minute) // a check of a million values is slow under -race
	for time.Now().Before(deadline) {
		select {
		case o := <-out: // answered without the host: refused before the call
			if o.err != nil {
				t.Fatal(o.err)
			}
			return o.res, false
		default:
		}
		calls, err := b.host.Pull(context.Background(), tools.PullRequest{Lanes: []string{tools.LaneMain}, Max: 1, Timeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) == 1 {
			if err := b.host.Complete(calls[0].ID, tools.Result{OutputJSON: []byte(output)}); err != nil {
				t.Fatal(err)
			}
			o := <-out
			if o.err != nil {
				t.Fatal(o.err)
			}
			return o.res, true
		}
	}
	t.Fatal("the call neither reached the host nor ended")
	return tools.Result{}, false
}

func TestSchemaChecksArgsBeforeTheCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.router.RegisterHost(tools.ToolInfo{Name: "maya__export", Schema: []byte(exportSchema)}); err != nil {
		t.Fatal(err)
	}
	big, _ := spec.DecodeValue([]byte(`9007199254740993`)) // 2^53+1: json.Number
	if _, ok := big.(json.Number); !ok {
		t.Fatalf("2^53+1 decodes to %T; the test needs json.Number", big)
	}
	res, called := callOnce(t, b, map[string]any{"scene": "a.ma", "frames": float64(10), "asset_id": big, "day": "2026-03-08",
		"note": "an unknown format is a free hint"}, `{"ok":true}`)
	if !called || res.Error != nil || string(res.OutputJSON) != `{"ok":true}` {
		t.Fatalf("valid args: called %v, %+v", called, res)
	}

	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"scene": "a.ma", "frames": float64(0)}, "step export: args.frames: must be >= 1; got 0 (schema of tool maya__export)"},
		{map[string]any{"scene": "a.ma", "frames": 2.5}, "args.frames: must be integer; got number"},
		{map[string]any{"frames": float64(3)}, "args.scene: is required"},
		{map[string]any{"scene": "a", "extra": true}, "args.extra: is not allowed (additionalProperties)"},
		{map[string]any{"scene": "a", "files": []any{"x", float64(1)}}, "args.files[1]: must be string; got number"},
		{map[string]any{"scene": ""}, "args.scene: must be at least 1 characters long; got 0"},
		// 2^63 is one over the maximum: compared exactly, not as float64 (where they are equal).
		{map[string]any{"scene": "a", "asset_id": json.Number("9223372036854775808")}, "args.asset_id: must be <= 9223372036854775807; got 9223372036854775808"},
		{nil, "args.scene: is required"},
		{map[string]any{"scene": "a", "day": "2026-13-45"}, `args.day: '2026-13-45' is not valid date`},
	} {
		res, called := callOnce(t, b, c.args, `{}`)
		if called {
			t.Fatalf("args %v: the tool was called", c.args)
		}
		if res.Error == nil || res.Error.Kind != run.KindInvalidInput || !res.Error.Final || !strings.Contains(res.Error.Message, c.want) {
			t.Errorf("args %v: %+v; want invalid_input, final, containing %q", c.args, res.Error, c.want)
		}
	}
}

func TestSchemaMessageListsAtMostFiveProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.router.RegisterHost(tools.ToolInfo{Name: "maya__export",
		Schema: []byte(`{"type":"object","additionalProperties":{"type":"string"}}`)}); err != nil {
		t.Fatal(err)
	}
	args := map[string]any{}
	for i := range 8 {
		args[fmt.Sprintf("k%d", i)] = float64(i)
	}
	res, called := callOnce(t, b, args, `{}`)
	if called || res.Error == nil {
		t.Fatalf("called %v, %+v", called, res)
	}
	if n := strings.Count(res.Error.Message, "must be string"); n != 5 || !strings.Contains(res.Error.Message, "; and 3 more (schema of tool maya__export)") {
		t.Fatalf("message lists %d problems: %s", n, res.Error.Message)
	}
}

func TestOutputSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.router.RegisterHost(tools.ToolInfo{Name: "maya__export",
		OutputSchema: []byte(`{"type":"object","properties":{"fbx":{"type":"string","pattern":"\\.fbx$"},"count":{"type":"integer"}},"required":["fbx"]}`)}); err != nil {
		t.Fatal(err)
	}
	res, called := callOnce(t, b, nil, `{"fbx":"a.fbx","count":18446744073709551617}`)
	if !called || res.Error != nil || !strings.Contains(string(res.OutputJSON), "18446744073709551617") {
		t.Fatalf("valid output: %+v", res)
	}
	for output, want := range map[string]string{
		`{"fbx":"a.abc"}`: `step export: output.fbx: must match the pattern "\\.fbx$" (output_schema of tool maya__export)`,
		`{"count":1}`:     "output.fbx: is required",
		`[1]`:             "output: must be object; got array",
	} {
		res, called := callOnce(t, b, nil, output)
		if !called {
			t.Fatal("the tool was not called")
		}
		if res.Error == nil || res.Error.Kind != run.KindInvalidOutput || res.Error.Final || res.OutputJSON != nil ||
			!strings.Contains(res.Error.Message, want) {
			t.Errorf("output %s: %+v; want invalid_output containing %q", output, res.Error, want)
		}
	}
}

func TestBadSchemaRefusedAtRegister(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		info tools.ToolInfo
		want string
	}{
		{tools.ToolInfo{Name: "t1", Schema: []byte(`{"type": "intger"}`)}, "tool t1: schema is not a valid JSON Schema"},
		{tools.ToolInfo{Name: "t2", Schema: []byte(`{"minimum": "one"}`)}, "tool t2: schema is not a valid JSON Schema"},
		{tools.ToolInfo{Name: "t3", OutputSchema: []byte(`{"pattern": "(?<=a)b"}`)}, "tool t3: output_schema is not a valid JSON Schema"},
		{tools.ToolInfo{Name: "t4", Schema: []byte(`{"$ref": "file:///etc/passwd"}`)}, "tool t4: schema is not a valid JSON Schema"},
		{tools.ToolInfo{Name: "t5", Schema: []byte(`{"$ref": "https://example.com/s.json"}`)}, "tool t5: schema is not a valid JSON Schema"},
		{tools.ToolInfo{Name: "t6", Schema: []byte(`"object"`)}, "tool t6: schema must be a JSON Schema: an object (or true/false); got a string"},
		{tools.ToolInfo{Name: "t7", Schema: []byte(`{`)}, "tool t7: schema is not valid JSON"},
		{tools.ToolInfo{Name: "t8", Schema: []byte(`{"description":"` + strings.Repeat("x", tools.MaxSchemaBytes) + `"}`)}, "the limit is 1048576 (1 MiB)"},
	} {
		err := b.router.RegisterHost(c.info)
		if run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RegisterHost(%s) = %v; want invalid_request containing %q", c.info.Name, err, c.want)
		}
		if _, ok := b.router.Lookup(c.info.Name); ok {
			t.Errorf("%s was registered", c.info.Name)
		}
	}
	// Refs inside the document, older drafts and boolean schemas are fine.
	for i, s := range []string{`{"$defs":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/$defs/n"}}}`,
		`{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"n":{"type":"integer"}},"properties":{"a":{"$ref":"#/definitions/n"}}}`,
		`true`} {
		if err := b.router.RegisterHost(tools.ToolInfo{Name: fmt.Sprintf("ok%d", i), Schema: []byte(s)}); err != nil {
			t.Errorf("schema %s: %v", s, err)
		}
	}
	info, _ := b.router.Lookup("ok0")
	if !strings.Contains(string(info.Schema), "$defs") {
		t.Fatalf("Lookup keeps the schema text: %s", info.Schema)
	}
}

// BenchmarkSchemaValidate1MB measures the args check of a call whose args are about 1 MB of
// JSON: 10,000 objects of 5 fields (strings under a pattern, integers under a minimum, exact
// 64-bit ids, a number, a bool) under a schema that checks every field. "valid": the args
// conform (the call then ends at once on a cancelled context); "invalid": the last item breaks
// the minimum, so the whole value is walked and the call refused.
func BenchmarkSchemaValidate1MB(b *testing.B) {
	schema := `{"type":"object","required":["items"],"properties":{"items":{"type":"array","items":{
	  "type":"object","required":["path","frame"],"additionalProperties":false,
	  "properties":{"path":{"type":"string","pattern":"^/[a-z0-9_/.]+$"},"frame":{"type":"integer","minimum":0},
	    "id":{"type":"integer"},"scale":{"type":"number","exclusiveMinimum":0},"visible":{"type":"boolean"}}}}}}`
	r := tools.NewRouter(nil, nil)
	defer r.Host().Close()
	if err := r.RegisterHost(tools.ToolInfo{Name: "big", Schema: []byte(schema), Lane: tools.LaneMain}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, valid := range []bool{true, false} {
		name := "invalid"
		if valid {
			name = "valid"
		}
		b.Run(name, func(b *testing.B) {
			items := make([]any, 10000)
			for i := range items {
				items[i] = map[string]any{"path": fmt.Sprintf("/shots/sq010/sh%04d/cache/geo_%04d.abc", i, i), "frame": float64(1001 + i),
					"id": json.Number(fmt.Sprint(9007199254740993 + i)), "scale": 0.5, "visible": true}
			}
			if !valid {
				items[len(items)-1].(map[string]any)["frame"] = float64(-1)
			}
			args := map[string]any{"items": items}
			text, _ := json.Marshal(args)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				res, err := r.Call(ctx, tools.Call{StepKey: "s", Tool: "big", Args: args})
				if valid && (res.Error != nil || err == nil) {
					b.Fatalf("valid args: %+v %v", res.Error, err)
				}
				if !valid && (res.Error == nil || !strings.Contains(res.Error.Message, "args.items[9999].frame: must be >= 0")) {
					b.Fatalf("%+v", res.Error)
				}
			}
		})
	}
}

func TestSchemaValueBudget(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := b.router.RegisterHost(tools.ToolInfo{Name: "maya__export", Schema: []byte(`{"type":"object"}`),
		OutputSchema: []byte(`true`)}); err != nil {
		t.Fatal(err)
	}
	items := make([]any, tools.MaxSchemaValues) // + the array + the object: over the limit
	for i := range items {
		items[i] = float64(i)
	}
	res, called := callOnce(t, b, map[string]any{"items": items}, `{}`)
	if called || res.Error == nil || res.Error.Kind != run.KindInvalidInput || !res.Error.Final ||
		!strings.Contains(res.Error.Message, "args: hold more than 1000000 JSON values") {
		t.Fatalf("called %v, %+v", called, res.Error)
	}
	res, called = callOnce(t, b, map[string]any{"items": items[:tools.MaxSchemaValues-2]}, `{}`)
	if !called || res.Error != nil {
		t.Fatalf("at the limit: called %v, %+v", called, res.Error)
	}
	text, _ := json.Marshal(items)
	res, _ = callOnce(t, b, nil, string(text))
	if res.Error == nil || res.Error.Kind != run.KindInvalidOutput || !strings.Contains(res.Error.Message, "output: holds more than 1000000 JSON values") {
		t.Fatalf("output over the limit: %+v", res.Error)
	}
}

// A tool step routed to a worker pool is checked against the schemas of the host tool of the
// same name (the @task registered for the in-process case); a tool_remote call is not.
func TestSchemaOfPooledCalls(t *testing.T) {
	t.Parallel()
	rd := &remoteDouble{}
	r := tools.NewRouter(nil, rd)
	t.Cleanup(r.Host().Close)
	if err := r.RegisterHost(tools.ToolInfo{Name: "maya__export", Schema: []byte(exportSchema),
		OutputSchema: []byte(`{"type":"object","required":["fbx"]}`)}); err != nil {
		t.Fatal(err)
	}
	bad := tools.Call{StepKey: "export", Tool: "maya__export", DCC: "maya", Pooled: true, Args: map[string]any{"frames": float64(2)}}
	res, err := r.CallRemote(context.Background(), bad)
	if err != nil || res.Error == nil || res.Error.Kind != run.KindInvalidInput || !res.Error.Final ||
		res.Error.Message != "step export: args.scene: is required (schema of tool maya__export)" || rd.calls.Load() != 0 {
		t.Fatalf("pooled bad args: %+v %v, %d remote calls", res.Error, err, rd.calls.Load())
	}
	// Good args reach the pool; the double's output has no "fbx": invalid_output.
	good := bad
	good.Args = map[string]any{"scene": "a.ma"}
	res, err = r.CallRemote(context.Background(), good)
	if err != nil || res.Error == nil || res.Error.Kind != run.KindInvalidOutput || rd.calls.Load() != 1 {
		t.Fatalf("pooled output: %+v %v, %d remote calls", res.Error, err, rd.calls.Load())
	}
	// tool_remote: the remote's own tool, whatever a host tool of that name says.
	remote := bad
	remote.Pooled = false
	if res, err := r.CallRemote(context.Background(), remote); err != nil || res.Error != nil || rd.calls.Load() != 2 {
		t.Fatalf("tool_remote: %+v %v", res.Error, err)
	}
}
