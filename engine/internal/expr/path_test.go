package expr

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/theory/jsonpath"
)

// runDoc decodes a run document the way the engine gets one: through
// encoding/json, so numbers are float64.
func runDoc(t testing.TB) map[string]any {
	t.Helper()
	var doc map[string]any
	err := json.Unmarshal([]byte(`{
		"inputs": {"date": "2024-05-01", "scope": "all"},
		"list": {"files": [
			{"path": "/in/a.ma", "size": 1024, "name": "a.ma"},
			{"path": "/in/b.ma", "size": 2048},
			{"path": "/in/c.mb", "size": 10, "name": "c.mb"}
		]},
		"one": {"files": [{"path": "/in/only.ma"}]},
		"a": [{"x": 2}, {"x": 1}, {"x": 1.5}, {"x": "3"}, {"y": 9}],
		"flag": false,
		"none": null,
		"steps": {"list": {"output": {"count": 3}, "status": "completed", "attempts": 1}}
	}`), &doc)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func mustCompile(t testing.TB, s string) *Path {
	t.Helper()
	p, err := Compile(s)
	if err != nil {
		t.Fatalf("Compile(%q): %v", s, err)
	}
	return p
}

func TestSelect(t *testing.T) {
	t.Parallel()
	doc := runDoc(t)
	files := doc["list"].(map[string]any)["files"].([]any)
	tests := []struct {
		path string
		want any
	}{
		{"$.list.files", files},
		{"$['list']['files'][0]", files[0]},
		{`$["list"].files[1].path`, "/in/b.ma"},
		{"$.list.files[*].path", []any{"/in/a.ma", "/in/b.ma", "/in/c.mb"}},
		{"$.list.files[-1].size", 10.0},
		{"$.list.files[0:2].size", []any{1024.0, 2048.0}},
		{"$.one.files[*].path", "/in/only.ma"}, // one node: the value, not a list
		{"$.list..path", []any{"/in/a.ma", "/in/b.ma", "/in/c.mb"}},
		{"$.a[?@.x > 1]", []any{map[string]any{"x": 2.0}, map[string]any{"x": 1.5}}},
		{"$.a[?@.x > 1].x", []any{2.0, 1.5}},
		{"$.a[?@.x == 1]", map[string]any{"x": 1.0}},
		{"$.a[?@.x == '3'].x", "3"},
		{"$.a[?@.x >= 1 && @.x < 2].x", []any{1.0, 1.5}},
		{"$.a[?!@.x].y", 9.0},
		{"$.list.files[?@.size > 1000 && @.size < 2000].path", "/in/a.ma"},
		{"$.list.files[?length(@.path) == 8].path", []any{"/in/a.ma", "/in/b.ma", "/in/c.mb"}},
		{"$.list.files[?count(@.*) == 2].path", "/in/b.ma"},
		{"$.list.files[?match(@.name, '.*\\\\.ma')].path", "/in/a.ma"},
		{"$.list.files[?search(@.name, 'mb')].path", "/in/c.mb"},
		{"$.list.files[?match(@.path, '/in/[ab]\\\\.ma')].size", []any{1024.0, 2048.0}},
		{"$.steps.list.output.count", 3.0},
		{"$.inputs.date", "2024-05-01"},
		{"$.flag", false},
		{"$.none", nil},
		{"$.missing", nil},
		{"$.list.files[9]", nil},
		{"$.a[?@.x > 100]", nil},
		{"  $.inputs.scope \n", "all"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			if got := mustCompile(t, tt.path).Select(doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Select = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// Object members come in an unspecified order (RFC 9535), which in Go
// changes from call to call; arrays keep theirs.
func TestSelectObjectMembersUnordered(t *testing.T) {
	t.Parallel()
	doc := runDoc(t)
	for path, want := range map[string][]string{
		"$..path":           {"/in/a.ma", "/in/b.ma", "/in/c.mb", "/in/only.ma"},
		"$.inputs.*":        {"2024-05-01", "all"},
		"$.inputs[?@ != 1]": {"2024-05-01", "all"},
	} {
		got, ok := mustCompile(t, path).Select(doc).([]any)
		if !ok {
			t.Fatalf("%s: Select is not a list", path)
		}
		var strs []string
		for _, v := range got {
			strs = append(strs, v.(string))
		}
		slices.Sort(strs)
		if !slices.Equal(strs, want) {
			t.Errorf("%s: Select = %q, want %q in any order", path, strs, want)
		}
	}
}

func TestSelectRoot(t *testing.T) {
	t.Parallel()
	doc := runDoc(t)
	if got := mustCompile(t, "$").Select(doc); !reflect.DeepEqual(got, doc) {
		t.Errorf(`Select("$") is not the document`)
	}
	if got := mustCompile(t, "$.x").Select(nil); got != nil {
		t.Errorf("Select(nil) = %#v, want nil", got)
	}
	if got := mustCompile(t, "$").Select(nil); got != nil {
		t.Errorf(`Select("$") of nil = %#v, want nil`, got)
	}
	if got := mustCompile(t, "$[0]").Select(42.0); got != nil {
		t.Errorf("Select on a scalar = %#v, want nil", got)
	}
}

func TestSelectTolerantValues(t *testing.T) {
	t.Parallel()
	doc := map[string]any{
		"ints":    []any{1, int64(2), json.Number("3"), 4.0},
		"strings": []string{"a", "b"},
		"maps":    []map[string]any{{"x": 1}, {"x": 5}},
		"smap":    map[string]string{"k": "v"},
	}
	tests := []struct {
		path string
		want any
	}{
		{"$.ints[?@ > 1]", []any{int64(2), json.Number("3"), 4.0}},
		{"$.ints[?@ == 3]", json.Number("3")},
		{"$.strings[1]", "b"},
		{"$.strings[*]", []any{"a", "b"}},
		{"$.maps[?@.x > 2].x", 5},
		{"$.smap.k", "v"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			if got := mustCompile(t, tt.path).Select(doc); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Select = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// theory/jsonpath v0.12.1 panics in match() and search() when an argument
// selects nothing; Compile's parser works around it.
func TestSelectMatchMissingMember(t *testing.T) {
	t.Parallel()
	doc := []any{map[string]any{"name": "a.ma"}, map[string]any{"other": 1.0}, "scalar", nil}
	for _, s := range []string{
		"$[?match(@.name, 'a.*')]",
		"$[?search(@.name, 'a')]",
		"$[?match('a.ma', @.name)]",
		"$[?match(value(@..name), 'a.*')]",
		"$[?!match(@.name, 'b.*')]",
	} {
		if _, err := mustCompile(t, s).SelectLimited(doc, Limits{}); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	if got := mustCompile(t, "$[?match(@.name, 'a.*')].name").Select(doc); got != "a.ma" {
		t.Errorf("match over a member missing in some elements = %#v, want %q", got, "a.ma")
	}
	if got := mustCompile(t, "$[?!search(@.name, 'a')]").Select(doc); !reflect.DeepEqual(got, doc[1:]) {
		t.Errorf("!search = %#v, want %#v", got, doc[1:])
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		pos  int
		msg  string
		err  string
	}{
		{"", 0, `must start with "$"`, `invalid JSONPath "": must start with "$"`},
		{"   ", 0, `must start with "$"`, `invalid JSONPath "   ": must start with "$"`},
		{"list.files", 1, `must start with "$"`, `invalid JSONPath "list.files": must start with "$" at position 1`},
		{"  @.x", 3, `must start with "$"`, `invalid JSONPath "  @.x": must start with "$" at position 3`},
		{"$.a[", 5, "unexpected eof", `invalid JSONPath "$.a[": unexpected eof at position 5`},
		{"  $.a[", 7, "unexpected eof", `invalid JSONPath "  $.a[": unexpected eof at position 7`},
		{"$list", 1, "unexpected identifier", `invalid JSONPath "$list": unexpected identifier at position 1`},
		{"$.a b", 4, "unexpected blank space", ""},
		{"$..", 4, "unexpected eof", ""},
		{"$$", 2, "unexpected '$'", ""},
		{"$[?@.x = 1]", 8, "invalid comparison operator", ""},
		{"$[?@.x == 1", 12, "unexpected eof", ""},
		{"$[?@.x<1 && ]", 13, "unexpected ']'", ""},
		{"$[?foo(@)]", 4, "unknown function foo()", ""},
		{"$[?length(@.*) > 1]", 10, "function length() cannot convert argument to Value", ""},
		{"$.a[01]", 5, "invalid number literal", ""},
		{"$[9999999999999999999]", 3, `cannot parse "9999999999999999999", value out of range`, ""},
		{"$['a", 5, "unterminated string literal", ""},
		{`$["\q"]`, 5, "invalid escape after backslash", ""},
		{"$.a.\u00e9\u00e9[", 10, "unexpected eof", ""}, // positions count bytes
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			p, err := Compile(tt.expr)
			if err == nil {
				t.Fatalf("Compile(%q) = %v, want an error", tt.expr, p)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SyntaxError", err)
			}
			if se.Expr != tt.expr {
				t.Errorf("Expr = %q, want %q", se.Expr, tt.expr)
			}
			if se.Pos != tt.pos || se.Msg != tt.msg {
				t.Errorf("error = {%d, %q}, want {%d, %q}", se.Pos, se.Msg, tt.pos, tt.msg)
			}
			if tt.err != "" && err.Error() != tt.err {
				t.Errorf("Error() = %q, want %q", err.Error(), tt.err)
			}
			if se.Pos < 0 || se.Pos > len(tt.expr)+1 {
				t.Errorf("Pos = %d out of range for %q", se.Pos, tt.expr)
			}
			if (se.Unwrap() != nil) != errors.Is(err, jsonpath.ErrPathParse) {
				t.Errorf("Unwrap and ErrPathParse disagree")
			}
		})
	}
}

func TestCompileParserErrorsWrap(t *testing.T) {
	t.Parallel()
	_, err := Compile("$.a[")
	if !errors.Is(err, jsonpath.ErrPathParse) {
		t.Errorf("errors.Is(%v, jsonpath.ErrPathParse) = false", err)
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"$.list.files":    "$.list.files",
		" $['a'][0]\n":    "$['a'][0]",
		"$[?@.x > 1]":     "$[?@.x > 1]",
		"\t$..path\r\n  ": "$..path",
	} {
		if got := mustCompile(t, in).String(); got != want {
			t.Errorf("String of %q = %q, want %q", in, got, want)
		}
	}
}

func TestRootName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		name string
		ok   bool
	}{
		{"$.list", "list", true},
		{"$.list.files[*].path", "list", true},
		{"$['list'][0]", "list", true},
		{`$["per_file"]`, "per_file", true},
		{`$["with space"]`, "with space", true},
		{"$.true", "true", true},
		{"$", "", false},
		{"$[0]", "", false},
		{"$..x", "", false},
		{"$.*", "", false},
		{"$[*].x", "", false},
		{"$['a','b']", "", false},
		{"$[?@.x]", "", false},
		{"$[0:1]", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			name, ok := mustCompile(t, tt.path).RootName()
			if name != tt.name || ok != tt.ok {
				t.Errorf("RootName = (%q, %v), want (%q, %v)", name, ok, tt.name, tt.ok)
			}
		})
	}
}

func TestIsPath(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    string
		want bool
	}{
		{"$", true},
		{"$.list.files", true},
		{"  \t\n$.x", true},
		{"$not really", true},
		{"", false},
		{"   ", false},
		{"list.files", false},
		{"{{inputs.x}}", false},
		{"@.x", false},
		{"a$", false},
		{"\u00a0$.x", false},
	}
	for _, tt := range tests {
		if got := IsPath(tt.s); got != tt.want {
			t.Errorf("IsPath(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestConcurrentCompileSelect(t *testing.T) {
	t.Parallel()
	doc := runDoc(t)
	p := mustCompile(t, "$.list.files[?match(@.name, '.*ma')].path")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if _, err := Compile("$.a[?@.x > 1]"); err != nil {
					t.Error(err)
					return
				}
				if got := p.Select(doc); got != "/in/a.ma" {
					t.Errorf("Select = %#v", got)
					return
				}
			}
		})
	}
	wg.Wait()
}
