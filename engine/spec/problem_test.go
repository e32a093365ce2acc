package spec_test

import (
	"encoding/json"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/problem"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The shared YAML decoder reports spec's codes: a spec problem from the decoder and one from
// validation use the same strings.
func TestDecoderCodesAreSpecCodes(t *testing.T) {
	t.Parallel()
	for spc, dec := range map[string]string{
		spec.CodeParseError: problem.CodeParseError, spec.CodeTooLarge: problem.CodeTooLarge,
		spec.CodeWrongType: problem.CodeWrongType, spec.CodeUnknownField: problem.CodeUnknownField,
		spec.SeverityError: problem.SeverityError, spec.SeverityWarning: problem.SeverityWarning,
	} {
		if spc != dec {
			t.Errorf("spec has %q where the decoder has %q", spc, dec)
		}
	}
}

// A spec problem's JSON form (the C ABI's and MCP's "problems") is what it was before spec and
// schedule shared one Problem type: no file or schedule_id, severity always present.
func TestSpecProblemJSONShape(t *testing.T) {
	t.Parallel()
	_, err := spec.ParseString("steps:\n  - id: a\n    tool: t\n    retyr: {}\n")
	ve, ok := err.(*spec.ValidationError)
	if !ok || len(ve.Problems) != 1 {
		t.Fatalf("err = %v", err)
	}
	b, _ := json.Marshal(ve.Problems[0])
	want := `{"code":"unknown_field","severity":"error","message":"steps[0] (id \"a\"): unknown field \"retyr\"; did you mean \"retry\"?",` +
		`"step_id":"a","path":"steps[0].retyr","line":4,"column":5,"hint":"did you mean \"retry\"?"}`
	if string(b) != want {
		t.Fatalf("JSON =\n %s\nwant\n %s", b, want)
	}
	if got := ve.Problems[0].String(); got != `4:5: steps[0] (id "a"): unknown field "retyr"; did you mean "retry"?` {
		t.Fatalf("String() = %q", got)
	}
}
