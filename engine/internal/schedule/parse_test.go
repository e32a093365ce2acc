package schedule

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

const referenceFile = `# schedules.yaml (sibling of SKILL.md)
schedules:
  - id: nightly_cleanup
    workflow: scene_cleanup          # WorkflowSpec id
    inputs:
      scope: all-scenes
    trigger:
      kind: cron
      expression: "0 0 3 * * *"      # sec min hour day month weekday
      timezone: UTC
      jitter_secs: 120
    enabled: true
    max_concurrent: 1

  - id: on_upload
    workflow: validate_upload
    inputs:
      path: "{{trigger.payload.file_path}}"
    trigger:
      kind: webhook
      path: /webhooks/upload
      secret_env: UPLOAD_WEBHOOK_SECRET
    enabled: true
`

func TestParseReferenceExample(t *testing.T) {
	t.Parallel()
	specs, err := Parse([]byte(referenceFile), ParseOptions{File: "skill/schedules.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Spec{
		{ID: "nightly_cleanup", Workflow: "scene_cleanup", Inputs: map[string]any{"scope": "all-scenes"}, Enabled: true, MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindCron, Expression: "0 0 3 * * *", Timezone: "UTC", JitterSecs: 120}, Source: "skill/schedules.yaml", Line: 3},
		{ID: "on_upload", Workflow: "validate_upload", Inputs: map[string]any{"path": "{{trigger.payload.file_path}}"}, Enabled: true, MaxConcurrent: 1,
			Trigger: Trigger{Kind: KindWebhook, Path: "/webhooks/upload", SecretEnv: "UPLOAD_WEBHOOK_SECRET"}, Source: "skill/schedules.yaml", Line: 15},
	}
	if !reflect.DeepEqual(specs, want) {
		t.Errorf("got  %+v\nwant %+v", specs, want)
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	specs, err := Parse([]byte(`
schedules:
  - id: a
    workflow: w
    trigger: {kind: cron, expression: "@daily"}
  - id: b
    workflow: w
    enabled: false
    max_concurrent: 0
    catchup: true
    trigger: {kind: interval, every: 1h30m}
`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := specs[0], specs[1]
	if !a.Enabled || a.MaxConcurrent != 1 || a.Catchup || a.Trigger.Timezone != "UTC" || a.Inputs != nil {
		t.Errorf("defaults not applied: %+v", a)
	}
	if b.Enabled || b.MaxConcurrent != 0 || !b.Catchup || b.Trigger.Every != "1h30m" {
		t.Errorf("explicit values lost: %+v", b)
	}
}

func TestParseEmpty(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"", "\n# only a comment\n", "schedules:\n", "schedules: []\n", "~\n"} {
		specs, err := Parse([]byte(text), ParseOptions{})
		if err != nil || len(specs) != 0 {
			t.Errorf("Parse(%q) = %v, %v; want no schedules and no error", text, specs, err)
		}
	}
}

func TestParseJSON(t *testing.T) {
	t.Parallel()
	specs, err := Parse([]byte(`{"schedules": [{"id": "j", "workflow": "w", "inputs": {"n": "{{trigger.payload.n}}", "k": 3},
		"trigger": {"kind": "webhook", "path": "/hooks/j"}}]}`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if specs[0].Inputs["k"] != 3.0 || specs[0].Trigger.Path != "/hooks/j" || !specs[0].Enabled {
		t.Errorf("got %+v", specs[0])
	}
}

// wrap puts one schedule's body (indented by 4) in a file; its first line is line 3.
func wrap(body string) string {
	return "schedules:\n  - id: s1\n" + body
}

func TestParseProblems(t *testing.T) {
	t.Parallel()
	catalog := func(name string) bool { return name == "w" || name == "scene_cleanup" }
	tests := []struct {
		name string
		text string
		code string
		line int
		msg  string // substring of the message
	}{
		{"five-field cron", wrap("    workflow: w\n    trigger: {kind: cron, expression: \"0 3 * * *\"}\n"),
			CodeInvalidCron, 4, `schedule "s1": ` + "`trigger.expression` \"0 3 * * *\" has 5 fields; schedules need 6, with seconds first; use \"0 0 3 * * *\""},
		{"bad timezone", wrap("    workflow: w\n    trigger:\n      kind: cron\n      expression: \"@daily\"\n      timezone: Europe/Pariss\n"),
			CodeInvalidTimezone, 7, `"Europe/Pariss" is not a known time zone; use an IANA time zone name`},
		{"unknown workflow", wrap("    workflow: scene_cleanp\n    trigger: {kind: interval, every: 1m}\n"),
			CodeUnknownWorkflow, 3, "`workflow` \"scene_cleanp\" is not in the workflow catalog"},
		{"webhook path without slash", wrap("    workflow: w\n    trigger: {kind: webhook, path: hooks/x}\n"),
			CodeInvalidWebhookPath, 4, `does not start with "/"; use "/hooks/x"`},
		{"webhook path not clean", wrap("    workflow: w\n    trigger: {kind: webhook, path: /hooks//x/}\n"),
			CodeInvalidWebhookPath, 4, `use "/hooks/x"`},
		{"webhook path query", wrap("    workflow: w\n    trigger: {kind: webhook, path: \"/h?x=1\"}\n"),
			CodeInvalidWebhookPath, 4, `query or fragment`},
		{"interval not a duration", wrap("    workflow: w\n    trigger: {kind: interval, every: 1d}\n"),
			CodeInvalidInterval, 4, `"1d" is not a duration`},
		{"interval number", wrap("    workflow: w\n    trigger: {kind: interval, every: 900}\n"),
			CodeInvalidInterval, 4, `is the number 900, not a duration; write a Go duration with a unit, e.g. every: "900s"`},
		{"interval zero", wrap("    workflow: w\n    trigger: {kind: interval, every: 0s}\n"),
			CodeInvalidInterval, 4, "not positive"},
		{"unknown field did you mean", wrap("    workflow: w\n    max_concurent: 2\n    trigger: {kind: interval, every: 1m}\n"),
			CodeUnknownField, 4, `unknown field "max_concurent"; did you mean "max_concurrent"?`},
		{"field of another trigger kind", wrap("    workflow: w\n    trigger: {kind: interval, every: 1m, timezone: UTC}\n"),
			CodeUnknownField, 4, "`timezone` is only valid on cron triggers"},
		{"unknown top-level field", "schedule:\n  - id: x\n", CodeUnknownField, 1, `did you mean "schedules"?`},
		{"enabled not a bool", wrap("    workflow: w\n    enabled: yes\n    trigger: {kind: interval, every: 1m}\n"),
			CodeWrongType, 4, "`enabled` must be true or false; got the string \"yes\""},
		{"max_concurrent not a number", wrap("    workflow: w\n    max_concurrent: two\n    trigger: {kind: interval, every: 1m}\n"),
			CodeWrongType, 4, "`max_concurrent` must be a whole number"},
		{"max_concurrent beyond an int", wrap("    workflow: w\n    max_concurrent: 1e20\n    trigger: {kind: interval, every: 1m}\n"),
			CodeInvalidValue, 4, "schedule \"s1\": `max_concurrent` is 1e20, beyond any value it accepts; use a number from -2147483648 to 2147483647"},
		{"jitter beyond an int", wrap("    workflow: w\n    trigger: {kind: cron, expression: \"@daily\", jitter_secs: 4294967296}\n"),
			CodeInvalidValue, 4, "`trigger.jitter_secs` is 4294967296, beyond any value it accepts"},
		{"id not a string", "schedules:\n  - id: 12\n    workflow: w\n    trigger: {kind: interval, every: 1m}\n",
			CodeWrongType, 2, "schedules[0]: `id` must be a string; got the number 12; quote it: id: \"12\""},
		{"trigger field not a string", wrap("    workflow: w\n    trigger: {kind: cron, expression: 5}\n"),
			CodeWrongType, 4, "schedule \"s1\": `trigger.expression` must be a string; got the number 5; quote it: expression: \"5\""},
		{"duplicate key in trigger", wrap("    workflow: w\n    trigger: {kind: interval, every: 1m, every: 2m}\n"),
			CodeParseError, 4, "schedule \"s1\": duplicate key \"every\"; keep one of them"},
		{"input NaN", wrap("    workflow: w\n    inputs: {x: .nan}\n    trigger: {kind: interval, every: 1m}\n"),
			CodeWrongType, 4, "schedule \"s1\": `inputs.x`: \".nan\" is not a JSON number (NaN and infinities are not allowed); quote it to pass a string"},
		{"schedules not a list", "schedules: {id: x}\n", CodeWrongType, 1, "`schedules` must be a list"},
		{"inputs not a mapping", wrap("    workflow: w\n    inputs: [1]\n    trigger: {kind: interval, every: 1m}\n"),
			CodeWrongType, 4, "`inputs` must be a mapping"},
		{"missing workflow", wrap("    trigger: {kind: interval, every: 1m}\n"),
			CodeMissingField, 2, "missing field `workflow`"},
		{"missing trigger", wrap("    workflow: w\n"), CodeMissingField, 2, "missing field `trigger`"},
		{"missing expression", wrap("    workflow: w\n    trigger: {kind: cron}\n"), CodeMissingField, 4, "missing field `trigger.expression`"},
		{"missing kind", wrap("    workflow: w\n    trigger: {every: 1m}\n"), CodeMissingField, 4, "missing field `trigger.kind`"},
		{"missing id", "schedules:\n  - workflow: w\n    trigger: {kind: interval, every: 1m}\n", CodeMissingField, 2, "schedules[0]: missing field `id`"},
		{"unknown kind", wrap("    workflow: w\n    trigger: {kind: crn, expression: \"@daily\"}\n"), CodeUnknownKind, 4, `unknown trigger kind "crn"; did you mean "cron"?`},
		{"invalid id", "schedules:\n  - id: \"a b\"\n    workflow: w\n    trigger: {kind: interval, every: 1m}\n", CodeInvalidID, 2, "not a valid schedule id"},
		{"negative max_concurrent", wrap("    workflow: w\n    max_concurrent: -1\n    trigger: {kind: interval, every: 1m}\n"),
			CodeInvalidValue, 4, "`max_concurrent` is -1"},
		{"negative jitter", wrap("    workflow: w\n    trigger: {kind: cron, expression: \"@daily\", jitter_secs: -3}\n"),
			CodeInvalidValue, 4, "`trigger.jitter_secs` is -3"},
		{"catchup on webhook", wrap("    workflow: w\n    catchup: true\n    trigger: {kind: webhook, path: /x}\n"),
			CodeInvalidValue, 4, "`catchup` applies to cron and interval triggers"},
		{"secret_env name", wrap("    workflow: w\n    trigger: {kind: webhook, path: /x, secret_env: \"MY-SECRET\"}\n"),
			CodeInvalidValue, 4, "not an environment variable name"},
		{"malformed template", wrap("    workflow: w\n    inputs:\n      path: \"{{trigger.payload.file\"\n    trigger: {kind: webhook, path: /x}\n"),
			CodeInvalidTemplate, 5, "`inputs.path` \"{{trigger.payload.file\" is not a valid template"},
		{"template root", wrap("    workflow: w\n    inputs:\n      nested:\n        - \"{{inputs.date}}\"\n    trigger: {kind: webhook, path: /x}\n"),
			CodeUnknownTemplateVar, 6, "`inputs.nested[0]` uses {{inputs.date}}: \"inputs\" is not available when a schedule fires"},
		{"template root typo", wrap("    workflow: w\n    inputs: {p: \"{{triger.payload}}\"}\n    trigger: {kind: webhook, path: /x}\n"),
			CodeUnknownTemplateVar, 4, `did you mean "trigger"?`},
		{"template trigger field", wrap("    workflow: w\n    inputs: {p: \"{{trigger.paylod.x}}\"}\n    trigger: {kind: webhook, path: /x}\n"),
			CodeUnknownTemplateVar, 4, "did you mean {{trigger.payload}}?"},
		{"duplicate key", wrap("    workflow: w\n    workflow: w\n    trigger: {kind: interval, every: 1m}\n"), CodeParseError, 4, `duplicate key "workflow"`},
		{"malformed yaml", "schedules:\n  - id: [\n", CodeParseError, 2, "malformed YAML"},
		{"not utf-8", "schedules:\n  - id: \xff\n", CodeParseError, 2, "not valid UTF-8"},
		{"not a mapping", "- id: x\n", CodeWrongType, 1, "must be a mapping with a `schedules:` list"},
		{"too deep", "schedules: " + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "\n", CodeTooLarge, 0, "nests 100 levels"},
		{"duplicate id", "schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: interval, every: 1m}\n  - id: a\n    workflow: w\n    trigger: {kind: interval, every: 2m}\n",
			CodeDuplicateID, 5, `id "a" is already used by the schedule at f.schedules.yaml:2:9`},
		{"duplicate webhook path", "schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: webhook, path: /x}\n  - id: b\n    enabled: false\n    workflow: w\n    trigger: {kind: webhook, path: /x}\n",
			CodeDuplicateWebhookPath, 8, `webhook path "/x" is already used by schedule "a" at f.schedules.yaml:4:36`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			specs, err := Parse([]byte(tc.text), ParseOptions{File: "f.schedules.yaml", Workflows: catalog})
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse = %v, %v; want a *ValidationError", specs, err)
			}
			if len(ve.Problems) != 1 {
				t.Fatalf("want exactly one problem, got:\n%v", err)
			}
			p := ve.Problems[0]
			if p.Code != tc.code || p.Line != tc.line || !strings.Contains(p.Message, tc.msg) {
				t.Errorf("got %s at line %d: %s\nwant %s at line %d containing %q", p.Code, p.Line, p.Message, tc.code, tc.line, tc.msg)
			}
			if p.File != "f.schedules.yaml" {
				t.Errorf("problem file = %q", p.File)
			}
			if run.CodeOf(err) == "" || !strings.HasPrefix(err.Error(), "f.schedules.yaml:") {
				t.Errorf("error %q: want a code and a file:line prefix", err)
			}
		})
	}
}

func TestParseReportsEveryProblemGolden(t *testing.T) {
	t.Parallel()
	// A slash path on every OS: the messages name the file as given, and the golden file is
	// the same on Windows.
	path := "testdata/problems.schedules.yaml"
	_, err := LoadFile(path, ParseOptions{Workflows: func(n string) bool { return n != "no_such_workflow" }})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("LoadFile = %v; want a *ValidationError", err)
	}
	if ve.Code != CodeValidationFailed {
		t.Errorf("code %q", ve.Code)
	}
	js, _ := json.MarshalIndent(ve.Problems, "", "  ")
	got := err.Error() + "\n\n" + string(js) + "\n"
	golden := filepath.Join("testdata", "problems.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("problems differ from %s (go test -update rewrites it):\n%s", golden, got)
	}
	// Disabled schedules are validated too, and the problems are in line order.
	var disabled bool
	for i, p := range ve.Problems {
		if p.ScheduleID == "disabled_but_checked" {
			disabled = true
		}
		if i > 0 && p.Line < ve.Problems[i-1].Line {
			t.Errorf("problems out of line order at %d", i)
		}
	}
	if !disabled {
		t.Error("the disabled schedule's problem is missing")
	}
}

func TestLoadDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.schedules.yml", "schedules:\n  - id: b\n    workflow: w\n    trigger: {kind: interval, every: 1m}\n")
	write("a.schedules.yaml", "schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: webhook, path: /a}\n")
	write("ignored.yaml", "schedules:\n  - id: ignored\n")
	write("sub/c.schedules.yaml", "schedules:\n  - id: not_recursive\n")
	specs, err := LoadDir(dir, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 || specs[0].ID != "a" || specs[1].ID != "b" {
		t.Fatalf("got %+v; want a then b", specs)
	}
	if specs[0].Source != filepath.Join(dir, "a.schedules.yaml") || specs[0].Line != 2 {
		t.Errorf("source %q line %d", specs[0].Source, specs[0].Line)
	}

	// Ids and webhook paths are unique across files; every file's problems are reported.
	write("c.schedules.yaml", "schedules:\n  - id: a\n    workflow: w\n    trigger: {kind: webhook, path: /a}\n")
	write("d.schedules.yaml", "schedules:\n  - id: d\n    workflow: w\n    trigger: {kind: cron, expression: \"0 3 * * *\"}\n")
	_, err = LoadDir(dir, ParseOptions{})
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("LoadDir = %v; want 3 problems", err)
	}
	codes := []string{ve.Problems[0].Code, ve.Problems[1].Code, ve.Problems[2].Code}
	if !reflect.DeepEqual(codes, []string{CodeDuplicateID, CodeDuplicateWebhookPath, CodeInvalidCron}) {
		t.Errorf("codes %v", codes)
	}
	if !strings.Contains(ve.Problems[0].Message, filepath.Join(dir, "a.schedules.yaml")+":2:9") {
		t.Errorf("duplicate id message does not name the first file: %s", ve.Problems[0].Message)
	}

	if _, err := LoadDir(filepath.Join(dir, "missing"), ParseOptions{}); err == nil {
		t.Error("LoadDir of a missing directory: want an error")
	}
}

func TestValidateSpecsInGo(t *testing.T) {
	t.Parallel()
	good := DefaultSpec("nightly", "w", Trigger{Kind: KindCron, Expression: "0 0 3 * * *", Timezone: "Europe/Paris"})
	if err := Validate([]Spec{good}, nil); err != nil {
		t.Fatal(err)
	}
	bad := DefaultSpec("x", "w", Trigger{Kind: KindInterval, Every: "1m", Path: "/x"})
	dup := DefaultSpec("nightly", "", Trigger{Kind: KindCron, Expression: "0 3 * * *"})
	err := Validate([]Spec{good, bad, dup}, nil)
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("Validate = %v", err)
	}
	var got []string
	for _, p := range ve.Problems {
		got = append(got, p.Code+" "+p.Path)
	}
	want := []string{"unknown_field trigger.path", "missing_field workflow", "invalid_cron trigger.expression", "duplicate_id id"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestSpecJSON(t *testing.T) {
	t.Parallel()
	var s Spec
	if err := json.Unmarshal([]byte(`{"id":"a","workflow":"w","trigger":{"kind":"interval","every":"5m"}}`), &s); err != nil {
		t.Fatal(err)
	}
	if !s.Enabled || s.MaxConcurrent != 1 {
		t.Errorf("JSON defaults not applied: %+v", s)
	}
	if err := json.Unmarshal([]byte(`{"id":"a","enabled":false,"max_concurrent":0}`), &s); err != nil || s.Enabled || s.MaxConcurrent != 0 {
		t.Errorf("explicit JSON values lost: %+v %v", s, err)
	}
	b, _ := json.Marshal(DefaultSpec("a", "w", Trigger{Kind: KindWebhook, Path: "/a"}))
	if string(b) != `{"id":"a","workflow":"w","enabled":true,"max_concurrent":1,"catchup":false,"trigger":{"kind":"webhook","path":"/a"}}` {
		t.Errorf("JSON %s", b)
	}
}

// Issue #26 item 4: a 64-bit id in a schedule's inputs is kept exactly, not rounded to a float64.
func TestRedteamScheduleInputsKeepLargeIntegers(t *testing.T) {
	t.Parallel()
	specs, err := Parse([]byte(`
schedules:
  - id: a
    workflow: w
    inputs: {asset_id: 18446744073709551615, shots: [9007199254740993, 3]}
    trigger: {kind: cron, expression: "@daily"}
`), ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"asset_id": json.Number("18446744073709551615"), "shots": []any{json.Number("9007199254740993"), float64(3)}}
	if !reflect.DeepEqual(specs[0].Inputs, want) {
		t.Fatalf("inputs %#v", specs[0].Inputs)
	}
}
