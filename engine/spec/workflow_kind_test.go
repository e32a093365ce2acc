package spec_test

import (
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The workflow step kind (docs/reference/spec.md, "workflow"): fields, canonical form, and its problems.
func TestWorkflowKind(t *testing.T) {
	t.Parallel()
	s, err := spec.ParseString(`
name: p
steps:
  - {id: shots, tool: t}
  - id: sub
    kind: workflow
    workflow: publish_asset
    inputs: {asset: "{{steps.shots.output.first}}", n: 2}
    retry: {max_attempts: 3}
    timeout_secs: 60
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	st := s.Find("sub")
	if st.Kind != spec.KindWorkflow || st.Workflow != "publish_asset" || st.Inputs["asset"] != "{{steps.shots.output.first}}" ||
		st.Policy.Retry == nil || st.Policy.Retry.MaxAttempts != 3 || st.Policy.TimeoutSecs != 60 {
		t.Fatalf("step: %+v", st)
	}
	canon := string(s.Canonical())
	if !strings.Contains(canon, `"inputs":{"asset":"{{steps.shots.output.first}}","n":2},"kind":"workflow"`) ||
		!strings.Contains(canon, `"workflow":"publish_asset"`) {
		t.Fatalf("canonical: %s", canon)
	}
	// No inputs: an empty object, so the hash does not depend on how "none" was written.
	a, _ := spec.ParseString("steps: [{id: s, kind: workflow, workflow: w}]")
	b, _ := spec.ParseString("steps: [{id: s, kind: workflow, workflow: w, inputs: {}}]")
	if a.Hash() != b.Hash() || !strings.Contains(string(a.Canonical()), `"inputs":{}`) {
		t.Fatalf("no inputs vs {}: %s / %s", a.Canonical(), b.Canonical())
	}

	for _, c := range []struct{ name, text, code, msg string }{
		{"missing workflow", "steps: [{id: s, kind: workflow}]", spec.CodeMissingField, "needs `workflow`"},
		{"empty workflow", "steps: [{id: s, kind: workflow, workflow: \"\"}]", spec.CodeInvalidValue, "empty name"},
		{"inputs not a mapping", "steps: [{id: s, kind: workflow, workflow: w, inputs: [1]}]", spec.CodeWrongType, "`inputs` must be a mapping"},
		{"unknown template root", "steps: [{id: s, kind: workflow, workflow: w, inputs: {a: \"{{nope.x}}\"}}]", spec.CodeUnknownTemplateVar, "nope"},
		{"no idempotency", "steps: [{id: s, kind: workflow, workflow: w, idempotency_key: auto}]", spec.CodeUnknownField, "idempotency_key"},
		{"args belong to tools", "steps: [{id: s, kind: workflow, workflow: w, args: {}}]", spec.CodeUnknownField, "only valid on tool/tool_remote"},
	} {
		s, err := spec.ParseString(c.text)
		var problems []spec.Problem
		if s != nil {
			problems = s.Problems()
		} else if ve, ok := err.(*spec.ValidationError); ok {
			problems = ve.Problems
		}
		var got []string
		found := false
		for _, p := range problems {
			got = append(got, p.Code+": "+p.Message)
			if p.Code == c.code && strings.Contains(p.Message, c.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: want %s containing %q, got %v", c.name, c.code, c.msg, got)
		}
	}
}
