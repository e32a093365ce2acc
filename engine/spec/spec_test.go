package spec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

func mustParse(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return s
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReferenceExamplesParseAndValidate(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"vendor_intake.yaml", "step_policy.yaml", "approval.yaml", "full_vendor_intake.yaml"} {
		name := name
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := spec.Parse(readTestdata(t, name), spec.Options{Source: name})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if err := s.Validate(); err != nil {
				t.Fatalf("validate: %v", err)
			}
			if len(s.Hash()) != 64 {
				t.Fatalf("hash %q", s.Hash())
			}
		})
	}
}

func TestFullExampleModel(t *testing.T) {
	t.Parallel()
	s, err := spec.Parse(readTestdata(t, "full_vendor_intake.yaml"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "vendor_intake" || len(s.Steps) != 4 || s.StepCount() != 5 {
		t.Fatalf("name %q steps %d count %d", s.Name, len(s.Steps), s.StepCount())
	}
	date, ok := s.Input("date")
	if !ok || !date.Required || date.Type != "string" || date.Format != "date" {
		t.Fatalf("date input %+v", date)
	}
	scope, _ := s.Input("scope")
	if !scope.HasDefault || scope.Default != "all" {
		t.Fatalf("scope input %+v", scope)
	}
	list := s.Steps[0]
	if list.Kind != spec.KindTool || list.Tool != "vendor_intake__list_sftp" || list.Args["date"] != "{{inputs.date}}" {
		t.Fatalf("list %+v", list)
	}
	fe := s.Steps[1]
	if fe.Kind != spec.KindForeach || fe.Items != "$.list.files" || fe.As != "file" || fe.Concurrency != 4 || fe.OnAnyFail != spec.Continue {
		t.Fatalf("foreach %+v", fe)
	}
	exp := fe.Steps[0]
	r := exp.Policy.Retry
	if exp.Policy.TimeoutSecs != 300 || r == nil || r.MaxAttempts != 3 || r.Jitter != 0.25 || strings.Join(r.RetryOn, ",") != "transient,timeout" {
		t.Fatalf("export policy %+v retry %+v", exp.Policy, r)
	}
	if exp.Policy.IdempotencyScope != spec.ScopeWorkflow {
		t.Fatalf("default scope %q", exp.Policy.IdempotencyScope)
	}
	if s.Steps[2].Kind != spec.KindApprove || s.Steps[2].Policy.TimeoutSecs != 3600 {
		t.Fatalf("approve %+v", s.Steps[2])
	}
	push := s.Steps[3]
	if push.Kind != spec.KindToolRemote || push.DCC != "unreal" || push.Tool != "import_assets" {
		t.Fatalf("push %+v", push)
	}
	if s.Find("export") != exp || s.Find("nope") != nil {
		t.Fatal("Find")
	}
}

// problemCase expects exactly one error problem with this code, step id and position.
type problemCase struct {
	name   string
	text   string
	code   string
	stepID string
	line   int
	column int
	inMsg  string
}

func TestValidationCodes(t *testing.T) {
	t.Parallel()
	cases := []problemCase{
		{"no_steps", "name: x\nsteps: []\n", spec.CodeNoSteps, "", 1, 1, "no steps"},
		{"no_steps missing", "name: x\n", spec.CodeNoSteps, "", 1, 1, "no steps"},
		{"duplicate_step_id nested", "steps:\n  - id: a\n    tool: t\n  - id: f\n    kind: foreach\n    items: [1]\n    steps:\n      - id: a\n        tool: t\n",
			spec.CodeDuplicateStepID, "a", 8, 13, "first declared at line 2"},
		{"empty_step_id", "steps:\n  - id: \"\"\n    tool: t\n", spec.CodeEmptyStepID, "", 2, 9, "empty"},
		{"missing id", "steps:\n  - tool: t\n", spec.CodeMissingField, "", 2, 5, "missing field `id`"},
		{"invalid_step_id", "steps:\n  - id: 9lives\n    tool: t\n", spec.CodeInvalidStepID, "9lives", 2, 9, "must start with a letter"},
		{"invalid_tool_name", "steps:\n  - id: a\n    tool: \"maya.export fbx\"\n", spec.CodeInvalidToolName, "a", 3, 11, "^[A-Za-z0-9_-]{1,64}$"},
		// Issue #33 item 6: a name that forges a log line or a terminal escape is refused.
		{"invalid_name newline", "name: \"a\\n2026 run r1 completed\"\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidName, "", 1, 7, "control character U+000A"},
		{"invalid_name escape", "name: \"a\\e]0;pwned\\a\"\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidName, "", 1, 7, "control character U+001B"},
		{"invalid_name NUL", "{\"name\": \"a\\u0000b\", \"steps\": [{\"id\": \"a\", \"tool\": \"t\"}]}", spec.CodeInvalidName, "", 1, 10, "U+0000"},
		{"invalid_name path", "name: ../../etc\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidName, "", 1, 7, "contains '/'"},
		{"invalid_name long", "name: " + strings.Repeat("n", 65) + "\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidName, "", 1, 7, "65 characters; the most is 64"},
		{"invalid_name bidi", "name: \"a\\u202eb\"\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidName, "", 1, 7, "U+202E"},
		{"invalid_name space", "name: \" a\"\nsteps: [{id: a, tool: t}]\n", spec.CodeInvalidName, "", 1, 7, "starts or ends with a space"},
		{"invalid_tool_name long", "steps:\n  - id: a\n    tool: " + strings.Repeat("x", 65) + "\n", spec.CodeInvalidToolName, "a", 3, 11, "not valid"},
		{"invalid_jsonpath", "steps:\n  - id: f\n    kind: foreach\n    items: \"$.[\"\n    steps: [{id: b, tool: t}]\n", spec.CodeInvalidJSONPath, "f", 4, 12, "not a valid JSONPath"},
		{"invalid_policy max_attempts", "steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 0}\n", spec.CodeInvalidPolicy, "a", 4, 27, "max_attempts` must be between 1 and 10000 (1 = no retry); got 0"},
		// Issue #26 item 5: numbers outside a field's range are refused as written, never rounded,
		// clamped or overflowed into "no timeout".
		{"invalid_policy timeout tiny", "steps:\n  - id: a\n    tool: t\n    timeout_secs: 1e-10\n", spec.CodeInvalidPolicy, "a", 4, 19, "`timeout_secs` must be between 0.001 and 31536000 (seconds, 1 ms to 365 days; remove it for no timeout); got 1e-10"},
		{"invalid_policy timeout huge", "steps:\n  - id: a\n    tool: t\n    timeout_secs: 1e21\n", spec.CodeInvalidPolicy, "a", 4, 19, "got 1e21"},
		{"invalid_policy timeout max float", "steps:\n  - id: a\n    tool: t\n    timeout_secs: 1e308\n", spec.CodeInvalidPolicy, "a", 4, 19, "got 1e308"},
		{"invalid_policy max_attempts past int32", "steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 4294967297}\n", spec.CodeInvalidPolicy, "a", 4, 27, "got 4294967297"},
		{"invalid_policy max_attempts 1e18", "steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 1e18}\n", spec.CodeInvalidPolicy, "a", 4, 27, "must be between 1 and 10000 (1 = no retry); got 1e18"},
		{"invalid_policy delay past a day", "steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 2, max_delay_ms: 1e12}\n", spec.CodeInvalidPolicy, "a", 4, 44, "`retry.max_delay_ms` must be between 0 and 86400000 (milliseconds, up to 24 hours); got 1e12"},
		{"invalid_policy ttl overflows a duration", "steps:\n  - id: a\n    tool: t\n    idempotency_key: auto\n    idempotency_ttl_secs: 1e19\n", spec.CodeInvalidPolicy, "a", 5, 27, "got 1e19"},
		{"invalid_value concurrency huge", "steps:\n  - id: f\n    kind: foreach\n    items: [1]\n    concurrency: 9999999999\n    steps: [{id: b, tool: t}]\n", spec.CodeInvalidValue, "f", 5, 18, "`concurrency` must be between 1 and 100000 (1 = one item at a time); got 9999999999"},
		{"invalid_policy delays", "steps:\n  - id: a\n    tool: t\n    retry:\n      max_attempts: 2\n      initial_delay_ms: 5000\n      max_delay_ms: 100\n", spec.CodeInvalidPolicy, "a", 6, 25, "must be ≤"},
		{"invalid_policy timeout zero", "steps:\n  - id: a\n    tool: t\n    timeout_secs: 0\n", spec.CodeInvalidPolicy, "a", 4, 19, "must be between 0.001 and 31536000"},
		{"invalid_policy malformed key", "steps:\n  - id: a\n    tool: t\n    idempotency_key: \"k_{{inputs.x\"\n", spec.CodeInvalidPolicy, "a", 4, 22, "malformed template"},
		{"invalid_template args", "steps:\n  - id: a\n    tool: t\n    args: {p: \"{{ }}\"}\n", spec.CodeInvalidTemplate, "a", 4, 11, "malformed template in `args.p`"},
		{"unknown_template_var args", "steps:\n  - id: a\n    tool: t\n    args: {p: \"{{nope.x}}\"}\n", spec.CodeUnknownTemplateVar, "a", 4, 11, "\"nope\" is not an input"},
		{"unknown_template_var key", "steps:\n  - id: a\n    tool: t\n    idempotency_key: \"{{scene}}\"\n", spec.CodeUnknownTemplateVar, "a", 4, 22, "{{scene}}"},
		{"unknown_template_var prompt", "steps:\n  - id: a\n    kind: approve\n    prompt: \"ok {{inptus.x}}?\"\n", spec.CodeUnknownTemplateVar, "a", 4, 13, "did you mean \"inputs\"?"},
		{"unknown_template_var items", "steps:\n  - id: f\n    kind: foreach\n    items: \"$.lst.files\"\n    steps: [{id: b, tool: t}]\n", spec.CodeUnknownTemplateVar, "f", 4, 12, "\"lst\""},
		{"unknown_template_var steps.x", "steps:\n  - id: a\n    tool: t\n    args: {p: \"{{steps.b.output}}\"}\n", spec.CodeUnknownTemplateVar, "a", 4, 11, "no step has id \"b\""},
		{"unknown_template_var input", "inputs: {date: string}\nsteps:\n  - id: a\n    tool: t\n    args: {p: \"{{inputs.dat}}\"}\n", spec.CodeUnknownTemplateVar, "a", 5, 11, "did you mean \"date\"?"},
		{"unknown_template_var as out of scope", "steps:\n  - id: f\n    kind: foreach\n    items: [1]\n    as: file\n    steps: [{id: b, tool: t}]\n  - id: c\n    tool: t\n    args: {p: \"{{file.path}}\"}\n", spec.CodeUnknownTemplateVar, "c", 9, 11, "\"file\""},
		{"unknown_field", "steps:\n  - id: a\n    tol: t\n    tool: t\n", spec.CodeUnknownField, "a", 3, 5, "did you mean \"tool\"?"},
		{"unknown_field other kind", "steps:\n  - id: a\n    tool: t\n    items: [1]\n", spec.CodeUnknownField, "a", 4, 5, "only valid on foreach steps"},
		{"unknown_field without kind", "steps:\n  - id: a\n    tol: t\n", spec.CodeUnknownField, "a", 3, 5, "did you mean \"tool\"?"},
		{"unknown_field top", "nme: x\nsteps: [{id: a, tool: t}]\n", spec.CodeUnknownField, "", 1, 1, "did you mean \"name\"?"},
		{"unknown_field retry", "steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 2, backof: fixed}\n", spec.CodeUnknownField, "a", 4, 30, "did you mean \"backoff\"?"},
		{"wrong_type", "steps:\n  - id: a\n    tool: t\n    timeout_secs: soon\n", spec.CodeWrongType, "a", 4, 19, "must be a number"},
		{"wrong_type id", "steps:\n  - id: 12\n    tool: t\n", spec.CodeWrongType, "", 2, 9, "quote it"},
		{"wrong_type steps", "steps: {a: 1}\n", spec.CodeWrongType, "", 1, 8, "must be a list of steps"},
		{"reserved_step_id", "steps:\n  - id: inputs\n    tool: t\n", spec.CodeReservedStepID, "inputs", 2, 9, "reserved template root"},
		{"reserved_step_id input clash", "inputs: {a: string}\nsteps:\n  - id: a\n    tool: t\n", spec.CodeReservedStepID, "a", 3, 9, "also an input name"},
		{"unknown_dependency", "steps:\n  - id: a\n    tool: t\n  - id: b\n    tool: t\n    depends_on: [c]\n", spec.CodeUnknownDependency, "b", 6, 17, "\"c\""},
		{"cycle", "steps:\n  - id: a\n    tool: t\n    depends_on: [c]\n  - id: b\n    tool: t\n    depends_on: [a]\n  - id: c\n    tool: t\n    depends_on: [b]\n", spec.CodeCycle, "a", 4, 17, "a → b → c → a"},
		{"cycle self", "steps:\n  - id: a\n    tool: t\n    depends_on: [a]\n", spec.CodeCycle, "a", 4, 17, "a → a"},
		{"missing_field tool", "steps:\n  - id: r\n    kind: tool_remote\n    dcc: unreal\n", spec.CodeMissingField, "r", 2, 5, "needs `tool`"},
		{"missing_field kind", "steps:\n  - id: a\n    args: {}\n", spec.CodeMissingField, "a", 2, 5, "missing field `kind`"},
		{"missing_field max_attempts", "steps:\n  - id: a\n    tool: t\n    retry: {backoff: fixed}\n", spec.CodeMissingField, "a", 4, 12, "needs `max_attempts`"},
		{"missing_field items", "steps:\n  - id: f\n    kind: foreach\n    steps: [{id: b, tool: t}]\n", spec.CodeMissingField, "f", 2, 5, "needs `items`"},
		{"unknown_kind", "steps:\n  - id: a\n    kind: toool\n", spec.CodeUnknownKind, "a", 3, 11, "did you mean \"tool\"?"},
		{"invalid_value concurrency", "steps:\n  - id: f\n    kind: foreach\n    items: [1]\n    concurrency: 0\n    steps: [{id: b, tool: t}]\n", spec.CodeInvalidValue, "f", 5, 18, "concurrency"},
		{"invalid_value on_any_fail", "steps:\n  - id: p\n    kind: parallel\n    on_any_fail: ignore\n    steps: [{id: b, tool: t}]\n", spec.CodeInvalidValue, "p", 4, 18, "\"abort\" or \"continue\""},
		{"no_steps foreach", "steps:\n  - id: f\n    kind: foreach\n    items: [1]\n    steps: []\n", spec.CodeNoSteps, "f", 5, 12, "foreach step needs"},
		{"parse_error", "steps:\n  - id: a\n    tool: \"x\n", spec.CodeParseError, "", 3, 0, "malformed YAML"},
		{"duplicate key", "steps:\n  - id: a\n    tool: t\n    tool: u\n", spec.CodeParseError, "", 4, 5, "duplicate key \"tool\""},
		{"not_a_mapping", "- a\n- b\n", spec.CodeNotAMapping, "", 1, 1, "must be a mapping"},
		{"empty", "  \n", spec.CodeNotAMapping, "", 1, 1, "empty"},
	}
	for _, tc := range cases {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ps := allProblems(t, tc.text)
			var got []spec.Problem
			for _, p := range ps {
				if p.Code == tc.code {
					got = append(got, p)
				}
			}
			if len(got) != 1 {
				t.Fatalf("want exactly one %s problem, got %d in %+v", tc.code, len(got), ps)
			}
			p := got[0]
			if p.StepID != tc.stepID || p.Line != tc.line || (tc.column != 0 && p.Column != tc.column) {
				t.Errorf("got step %q at %d:%d, want step %q at %d:%d (%s)", p.StepID, p.Line, p.Column, tc.stepID, tc.line, tc.column, p.Message)
			}
			if !strings.Contains(p.Message, tc.inMsg) {
				t.Errorf("message %q does not contain %q", p.Message, tc.inMsg)
			}
			if tc.stepID != "" && !strings.Contains(p.Message, `"`+tc.stepID+`"`) {
				t.Errorf("message %q does not name step %q", p.Message, tc.stepID)
			}
			if p.Severity != spec.SeverityError {
				t.Errorf("severity %q", p.Severity)
			}
		})
	}
}

// allProblems returns every problem of text, whether Parse or Validate reports them.
func allProblems(t *testing.T, text string) []spec.Problem {
	t.Helper()
	s, err := spec.ParseString(text)
	if err == nil {
		err = s.Validate()
	}
	var ve *spec.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want a *ValidationError, got %v", err)
	}
	return ve.Problems
}

func TestThreeMistakesReportedTogether(t *testing.T) {
	t.Parallel()
	text := `name: three
steps:
  - id: a
    tol: t
    tool: t
  - id: b
    tool: t
    retry: {max_attempts: 0}
  - id: c
    tool: t
    depends_on: [c]
`
	ps := allProblems(t, text)
	codes := map[string]int{}
	for _, p := range ps {
		codes[p.Code]++
	}
	if codes[spec.CodeUnknownField] != 1 || codes[spec.CodeInvalidPolicy] != 1 || codes[spec.CodeCycle] != 1 || len(ps) != 3 {
		t.Fatalf("want unknown_field, invalid_policy and cycle, got %+v", ps)
	}
	// Problems are sorted by position.
	if ps[0].Line != 4 || ps[1].Line != 8 || ps[2].Line != 11 {
		t.Fatalf("order: %+v", ps)
	}
	// Semantic-only mistakes still parse, so a view can be built, and Validate reports them all.
	s := mustParse(t, strings.Replace(text, "    tol: t\n", "", 1))
	if got := len(s.Problems()); got != 2 {
		t.Fatalf("want 2 semantic problems, got %+v", s.Problems())
	}
	err := s.Validate()
	if err == nil || !strings.Contains(err.Error(), "2 problems") || !strings.Contains(err.Error(), `(id "b")`) {
		t.Fatalf("validate: %v", err)
	}
}

func TestJitterClampedWithWarning(t *testing.T) {
	t.Parallel()
	s := mustParse(t, "steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 2, jitter: 1.5}\n")
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if j := s.Steps[0].Policy.Retry.Jitter; j != 1 {
		t.Fatalf("jitter %v", j)
	}
	w := s.Warnings()
	if len(w) != 1 || w[0].Code != spec.CodeJitterClamped || w[0].Severity != spec.SeverityWarning || w[0].Line != 4 {
		t.Fatalf("warnings %+v", w)
	}
	neg := mustParse(t, "steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: 2, jitter: -0.5}\n")
	if j := neg.Steps[0].Policy.Retry.Jitter; j != 0 {
		t.Fatalf("jitter %v", j)
	}
}

func TestTTLZeroNormalised(t *testing.T) {
	t.Parallel()
	a := mustParse(t, "steps:\n  - id: a\n    tool: t\n    idempotency_key: auto\n    idempotency_ttl_secs: 0\n")
	b := mustParse(t, "steps:\n  - id: a\n    tool: t\n    idempotency_key: auto\n")
	if a.Steps[0].Policy.IdempotencyTTLSecs != 0 || a.Hash() != b.Hash() {
		t.Fatalf("ttl 0 not normalised: %s vs %s", a.Canonical(), b.Canonical())
	}
	if strings.Contains(string(a.Canonical()), "ttl") {
		t.Fatalf("canonical mentions ttl: %s", a.Canonical())
	}
}

func TestCanonicalFormAndHashAreStable(t *testing.T) {
	t.Parallel()
	y := mustParse(t, `
steps:
  - tool: maya__export_fbx
    id: export
    args: {b: 2, a: "x<y&z"}
    retry: {max_attempts: 3}
name: n
`)
	j, err := spec.Parse([]byte(`{"name":"n","steps":[{"id":"export","kind":"tool","tool":"maya__export_fbx","args":{"a":"x<y&z","b":2},
		"retry":{"max_attempts":3,"backoff":"exponential","initial_delay_ms":500,"max_delay_ms":10000,"jitter":0}}]}`), spec.Options{Format: spec.FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	if y.Hash() != j.Hash() || string(y.Canonical()) != string(j.Canonical()) {
		t.Fatalf("yaml and json forms differ:\n%s\n%s", y.Canonical(), j.Canonical())
	}
	want := `{"description":"","inputs":{},"name":"n","steps":[{"args":{"a":"x<y&z","b":2},"id":"export","kind":"tool","retry":{"backoff":"exponential","initial_delay_ms":500,"jitter":0,"max_attempts":3,"max_delay_ms":10000,"retry_on":null},"tool":"maya__export_fbx"}]}`
	if string(y.Canonical()) != want {
		t.Fatalf("canonical:\n got %s\nwant %s", y.Canonical(), want)
	}
	// The canonical form parses back to the same canonical form (a fixed point).
	again, err := spec.Parse(y.Canonical(), spec.Options{})
	if err != nil || string(again.Canonical()) != want {
		t.Fatalf("round trip: %v %s", err, again.Canonical())
	}
	// Any change of meaning changes the hash.
	other := mustParse(t, "name: n\nsteps: [{id: export, tool: maya__export_fbx, args: {a: \"x<y&z\", b: 3}, retry: {max_attempts: 3}}]\n")
	if other.Hash() == y.Hash() {
		t.Fatal("hash ignores args")
	}
}

func TestCanonicalRoundTripEveryKind(t *testing.T) {
	t.Parallel()
	s, err := spec.Parse(readTestdata(t, "full_vendor_intake.yaml"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(s.Canonical(), &doc); err != nil {
		t.Fatal(err)
	}
	again, err := spec.Parse(s.Canonical(), spec.Options{Format: spec.FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash() != s.Hash() {
		t.Fatalf("hash changed on round trip:\n%s\n%s", s.Canonical(), again.Canonical())
	}
	branch := mustParse(t, `
steps:
  - id: qc
    tool: t
  - id: gate
    kind: branch
    condition: "$.qc.passed"
    then: [{id: ok, tool: t}]
  - id: par
    kind: parallel
    depends_on: []
    steps: [{id: p1, tool: t}, {id: p2, tool: t}]
`)
	c := string(branch.Canonical())
	for _, want := range []string{`"on":"$.qc.passed"`, `"else":[]`, `"depends_on":[]`, `"on_any_fail":"abort"`} {
		if !strings.Contains(c, want) {
			t.Errorf("canonical %s lacks %s", c, want)
		}
	}
	if _, err := spec.Parse([]byte(c), spec.Options{}); err != nil {
		t.Fatal(err)
	}
}

func TestDependencies(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
steps:
  - {id: a, tool: t}
  - {id: b, tool: t, depends_on: [a]}
  - {id: c, tool: t, depends_on: [a]}
  - {id: d, tool: t, depends_on: [c, b, b]}
  - {id: e, tool: t}
  - {id: f, tool: t, depends_on: []}
`)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	got := spec.Dependencies(s.Steps)
	want := [][]int{nil, {0}, {0}, {1, 2}, {3}, nil}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if len(got[i]) != len(want[i]) {
			t.Fatalf("deps[%d] = %v, want %v", i, got[i], want[i])
		}
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Fatalf("deps[%d] = %v, want %v", i, got[i], want[i])
			}
		}
	}
}

func TestImplicitEdgeCycleExplained(t *testing.T) {
	t.Parallel()
	ps := allProblems(t, "steps:\n  - {id: a, tool: t, depends_on: [b]}\n  - {id: b, tool: t}\n")
	if len(ps) != 1 || ps[0].Code != spec.CodeCycle || !strings.Contains(ps[0].Message, "runs after the step before it") {
		t.Fatalf("%+v", ps)
	}
}

func TestTemplateRoots(t *testing.T) {
	t.Parallel()
	ok := `
inputs: {date: string}
steps:
  - id: list
    tool: t
    args: {a: "{{inputs.date}}", b: "{{date}}", c: "{{env.HOME}}", d: "{{run.id}}", e: "{{trigger.payload.x}}", f: "{{item}}"}
  - id: each
    kind: foreach
    items: "{{list.files}}"
    as: file
    steps:
      - id: inner
        kind: foreach
        items: "$.file.children"
        steps:
          - id: leaf
            tool: t
            args: {p: "{{file.path}}", q: "{{item.name}}", r: "{{steps.list.output}}", s: "{{list.files[0]}}"}
            idempotency_key: "leaf_{{file.path}}_{{item.name}}"
`
	s := mustParse(t, ok)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestInputDeclarations(t *testing.T) {
	t.Parallel()
	ps := allProblems(t, `
inputs:
  a: {type: strng}
  b: {type: integer, default: 1.5}
  c: {type: string, enum: [x, y], default: z}
  steps: {type: string}
steps: [{id: s, tool: t}]
`)
	codes := []string{}
	for _, p := range ps {
		codes = append(codes, p.Code)
	}
	if strings.Join(codes, ",") != "invalid_value,invalid_value,invalid_value,reserved_step_id" {
		t.Fatalf("%v\n%+v", codes, ps)
	}
	if !strings.Contains(ps[0].Message, `did you mean "string"?`) {
		t.Fatalf("%s", ps[0].Message)
	}
	in := spec.Input{Name: "d", Type: "string", Format: "date"}
	if spec.CheckInputValue(in, "2026-03-08") != nil || spec.CheckInputValue(in, "03/08/2026") == nil {
		t.Fatal("date format")
	}
}

func TestFormatDetection(t *testing.T) {
	t.Parallel()
	if _, err := spec.Parse([]byte(`{"steps": [{"id": "a", "tool": "t"}],}`), spec.Options{}); err == nil ||
		!strings.Contains(err.Error(), "malformed JSON") {
		t.Fatalf("trailing comma in JSON: %v", err)
	}
	if _, err := spec.Parse([]byte("steps: [{id: a, tool: t}]"), spec.Options{Format: spec.FormatJSON}); err == nil {
		t.Fatal("YAML accepted as JSON")
	}
	if _, err := spec.Parse([]byte("steps: [{id: a, tool: t}]"), spec.Options{Format: "xml"}); err == nil {
		t.Fatal("unknown format accepted")
	}
}

func TestWalkOrderAndParents(t *testing.T) {
	t.Parallel()
	s, err := spec.Parse(readTestdata(t, "full_vendor_intake.yaml"), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	s.Walk(func(st *spec.Step, parents []*spec.Step) bool {
		id := st.ID
		if len(parents) > 0 {
			id = parents[len(parents)-1].ID + "/" + id
		}
		ids = append(ids, id)
		return true
	})
	if got := strings.Join(ids, " "); got != "list per_file per_file/export human_gate push" {
		t.Fatal(got)
	}
}

func TestValidationErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := spec.Parse([]byte("steps:\n  - id: export\n    tool: t\n    retry: {max_attempts: 3, bakoff: x}\n"), spec.Options{Source: "flow.yaml"})
	if err == nil {
		t.Fatal("no error")
	}
	want := "flow.yaml:4:30: steps[0] (id \"export\"): unknown field \"bakoff\"; did you mean \"backoff\"?"
	if err.Error() != want {
		t.Fatalf("got  %s\nwant %s", err.Error(), want)
	}
}

func TestJSONSpecsAcceptEveryValidJSONString(t *testing.T) {
	t.Parallel()
	// yaml.v3 rejects these valid JSON strings; JSON specs are read by encoding/json instead.
	text := `{"name": "flow", "description": "a\/b \ud83d\ude00 \u007f\u0085 end", "steps": [{"id": "a", "tool": "t", "args": {"n": 12345678901, "f": 1.5e3, "z": null, "b": false}}]}`
	s, err := spec.Parse([]byte(text), spec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Description != "a/b 😀 \u007f\u0085 end" {
		t.Fatalf("description %q", s.Description)
	}
	args := s.Steps[0].Args
	if args["n"] != float64(12345678901) || args["f"] != float64(1500) || args["z"] != nil || args["b"] != false {
		t.Fatalf("args %#v", args)
	}
	// The canonical form (which writes such characters raw) reads back to itself.
	again, err := spec.Parse(s.Canonical(), spec.Options{})
	if err != nil || again.Hash() != s.Hash() {
		t.Fatalf("round trip: %v", err)
	}
	// Positions are kept for JSON too.
	_, err = spec.Parse([]byte("{\n  \"steps\": [\n    {\"id\": \"a\", \"tol\": \"t\"}\n  ]\n}"), spec.Options{})
	var ve *spec.ValidationError
	if !errors.As(err, &ve) {
		t.Fatal(err)
	}
	found := false
	for _, p := range ve.Problems {
		if p.Code == spec.CodeUnknownField && p.Line == 3 && p.Column == 17 {
			found = true
		}
	}
	if !found {
		t.Fatalf("no unknown_field at 3:17: %+v", ve.Problems)
	}
}

func TestNumbersBeyondInt64(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		`{"steps": [{"id": "a", "tool": "t", "args": {"n": 12345678901234567890, "h": 0.1}}]}`,
		"steps: [{id: a, tool: t, args: {n: 12345678901234567890, h: 0x1F, u: 1_000}}]",
	} {
		s, err := spec.ParseString(text)
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		// Issue #26 item 4: an integer beyond 2^53 is kept exactly, not rounded to a float64.
		if n := s.Steps[0].Args["n"]; n != json.Number("12345678901234567890") {
			t.Fatalf("n = %#v", n)
		}
		if c := string(s.Canonical()); !strings.Contains(c, `"n":12345678901234567890`) {
			t.Fatalf("canonical JSON rounds the integer: %s", c)
		}
	}
	s := mustParse(t, "steps: [{id: a, tool: t, args: {h: 0x1F, u: 1_000}}]")
	if s.Steps[0].Args["h"] != float64(31) {
		t.Fatalf("hex %v", s.Steps[0].Args["h"])
	}
	if _, err := spec.ParseString("steps: [{id: a, tool: t, args: {x: .inf}}]"); err == nil {
		t.Fatal("infinity accepted")
	}
}

func TestParallelChildrenAreBranches(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
steps:
  - id: p
    kind: parallel
    steps:
      - {id: a, tool: t, depends_on: [c]}
      - {id: b, tool: t}
      - {id: c, tool: t}
`)
	if err := s.Validate(); err != nil {
		t.Fatalf("a parallel child waiting for a later sibling is not a cycle: %v", err)
	}
	deps := spec.StepListDependencies(s.Steps[0], s.Steps[0].Steps)
	if len(deps[0]) != 1 || deps[0][0] != 2 || deps[1] != nil || deps[2] != nil {
		t.Fatalf("deps %v", deps)
	}
	if top := spec.StepListDependencies(nil, s.Steps); len(top) != 1 || top[0] != nil {
		t.Fatalf("top deps %v", top)
	}
	ps := allProblems(t, "steps:\n  - id: p\n    kind: parallel\n    steps:\n      - {id: a, tool: t, depends_on: [b]}\n      - {id: b, tool: t, depends_on: [a]}\n")
	if len(ps) != 1 || ps[0].Code != spec.CodeCycle {
		t.Fatalf("%+v", ps)
	}
}

func TestOneProblemPerMistake(t *testing.T) {
	t.Parallel()
	for text, code := range map[string]string{
		"steps:\n  - id: f\n    kind: foreach\n    items: [1]\n    concurrency: 2.5\n    steps: [{id: b, tool: t}]\n": spec.CodeWrongType,
		"steps:\n  - id: a\n    tool: t\n    retry: {max_attempts: \"3\"}\n":                                          spec.CodeWrongType,
		"steps:\n  - id: a\n    tool: t\n    idempotency_ttl_secs: 60\n":                                              spec.CodeInvalidPolicy,
	} {
		ps := allProblems(t, text)
		if len(ps) != 1 || ps[0].Code != code {
			t.Errorf("%q: want one %s, got %+v", text, code, ps)
		}
	}
}

// Thousands of unknown names: every one is reported, the first ones with a "did you mean", and
// the suggestions' work is bounded (BenchmarkValidateUnknownNames measures the cost per step).
func TestManyUnknownNamesAreAllReported(t *testing.T) {
	t.Parallel()
	const n = 3000
	var b strings.Builder
	b.WriteString("steps:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {id: step%d, tool: t, args: {x: \"{{stepx%d}}\"}, depends_on: [stepy%d]}\n", i, i, i)
	}
	s, err := spec.Parse([]byte(b.String()), spec.Options{})
	if err == nil {
		err = s.Validate()
	}
	var ve *spec.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("%v", err)
	}
	vars, deps, hinted := 0, 0, 0
	for _, p := range ve.Problems {
		switch p.Code {
		case spec.CodeUnknownTemplateVar:
			vars++
		case spec.CodeUnknownDependency:
			deps++
		}
		if strings.Contains(p.Message, "did you mean") {
			hinted++
		}
	}
	if vars != n || deps != n || hinted == 0 || !strings.Contains(ve.Problems[0].Message, `did you mean "step`) {
		t.Fatalf("%d unknown variables, %d unknown dependencies, %d hints; first: %s", vars, deps, hinted, ve.Problems[0].Message)
	}
}
