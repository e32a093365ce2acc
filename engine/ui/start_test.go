package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/engine/ui"
)

// render is the workflow the start form is tested with: one input of each type, a required
// one, defaults, an enum.
const render = `
name: render
description: render a shot
inputs:
  shot: {type: string, required: true, description: "the shot, e.g. sh010"}
  frames: {type: integer, default: 100}
  quality: {type: string, enum: [draft, final], default: draft}
  scale: {type: number}
  preview: {type: boolean, default: false}
  tags: {type: array}
  options: {type: object}
  day: {type: string, format: date}
steps:
  - {id: say, tool: flow__echo, args: {value: "{{inputs.shot}} x{{inputs.frames}}"}}
`

func registerText(t testing.TB, e *engine.Engine, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// startErr is the error answer of POST /api/runs.
type startErr struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details struct {
			Problems []struct {
				Input   string `json:"input"`
				Message string `json:"message"`
			} `json:"problems"`
		} `json:"details"`
	} `json:"error"`
}

func runCount(t testing.TB, e *engine.Engine) int {
	t.Helper()
	runs, err := e.Runs(context.Background(), engine.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(runs)
}

func TestStartRunFromTheDashboard(t *testing.T) {
	b := newBench(t, ui.Options{})
	sp := registerText(t, b.e, render)

	// The form's description of the inputs: types, defaults (has_default), enum, help text.
	var wf struct {
		SpecHash string `json:"spec_hash"`
		Inputs   []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Required   bool   `json:"required"`
			Default    any    `json:"default"`
			HasDefault bool   `json:"has_default"`
			Format     string `json:"format"`
			Enum       []any  `json:"enum"`
			Desc       string `json:"description"`
		} `json:"inputs"`
	}
	b.getJSON(t, "/api/workflows/render", &wf)
	if wf.SpecHash != sp.Hash() || len(wf.Inputs) != 8 {
		t.Fatalf("workflow %+v", wf)
	}
	byName := map[string]int{}
	for i, in := range wf.Inputs {
		byName[in.Name] = i
	}
	if in := wf.Inputs[byName["shot"]]; !in.Required || in.HasDefault || in.Desc != "the shot, e.g. sh010" {
		t.Errorf("shot %+v", in)
	}
	if in := wf.Inputs[byName["quality"]]; fmt.Sprint(in.Enum) != "[draft final]" || in.Default != "draft" || !in.HasDefault {
		t.Errorf("quality %+v", in)
	}
	if in := wf.Inputs[byName["preview"]]; in.Default != false || !in.HasDefault || in.Type != "boolean" {
		t.Errorf("preview %+v", in)
	}
	if in := wf.Inputs[byName["day"]]; in.Format != "date" {
		t.Errorf("day %+v", in)
	}

	// A big integer stays exact (the body is decoded as the engine decodes inputs).
	body := json.RawMessage(`{"workflow": "render", "by": "  Ann Producer ", "spec_hash": "` + sp.Hash() + `",
		"inputs": {"shot": "sh010", "frames": 9007199254740993, "tags": ["hero"], "options": {"aov": true}}}`)
	code, out, hd := b.do(t, http.MethodPost, "/api/runs", body)
	if code != http.StatusCreated {
		t.Fatalf("POST /api/runs: %d %s", code, out)
	}
	var res struct {
		RunID    string `json:"run_id"`
		Workflow string `json:"workflow"`
		By       string `json:"by"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.RunID == "" || res.Workflow != "render" || res.By != "Ann Producer" {
		t.Fatalf("answer %s (%v)", out, err)
	}
	if hd.Get("Location") != "/api/runs/"+res.RunID {
		t.Errorf("Location %q", hd.Get("Location"))
	}
	info := b.waitStatus(t, res.RunID, run.StatusCompleted)
	// Started the way MCP starts a run, from the "ui" origin; who started it is in the trigger.
	if info.Origin != engine.OriginUI || fmt.Sprint(info.Trigger) != "map[by:Ann Producer]" {
		t.Errorf("origin %q trigger %v", info.Origin, info.Trigger)
	}
	// Defaults applied by the engine, the given values kept.
	if fmt.Sprint(info.Inputs["frames"]) != "9007199254740993" || info.Inputs["quality"] != "draft" || info.Inputs["preview"] != false ||
		fmt.Sprint(info.Inputs["tags"]) != "[hero]" {
		t.Errorf("inputs %v", info.Inputs)
	}
	// The run page reads it back: origin and trigger.
	var d struct {
		Origin  string         `json:"origin"`
		Trigger map[string]any `json:"trigger"`
	}
	b.getJSON(t, "/api/runs/"+res.RunID, &d)
	if d.Origin != "ui" || d.Trigger["by"] != "Ann Producer" {
		t.Errorf("run detail origin %q trigger %v", d.Origin, d.Trigger)
	}
	var list struct {
		Runs []ui.RunSummary `json:"runs"`
	}
	b.getJSON(t, "/api/runs?workflow=render", &list)
	if len(list.Runs) != 1 || list.Runs[0].Origin != "ui" {
		t.Errorf("runs %+v", list.Runs)
	}
}

// Each problem the engine finds with the inputs comes back as 400 invalid_input with
// error.details.problems naming the input, so the form shows it next to its field; no run is
// started.
func TestStartRunReportsEachProblemByInput(t *testing.T) {
	b := newBench(t, ui.Options{})
	sp := registerText(t, b.e, render)
	type problem struct{ input, says string }
	for _, c := range []struct {
		name   string
		inputs map[string]any
		want   []problem
	}{
		{"missing required", map[string]any{}, []problem{{"shot", "is required"}}},
		{"wrong type", map[string]any{"shot": "sh010", "frames": "ten"}, []problem{{"frames", "must be of type integer; got a string"}}},
		{"not whole", map[string]any{"shot": "sh010", "frames": 2.5}, []problem{{"frames", "must be of type integer"}}},
		{"not in enum", map[string]any{"shot": "sh010", "quality": "best"}, []problem{{"quality", `must be one of ["draft","final"]`}}},
		{"bad date", map[string]any{"shot": "sh010", "day": "tomorrow"}, []problem{{"day", "must be a date like"}}},
		{"unknown input", map[string]any{"shot": "sh010", "shto": "sh020"}, []problem{{"shto", "is not declared by workflow render"}}},
		{"several at once", map[string]any{"frames": true, "quality": "best"},
			[]problem{{"shot", "is required"}, {"frames", "must be of type integer; got a boolean"}, {"quality", "must be one of"}}},
	} {
		code, out, _ := b.do(t, http.MethodPost, "/api/runs", map[string]any{"workflow": "render", "by": "ann", "inputs": c.inputs})
		var e startErr
		_ = json.Unmarshal(out, &e)
		if code != http.StatusBadRequest || e.Error.Code != run.CodeInvalidInput {
			t.Errorf("%s: %d %s, want 400 invalid_input", c.name, code, out)
			continue
		}
		got := e.Error.Details.Problems
		if len(got) != len(c.want) {
			t.Errorf("%s: problems %+v, want %v", c.name, got, c.want)
			continue
		}
		for i, w := range c.want {
			if got[i].Input != w.input || !strings.Contains(got[i].Message, w.says) {
				t.Errorf("%s: problem %d is %+v, want input %q saying %q", c.name, i, got[i], w.input, w.says)
			}
		}
	}
	// The workflow, the name and the body itself.
	for _, c := range []struct {
		name string
		body any
		want int
		code string
		says string
	}{
		{"unknown workflow", map[string]any{"workflow": "rendr", "by": "ann"}, 404, run.CodeNotFound, `did you mean "render"`},
		{"no workflow", map[string]any{"by": "ann"}, 400, run.CodeInvalidInput, "workflow is empty"},
		{"no name", map[string]any{"workflow": "render", "inputs": map[string]any{"shot": "sh010"}}, 400, run.CodeInvalidInput, "by is empty"},
		{"blank name", map[string]any{"workflow": "render", "by": "  ", "inputs": map[string]any{"shot": "sh010"}}, 400, run.CodeInvalidInput, "by is empty"},
		{"unknown field", map[string]any{"workflow": "render", "by": "ann", "input": map[string]any{"shot": "sh010"}}, 400, run.CodeInvalidInput, `unknown field "input"`},
		{"inputs not an object", map[string]any{"workflow": "render", "by": "ann", "inputs": []any{"sh010"}}, 400, run.CodeInvalidInput, "JSON object"},
		{"stale form", map[string]any{"workflow": "render", "by": "ann", "spec_hash": "0123456789abcdef", "inputs": map[string]any{"shot": "sh010"}},
			409, run.CodeSpecChanged, "reload the form"},
		{"too large", map[string]any{"workflow": "render", "by": "ann", "inputs": map[string]any{"shot": strings.Repeat("x", 70<<10)}}, 413, run.CodeTooLarge, "larger than"},
	} {
		code, out, _ := b.do(t, http.MethodPost, "/api/runs", c.body)
		var e startErr
		_ = json.Unmarshal(out, &e)
		if code != c.want || e.Error.Code != c.code || !strings.Contains(e.Error.Message, c.says) {
			t.Errorf("%s: %d %s, want %d %s saying %q", c.name, code, out, c.want, c.code, c.says)
		}
	}
	if n := runCount(t, b.e); n != 0 {
		t.Errorf("%d runs were started by refused requests", n)
	}
	// The same form, current spec hash, good inputs: started.
	b.post(t, "/api/runs", map[string]any{"workflow": "render", "by": "ann", "spec_hash": sp.Hash(), "inputs": map[string]any{"shot": "sh010"}}, http.StatusCreated)
}

// POST /api/runs is guarded exactly as the actions are: CSRF header equal to its cookie, the
// server's own Origin, the token.
func TestStartRunNeedsTheCSRFHeaderTheOwnOriginAndTheToken(t *testing.T) {
	b := newBench(t, ui.Options{})
	body := map[string]any{"workflow": "echo", "by": "mallory", "inputs": map[string]any{"value": "x"}}
	for _, c := range []struct {
		name string
		edit func(*http.Request)
	}{
		{"no header", func(r *http.Request) { r.Header.Del(ui.CSRFHeader) }},
		{"no cookie", func(r *http.Request) { r.Header.Del("Cookie") }},
		{"header differs from cookie", func(r *http.Request) { r.Header.Set(ui.CSRFHeader, "other") }},
		{"foreign Origin", func(r *http.Request) { r.Header.Set("Origin", "http://evil.example") }},
		{"Origin on another port", func(r *http.Request) { r.Header.Set("Origin", "http://127.0.0.1:1") }},
		{"null Origin", func(r *http.Request) { r.Header.Set("Origin", "null") }},
		{"foreign Host", func(r *http.Request) { r.Host = "evil.example:8780" }},
	} {
		code, out, _ := b.do(t, http.MethodPost, "/api/runs", body, c.edit)
		if code != http.StatusForbidden || errorCode(out) != "forbidden" {
			t.Errorf("%s: %d %s, want 403 forbidden", c.name, code, out)
		}
	}
	if n := runCount(t, b.e); n != 0 {
		t.Fatalf("a refused start started %d run(s)", n)
	}
	own := func(r *http.Request) { r.Header.Set("Origin", b.srv.URL) }
	if code, out, _ := b.do(t, http.MethodPost, "/api/runs", body, own); code != http.StatusCreated {
		t.Errorf("POST from its own origin: %d %s", code, out)
	}

	tb := newBench(t, ui.Options{Token: "s3cret"})
	tb.token = ""
	if code, out, _ := tb.do(t, http.MethodPost, "/api/runs", body); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d %s", code, out)
	}
	if n := runCount(t, tb.e); n != 0 {
		t.Fatalf("a start without the token started %d run(s)", n)
	}
	tb.token = "s3cret"
	tb.post(t, "/api/runs", body, http.StatusCreated)
}

// A run started from the dashboard is a remote run: its templates see only the env_allow
// variables, as a run started over MCP does, while a local run sees them all. {{trigger.by}} is
// who started it.
func TestStartRunSeesOnlyTheEnvAllowVariables(t *testing.T) {
	t.Setenv("DCCFLOW_UI_TEST_SECRET", "hunter2")
	t.Setenv("DCCFLOW_UI_TEST_SHARED", "/studio")
	e, err := engine.Open(context.Background(), engine.Config{DB: filepath.Join(t.TempDir(), "flow.db"), StallAfterSecs: -1,
		EnvAllow: []string{"DCCFLOW_UI_TEST_SHARED"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	registerText(t, e, `
name: env
steps:
  - {id: secret, tool: flow__echo, args: {value: "{{env.DCCFLOW_UI_TEST_SECRET}}"}}
  - {id: shared, tool: flow__echo, args: {value: "{{env.DCCFLOW_UI_TEST_SHARED}}"}}
  - {id: who, tool: flow__echo, args: {value: "{{trigger.by}}"}}
`)
	b := benchOver(t, e, ui.Options{})
	outputs := func(id string) string {
		info := b.waitStatus(t, id, run.StatusCompleted)
		keys := make([]string, 0, len(info.Outputs))
		for k := range info.Outputs {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var s []string
		for _, k := range keys {
			s = append(s, fmt.Sprintf("%s=%v", k, info.Outputs[k]))
		}
		return strings.Join(s, " ")
	}
	res := b.post(t, "/api/runs", map[string]any{"workflow": "env", "by": "ann"}, http.StatusCreated)
	if got := outputs(res["run_id"].(string)); got != "secret=map[value:<nil>] shared=map[value:/studio] who=map[value:ann]" {
		t.Errorf("a dashboard run sees %s, want only the env_allow variable (and {{trigger.by}})", got)
	}
	if got := outputs(b.submit(t, "env", nil)); got != "secret=map[value:hunter2] shared=map[value:/studio] who=map[value:<nil>]" {
		t.Errorf("a local run sees %s, want every variable", got)
	}
}
