package yamltext

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/problem"
	"gopkg.in/yaml.v3"
)

// root parses text and returns its root node.
func root(t *testing.T, text string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

// field returns the value node of key in the mapping n.
func field(t *testing.T, n *yaml.Node, key string) *yaml.Node {
	t.Helper()
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	t.Fatalf("no field %q", key)
	return nil
}

func onlyProblem(t *testing.T, d *Decoder) problem.Problem {
	t.Helper()
	if len(d.Problems) != 1 {
		t.Fatalf("want 1 problem, got %d: %+v", len(d.Problems), d.Problems)
	}
	return d.Problems[0]
}

func TestDecoderMappingReportsDuplicateAndNonStringKeys(t *testing.T) {
	t.Parallel()
	d := &Decoder{File: "a.yaml"}
	n := root(t, "a: 1\nb: 2\na: 3\n[x]: 4\n")
	fields := d.Mapping(n, At{Path: "top", Owner: `schedule "s"`, ScheduleID: "s"})
	if len(fields) != 2 || fields[0].Key != "a" || fields[1].Key != "b" || fields[1].KeyNode.Line != 2 {
		t.Fatalf("fields = %+v", fields)
	}
	want := []problem.Problem{
		{Code: problem.CodeParseError, Severity: problem.SeverityError, File: "a.yaml", ScheduleID: "s", Path: "top.a", Line: 3, Column: 1,
			Message: `schedule "s": duplicate key "a"; keep one of them`, Hint: "keep one of them"},
		{Code: problem.CodeWrongType, Severity: problem.SeverityError, File: "a.yaml", ScheduleID: "s", Path: "top", Line: 4, Column: 1,
			Message: `schedule "s": mapping keys must be strings`},
	}
	if !reflect.DeepEqual(d.Problems, want) {
		t.Fatalf("problems:\n got %+v\nwant %+v", d.Problems, want)
	}
}

func TestDecoderUnknownFieldHints(t *testing.T) {
	t.Parallel()
	n := root(t, "retyr: 1\nzzz: 2\ncron: 3\n")
	d := &Decoder{}
	fs := d.Mapping(n, At{Path: "steps[0]"})
	allowed := []string{"retry", "tool"}
	d.UnknownField(fs[0], At{Path: "steps[0]"}, allowed, "")
	d.UnknownField(fs[1], At{Path: "steps[0]"}, allowed, "")
	d.UnknownField(fs[2], At{Path: "steps[0]"}, allowed, "`cron` is only valid on cron triggers")
	for i, want := range []string{
		`unknown field "retyr"; did you mean "retry"?`,
		`unknown field "zzz"; allowed fields: retry, tool`,
		"unknown field \"cron\"; `cron` is only valid on cron triggers",
	} {
		p := d.Problems[i]
		if p.Code != problem.CodeUnknownField || p.Message != want || !strings.HasSuffix(want, p.Hint) || p.Line != i+1 {
			t.Errorf("problem %d = %+v, want message %q", i, p, want)
		}
	}
	if d.Problems[0].Path != "steps[0].retyr" {
		t.Errorf("path = %q", d.Problems[0].Path)
	}
}

func TestDecoderPrefixHookNamesTheOwner(t *testing.T) {
	t.Parallel()
	d := &Decoder{Prefix: func(at At) string { return "<" + at.Path + "|" + at.StepID + ">: " }}
	n := root(t, "x: 1\n")
	d.Str(field(t, n, "x"), At{Path: "steps[0].x", StepID: "a", Owner: "ignored"})
	p := onlyProblem(t, d)
	if want := "<steps[0].x|a>: `x` must be a string; got the number 1; quote it: x: \"1\""; p.Message != want || p.StepID != "a" {
		t.Fatalf("problem = %+v, want message %q", p, want)
	}
}

func TestDecoderStr(t *testing.T) {
	t.Parallel()
	n := root(t, "s: hi\nnull:\nnum: 12\nlist: [1]\nts: 2024-01-01\n")
	d := &Decoder{}
	for key, want := range map[string]string{"s": "hi", "null": "", "ts": "2024-01-01"} {
		if got, ok := d.Str(field(t, n, key), At{Path: key}); !ok || got != want {
			t.Errorf("Str(%s) = %q, %v", key, got, ok)
		}
	}
	if len(d.Problems) != 0 {
		t.Fatalf("problems: %+v", d.Problems)
	}
	if _, ok := d.Str(field(t, n, "num"), At{Path: "steps[0].id"}); ok {
		t.Fatal("a number is not a string")
	}
	if p := onlyProblem(t, d); p.Message != "`id` must be a string; got the number 12; quote it: id: \"12\"" || p.Hint != `quote it: id: "12"` || p.Line != 3 {
		t.Fatalf("problem = %+v", p)
	}
	// An item of a list is quoted alone; a trigger field is named as the caller says; a list
	// gets no quoting hint.
	d.Problems = nil
	d.Str(field(t, n, "num"), At{Path: "steps[0].depends_on[1]"})
	d.Str(field(t, n, "num"), At{Path: "schedules[0].trigger.kind", Name: "trigger.kind", Owner: `schedule "s"`})
	d.Str(field(t, n, "list"), At{Path: "name"})
	for i, want := range []string{
		"`depends_on[1]` must be a string; got the number 12; quote it: \"12\"",
		"schedule \"s\": `trigger.kind` must be a string; got the number 12; quote it: kind: \"12\"",
		"`name` must be a string; got a list",
	} {
		if d.Problems[i].Message != want {
			t.Errorf("message %d = %q, want %q", i, d.Problems[i].Message, want)
		}
	}
}

func TestDecoderBoolIntNumber(t *testing.T) {
	t.Parallel()
	n := root(t, "t: true\nyes: yes\nq: \"true\"\nn: 1\nthree: 3.0\nhalf: 3.5\nhex: 0x1F\nhuge: 1e30\nneg: -1e30\nnan: .nan\nnull:\n")
	d := &Decoder{}
	if b, ok := d.Bool(field(t, n, "t"), At{Path: "t"}); !b || !ok {
		t.Fatal("Bool(true)")
	}
	d.Bool(field(t, n, "yes"), At{Path: "enabled"})
	d.Bool(field(t, n, "q"), At{Path: "enabled"})
	d.Bool(field(t, n, "n"), At{Path: "enabled"})
	for i, want := range []string{
		"`enabled` must be true or false; got the string \"yes\"; write true or false, unquoted",
		"`enabled` must be true or false; got the string \"true\"; write true or false, unquoted",
		"`enabled` must be true or false; got the number 1",
	} {
		if p := d.Problems[i]; p.Message != want || p.Code != problem.CodeWrongType {
			t.Errorf("bool problem %d = %+v, want %q", i, p, want)
		}
	}
	d.Problems = nil
	for key, want := range map[string]int64{"n": 1, "three": 3, "hex": 31, "huge": 1<<63 - 1, "neg": -1 << 63} {
		if got, ok := d.Int(field(t, n, key), At{Path: key}); !ok || got != want {
			t.Errorf("Int(%s) = %d, %v; want %d", key, got, ok, want)
		}
	}
	for _, key := range []string{"half", "nan", "null"} {
		if _, ok := d.Int(field(t, n, key), At{Path: "max_concurrent"}); ok {
			t.Errorf("Int(%s) ok", key)
		}
	}
	if len(d.Problems) != 3 || d.Problems[0].Message != "`max_concurrent` must be a whole number; got the number 3.5" {
		t.Fatalf("int problems: %+v", d.Problems)
	}
	d.Problems = nil
	if f, ok := d.Number(field(t, n, "half"), At{Path: "jitter"}); !ok || f != 3.5 {
		t.Fatalf("Number(3.5) = %v, %v", f, ok)
	}
	if _, ok := d.Number(field(t, n, "nan"), At{Path: "jitter"}); ok || onlyProblem(t, d).Message != "`jitter` must be a number; got the number .nan" {
		t.Fatalf("Number(.nan): %+v", d.Problems)
	}
}

func TestDecoderStrList(t *testing.T) {
	t.Parallel()
	n := root(t, "a: [x, 2, y]\nb: x\nc:\n")
	d := &Decoder{}
	if got := d.StrList(field(t, n, "a"), At{Path: "depends_on"}); !reflect.DeepEqual(got, []string{"x", "y"}) {
		t.Fatalf("StrList = %v", got)
	}
	if p := onlyProblem(t, d); p.Path != "depends_on[1]" || p.Column != 8 {
		t.Fatalf("problem = %+v", p)
	}
	if got := d.StrList(field(t, n, "c"), At{Path: "c"}); got != nil {
		t.Fatalf("StrList(null) = %v", got)
	}
	d.StrList(field(t, n, "b"), At{Path: "b"})
	if len(d.Problems) != 2 || d.Problems[1].Message != "`b` must be a list of strings; got the string \"x\"" {
		t.Fatalf("problems: %+v", d.Problems)
	}
}

func TestDecoderValue(t *testing.T) {
	t.Parallel()
	n := root(t, "base: &b {x: 1, y: 2}\nv:\n  <<: *b\n  y: 3\n  big: 12345678901234567890\n  list: [a, null, true, 0x10]\n  nan: .inf\n  [k]: 1\n")
	var visited []string
	d := &Decoder{Visit: func(at At, n *yaml.Node) { visited = append(visited, at.Name) }}
	got := d.Value(field(t, n, "v"), At{Path: "schedules[0].inputs", Name: "inputs", Owner: "o"}, 3)
	want := map[string]any{"x": 1.0, "y": 3.0, "big": json.Number("12345678901234567890"),
		"list": []any{"a", nil, true, 16.0}, "nan": nil}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Value = %#v\nwant %#v", got, want)
	}
	if len(d.Problems) != 2 {
		t.Fatalf("problems: %+v", d.Problems)
	}
	if p := d.Problems[0]; p.Message != "o: `inputs.nan`: \".inf\" is not a JSON number (NaN and infinities are not allowed); quote it to pass a string" ||
		p.Path != "schedules[0].inputs.nan" || p.Hint != "quote it to pass a string" {
		t.Errorf("nan problem = %+v", p)
	}
	if p := d.Problems[1]; p.Message != "o: `inputs`: mapping keys must be strings" || p.Line != 8 {
		t.Errorf("key problem = %+v", p)
	}
	for _, name := range []string{"inputs", "inputs.y", "inputs.big", "inputs.list[3]", "inputs.x"} {
		found := false
		for _, v := range visited {
			found = found || v == name
		}
		if !found {
			t.Errorf("Visit never saw %q (saw %v)", name, visited)
		}
	}
}

func TestDecoderValueLimits(t *testing.T) {
	t.Parallel()
	deep := root(t, "v: "+strings.Repeat("[", 10)+strings.Repeat("]", 10)+"\n")
	d := &Decoder{MaxDepth: 5}
	d.Value(field(t, deep, "v"), At{Path: "steps[0].args"}, 2)
	d.Value(field(t, deep, "v"), At{Path: "steps[0].args"}, 2) // reported once
	if p := onlyProblem(t, d); !d.TooLarge || p.Code != problem.CodeTooLarge || p.Message != "`args` nests deeper than 5 levels" {
		t.Fatalf("problem = %+v", p)
	}
	laughs := root(t, "a: &a [1, 1, 1, 1]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n")
	d = &Decoder{MaxValues: 50}
	if v := d.Value(field(t, laughs, "b"), At{Path: "b"}, 2); v == nil || d.TooLarge {
		t.Fatalf("21 values are within 50: %v, %+v", v, d.Problems)
	}
	d.Value(field(t, laughs, "c"), At{Path: "inputs.c"}, 2)
	if p := onlyProblem(t, d); !d.TooLarge || p.Message != "`c` expands to more than 50 values (YAML aliases?)" {
		t.Fatalf("problem = %+v", p)
	}
}

func TestNumberValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]any{
		"3": 3.0, "-2.5": -2.5, "9007199254740993": json.Number("9007199254740993"), "+9007199254740992": 9007199254740992.0,
	} {
		if got, ok := NumberValue(in); !ok || got != want {
			t.Errorf("NumberValue(%q) = %#v, %v; want %#v", in, got, ok, want)
		}
	}
	for _, in := range []string{"0x1F", "nan", "inf", "1e400", ""} {
		if got, ok := NumberValue(in); ok {
			t.Errorf("NumberValue(%q) = %#v, want not ok", in, got)
		}
	}
}
