package template

import (
	"errors"
	"reflect"
	"testing"
)

func TestRefsIn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		v    any
		want []string
	}{
		{"nil", nil, nil},
		{"number", 1.0, nil},
		{"literal string", "no placeholders", nil},
		{"whole string", "{{inputs.date}}", []string{"inputs.date"}},
		{"embedded string", "a {{x}} b {{y[0]}}", []string{"x", "y[0]"}},
		{"keys are not templates", map[string]any{"{{k}}": "v"}, nil},
		{"object sorted keys", map[string]any{
			"z": "{{z}}",
			"a": "{{a}}",
			"m": map[string]any{"y": "{{m.y}}", "b": []any{"{{m.b0}}", 2.0, "{{m.b2}}"}},
		}, []string{"a", "m.b0", "m.b2", "m.y", "z"}},
		{"array", []any{"{{a}}", []any{"{{b}}"}, nil, true}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			refs, err := RefsIn(tt.v)
			if err != nil {
				t.Fatal(err)
			}
			if got := refStrings(refs); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RefsIn = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRefsInErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		v       any
		path    string
		offset  int
		message string
	}{
		{"string itself", "x {{", "", 2, `malformed template at offset 2: unclosed "{{"`},
		{"object member", map[string]any{"scene": "{{a..b}}"}, "scene",
			0, `scene: malformed template at offset 0: invalid path "a..b": expected a name after "."`},
		{"array element", map[string]any{"list": []any{"ok", "{{ok}}", "  {{}}"}}, "list[2]",
			2, `list[2]: malformed template at offset 2: empty placeholder`},
		{"nested", map[string]any{"a": map[string]any{"b": "{{1}}"}}, "a.b",
			0, `a.b: malformed template at offset 0: invalid path "1": must start with a letter or "_"`},
		{"top-level array", []any{map[string]any{"x": "{{"}}, "[0].x", 0, `[0].x: malformed template at offset 0: unclosed "{{"`},
		{"first in key order", map[string]any{"b": "{{", "a": "{{}}", "c": "{{x y}}"}, "a", 0,
			`a: malformed template at offset 0: empty placeholder`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for i := range 20 { // map order must not change which error wins
				refs, err := RefsIn(tt.v)
				if refs != nil {
					t.Errorf("refs = %v, want nil on error", refStrings(refs))
				}
				var ve *ValueError
				if !errors.As(err, &ve) {
					t.Fatalf("error %T %v is not a *ValueError", err, err)
				}
				if ve.Path != tt.path || ve.Err.Offset != tt.offset || err.Error() != tt.message {
					t.Fatalf("run %d: error = {%q, %d, %q}, want {%q, %d, %q}",
						i, ve.Path, ve.Err.Offset, err.Error(), tt.path, tt.offset, tt.message)
				}
				var se *SyntaxError
				if !errors.As(err, &se) || se != ve.Err {
					t.Errorf("errors.As(*SyntaxError) does not unwrap to ve.Err")
				}
			}
		})
	}
}

func TestRenderValue(t *testing.T) {
	t.Parallel()
	doc := testDoc()
	resolve := func(r Ref) any { return Lookup(doc, r) }
	files := doc["list"].(map[string]any)["files"]
	tests := []struct {
		name string
		v    any
		want any
	}{
		{"nil", nil, nil},
		{"number", 2.0, 2.0},
		{"bool", false, false},
		{"literal", "x }} y", "x }} y"},
		{"whole keeps type", "{{inputs.count}}", 3.0},
		{"whole missing", "{{inputs.missing}}", nil},
		{"embedded", "d={{inputs.date}}", "d=2024-05-01"},
		{"nil map stays nil", map[string]any(nil), map[string]any(nil)},
		{"nil slice stays nil", []any(nil), []any(nil)},
		{"args", map[string]any{
			"scene":  "{{file.path}}",
			"files":  "{{list.files}}",
			"first":  "{{list.files[0].path}}",
			"label":  "{{inputs.date}}/{{inputs.count}}",
			"n":      5.0,
			"nested": []any{"{{inputs.flag}}", map[string]any{"{{k}}": "{{inputs.none}}"}, "plain"},
		}, map[string]any{
			"scene":  "/in/a.ma",
			"files":  files,
			"first":  "/in/a.ma",
			"label":  "2024-05-01/3",
			"n":      5.0,
			"nested": []any{true, map[string]any{"{{k}}": nil}, "plain"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := RenderValue(tt.v, resolve)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("RenderValue = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestRenderValueCopies(t *testing.T) {
	t.Parallel()
	inner := []any{"{{a}}", "lit"}
	v := map[string]any{"list": inner, "m": map[string]any{"x": "{{a}}"}}
	got, err := RenderValue(v, func(Ref) any { return "{{b}}" })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"list": []any{"{{b}}", "lit"}, "m": map[string]any{"x": "{{b}}"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("RenderValue = %#v, want %#v (output must not be re-parsed)", got, want)
	}
	got.(map[string]any)["list"].([]any)[1] = "changed"
	got.(map[string]any)["m"].(map[string]any)["y"] = 1.0
	if inner[1] != "lit" || len(v["m"].(map[string]any)) != 1 {
		t.Errorf("modifying the result changed the input: %#v", v)
	}
}

func TestRenderValueError(t *testing.T) {
	t.Parallel()
	v := map[string]any{"a": "{{ok}}", "b": []any{"{{x", "{{}}"}, "c": "{{1}}"}
	for range 20 {
		got, err := RenderValue(v, func(Ref) any { return nil })
		if got != nil {
			t.Errorf("RenderValue = %#v, want nil on error", got)
		}
		var ve *ValueError
		if !errors.As(err, &ve) || ve.Path != "b[0]" {
			t.Fatalf("error = %v, want a *ValueError at b[0]", err)
		}
	}
}
