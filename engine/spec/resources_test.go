package spec_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// A tool step's `resources` and the spec's `priority` (docs/guide/resources.md) decode into the
// spec, and enter its canonical form (its hash) only when given.
func TestResourcesAndPriorityDecodeAndCanonical(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
name: sim
priority: 50
steps:
  - {id: cook, tool: houdini__cook, resources: {houdini: 1, gpu: 2}}
  - {id: comp, dcc: nuke, tool: nuke__render, resources: {nuke: 1}}
  - {id: none, tool: t, resources: {}}
`)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.Priority != 50 {
		t.Fatalf("priority %d", s.Priority)
	}
	if !reflect.DeepEqual(s.Steps[0].Resources, map[string]int{"houdini": 1, "gpu": 2}) || !reflect.DeepEqual(s.Steps[1].Resources, map[string]int{"nuke": 1}) {
		t.Fatalf("resources %v %v", s.Steps[0].Resources, s.Steps[1].Resources)
	}
	canon := string(s.Canonical())
	for _, want := range []string{`"priority":50`, `"resources":{"gpu":2,"houdini":1}`, `"resources":{"nuke":1}`} {
		if !strings.Contains(canon, want) {
			t.Fatalf("canonical %s lacks %s", canon, want)
		}
	}
	if strings.Count(canon, `"resources"`) != 2 {
		t.Fatalf("an empty resources mapping entered the canonical form: %s", canon)
	}
	if got := s.Resources(); !reflect.DeepEqual(got, map[string]int{"houdini": 1, "gpu": 2, "nuke": 1}) {
		t.Fatalf("Resources() = %v", got)
	}
	plain := mustParse(t, "name: p\nsteps: [{id: a, tool: t}]\n")
	if c := string(plain.Canonical()); strings.Contains(c, "resources") || strings.Contains(c, "priority") {
		t.Fatalf("canonical of a spec without resources: %s", c)
	}
	if plain.Resources() != nil || plain.Priority != 0 {
		t.Fatalf("a plain spec has resources %v, priority %d", plain.Resources(), plain.Priority)
	}
}

func TestResourceAndPriorityProblems(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, code, msg string
	}{
		{"zero amount", `steps: [{id: a, tool: t, resources: {houdini: 0}}]`, spec.CodeInvalidValue,
			"steps[0] (id \"a\"): `resources.houdini` must be between 1 and 1000000 (the units one attempt holds while its tool runs; remove the resource to ask for none); got 0"},
		{"negative amount", `steps: [{id: a, tool: t, resources: {houdini: -2}}]`, spec.CodeInvalidValue, "got -2"},
		{"huge amount", `steps: [{id: a, tool: t, resources: {houdini: 1e12}}]`, spec.CodeInvalidValue, "got 1e12"},
		{"fraction", `steps: [{id: a, tool: t, resources: {houdini: 0.5}}]`, spec.CodeWrongType, "`houdini` must be a whole number; got the number 0.5"},
		{"not a mapping", `steps: [{id: a, tool: t, resources: houdini}]`, spec.CodeWrongType, "`resources` must be a mapping of resource name to amount"},
		{"bad name", `steps: [{id: a, tool: t, resources: {"hou dini": 1}}]`, spec.CodeInvalidValue, `resource name "hou dini" is not valid`},
		{"on a foreach", `steps: [{id: a, kind: foreach, items: [1], resources: {gpu: 1}, steps: [{id: b, tool: t}]}]`, spec.CodeUnknownField, "`resources` is only valid on tool/tool_remote steps"},
		{"priority too high", "priority: 5000\nsteps: [{id: a, tool: t}]", spec.CodeInvalidValue,
			"priority: `priority` must be a whole number between -1000 and 1000 (higher is served first; 0 = the default); got 5000"},
		{"priority not a number", "priority: high\nsteps: [{id: a, tool: t}]", spec.CodeWrongType, "`priority` must be a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			codes, msgs := codesOf(t, "name: p\n"+tc.doc+"\n")
			found := false
			for _, c := range codes {
				found = found || c == tc.code
			}
			if !found || !strings.Contains(msgs, tc.msg) {
				t.Fatalf("codes %v, messages:\n%s\nwant code %s and %q", codes, msgs, tc.code, tc.msg)
			}
		})
	}
}

// CheckResources names every step that asks for an undeclared resource (with the closest
// declared name) or for more than a limit, with the field's path and position, in document
// order, on_failure steps included.
func TestCheckResources(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `name: p
steps:
  - {id: cook, tool: t, resources: {houdinni: 1}}
  - id: each
    kind: foreach
    items: [1, 2]
    steps:
      - {id: render, tool: t, resources: {gpu: 3, nuke: 1}}
on_failure:
  - {id: tell, tool: t, resources: {slack: 1}}
`)
	limits := map[string]int{"houdini": 4, "gpu": 2, "nuke": 10}
	err := s.CheckResources(limits)
	var ve *spec.ValidationError
	if !errors.As(err, &ve) || ve.Code != spec.CodeValidationFailed {
		t.Fatalf("CheckResources: %v", err)
	}
	type row struct{ code, path, msg string }
	var got []row
	for _, p := range ve.Problems {
		got = append(got, row{p.Code, p.Path, p.Message})
	}
	want := []row{
		{spec.ResourceUnknown, "steps[0].resources.houdinni", `steps[0] (id "cook"): ` + "`resources` asks for \"houdinni\", which the engine does not declare: did you mean \"houdini\"? The engine declares \"gpu\", \"houdini\", \"nuke\"; or declare it in the engine settings (`resources: {houdinni: {limit: N}}`) or remove it from the step"},
		{spec.ResourceOverLimit, "steps[1].steps[0].resources.gpu", `steps[1].steps[0] (id "render"): ` + "`resources.gpu` asks for 3 but the engine's limit of \"gpu\" is 2, so the step could never start: ask for at most 2, or raise the limit in the engine settings"},
		{spec.ResourceUnknown, "on_failure[0].resources.slack", `on_failure[0] (id "tell"): ` + "`resources` asks for \"slack\", which the engine does not declare: the engine declares \"gpu\", \"houdini\", \"nuke\"; declare it in the engine settings (`resources: {slack: {limit: N}}`) or remove it from the step"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems:\n%+v\nwant:\n%+v", got, want)
	}
	if ve.Problems[0].Line != 3 || ve.Problems[0].Column == 0 {
		t.Fatalf("position %d:%d, want line 3", ve.Problems[0].Line, ve.Problems[0].Column)
	}
	// Nothing declared: the message says so.
	err = mustParse(t, "steps: [{id: a, tool: t, resources: {gpu: 1}}]").CheckResources(nil)
	if !errors.As(err, &ve) || !strings.Contains(ve.Problems[0].Message, "the engine declares no resources") {
		t.Fatalf("CheckResources(nil): %v", err)
	}
	// Within the limits (an amount equal to its limit included), and a spec asking for nothing.
	if err := mustParse(t, "steps: [{id: a, tool: t, resources: {gpu: 2}}]").CheckResources(limits); err != nil {
		t.Fatal(err)
	}
	if err := mustParse(t, "steps: [{id: a, tool: t}]").CheckResources(nil); err != nil {
		t.Fatal(err)
	}
}

// `fair_share` is a template of what a run has when it starts; it enters the canonical form only
// when given.
func TestFairShare(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "name: p\nfair_share: \"{{inputs.show}}\"\ninputs: {show: string}\nsteps: [{id: a, tool: t}]")
	if err := s.Validate(); err != nil || s.FairShare != "{{inputs.show}}" || !strings.Contains(string(s.Canonical()), `"fair_share":"{{inputs.show}}"`) {
		t.Fatalf("fair_share %q, %v, canonical %s", s.FairShare, err, s.Canonical())
	}
	for _, tc := range []struct{ doc, msg string }{
		{"fair_share: \"{{steps.a.output}}\"\nsteps: [{id: a, tool: t}]", "fair_share: `fair_share` may refer to inputs, trigger, run, env only (it is rendered when the run starts, before any step); got {{steps.a.output}}"},
		{"fair_share: \"{{inputs.shw}}\"\ninputs: {show: string}\nsteps: [{id: a, tool: t}]", "fair_share: `fair_share` refers to {{inputs.shw}}, but no input named \"shw\" is declared"},
		{"fair_share: \"{{inputs.show\"\nsteps: [{id: a, tool: t}]", "fair_share: `fair_share` is a malformed template"},
	} {
		codes, msgs := codesOf(t, "name: p\n"+tc.doc+"\n")
		if len(codes) != 1 || codes[0] != spec.CodeInvalidTemplate || !strings.Contains(msgs, tc.msg) {
			t.Errorf("%q: codes %v, messages:\n%s\nwant %s", tc.doc, codes, msgs, tc.msg)
		}
	}
}
