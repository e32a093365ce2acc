package template

import (
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func refStrings(refs []Ref) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.String())
	}
	return out
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src     string
		refs    []string
		literal bool
		whole   bool
	}{
		{src: "", literal: true},
		{src: "plain text", literal: true},
		{src: "a } b { c", literal: true},
		{src: "}}", literal: true},
		{src: "a }} b", literal: true},
		{src: "{", literal: true},
		{src: "{{a}}", refs: []string{"a"}, whole: true},
		{src: "{{ a }}", refs: []string{"a"}, whole: true},
		{src: "{{\ta\n}}", refs: []string{"a"}, whole: true},
		{src: " {{a}}", refs: []string{"a"}},
		{src: "{{a}} ", refs: []string{"a"}},
		{src: "{{a}}}", refs: []string{"a"}},
		{src: "}}{{a}}", refs: []string{"a"}},
		{src: "{{inputs.date}}", refs: []string{"inputs.date"}, whole: true},
		{src: "{{steps.list.files[0]}}", refs: []string{"steps.list.files[0]"}, whole: true},
		{src: "{{steps.per_file.output}}", refs: []string{"steps.per_file.output"}, whole: true},
		{src: "{{ steps.list.file_refs[0].uri }}", refs: []string{"steps.list.file_refs[0].uri"}, whole: true},
		{src: "{{a[0][12].b}}", refs: []string{"a[0][12].b"}, whole: true},
		{src: "{{a[007]}}", refs: []string{"a[7]"}, whole: true},
		{src: "{{_x}}", refs: []string{"_x"}, whole: true},
		{src: "{{x-y.z-1_}}", refs: []string{"x-y.z-1_"}, whole: true},
		{src: "{{A.B9}}", refs: []string{"A.B9"}, whole: true},
		{src: "export_{{file.path}}", refs: []string{"file.path"}},
		{src: "{{a}}{{b}}", refs: []string{"a", "b"}},
		{src: "{{a}}-{{a}}", refs: []string{"a", "a"}},
		{src: "Push the {{inputs.date}} vendor drop to {{ dest }}?", refs: []string{"inputs.date", "dest"}},
		{src: "é{{a}}ü", refs: []string{"a"}},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			tmpl, err := Parse(tt.src)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.src, err)
			}
			if got := refStrings(tmpl.Refs()); !reflect.DeepEqual(got, tt.refs) {
				t.Errorf("refs = %q, want %q", got, tt.refs)
			}
			if got := tmpl.IsLiteral(); got != tt.literal {
				t.Errorf("IsLiteral = %v, want %v", got, tt.literal)
			}
			if got := tmpl.IsWhole(); got != tt.whole {
				t.Errorf("IsWhole = %v, want %v", got, tt.whole)
			}
			if got := tmpl.Source(); got != tt.src {
				t.Errorf("Source = %q, want %q", got, tt.src)
			}
			if got := ContainsPlaceholder(tt.src); got != !tt.literal {
				t.Errorf("ContainsPlaceholder = %v, want %v", got, !tt.literal)
			}
		})
	}
}

func TestParseRefFields(t *testing.T) {
	t.Parallel()
	tmpl, err := Parse("x {{  steps.list.files[2].path  }} y")
	if err != nil {
		t.Fatal(err)
	}
	want := []Ref{{
		Root: "steps",
		Path: []Segment{{Name: "list"}, {Name: "files"}, {Index: 2, IsIndex: true}, {Name: "path"}},
		Raw:  "steps.list.files[2].path",
	}}
	if got := tmpl.Refs(); !reflect.DeepEqual(got, want) {
		t.Errorf("Refs = %#v, want %#v", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src    string
		offset int
		msg    string
	}{
		{src: "{{", offset: 0, msg: `unclosed "{{"`},
		{src: "abc {{a", offset: 4, msg: `unclosed "{{"`},
		{src: "{{a}} {{b", offset: 6, msg: `unclosed "{{"`},
		{src: "{{a {{b", offset: 0, msg: `unclosed "{{"`},
		{src: "{{}}", offset: 0, msg: "empty placeholder"},
		{src: "x{{  }}", offset: 1, msg: "empty placeholder"},
		{src: "{{a..b}}", offset: 0, msg: `invalid path "a..b": expected a name after "."`},
		{src: "{{a.}}", offset: 0, msg: `invalid path "a.": expected a name after "."`},
		{src: "{{a.1}}", offset: 0, msg: `invalid path "a.1": expected a name after "."`},
		{src: "{{a[x]}}", offset: 0, msg: `invalid path "a[x]": expected a non-negative integer index in "[...]"`},
		{src: "{{a[]}}", offset: 0, msg: `invalid path "a[]": expected a non-negative integer index in "[...]"`},
		{src: "{{a[-1]}}", offset: 0, msg: `invalid path "a[-1]": expected a non-negative integer index in "[...]"`},
		{src: "{{a[1}}", offset: 0, msg: `invalid path "a[1": expected a non-negative integer index in "[...]"`},
		{src: "{{a[1 ]}}", offset: 0, msg: `invalid path "a[1 ]": expected a non-negative integer index in "[...]"`},
		{src: "{{a[99999999999999999999]}}", offset: 0, msg: `invalid path "a[99999999999999999999]": index 99999999999999999999 is too large`},
		{src: "{{1a}}", offset: 0, msg: `invalid path "1a": must start with a letter or "_"`},
		{src: "{{-a}}", offset: 0, msg: `invalid path "-a": must start with a letter or "_"`},
		{src: "{{.a}}", offset: 0, msg: `invalid path ".a": must start with a letter or "_"`},
		{src: "{{[0]}}", offset: 0, msg: `invalid path "[0]": must start with a letter or "_"`},
		{src: "{{a b}}", offset: 0, msg: `invalid path "a b": unexpected ' ' (expected "." or "[")`},
		{src: "{{a.é}}", offset: 0, msg: `invalid path "a.é": expected a name after "."`},
		{src: "{{aé}}", offset: 0, msg: `invalid path "aé": unexpected 'é' (expected "." or "[")`},
		{src: "{{a{b}}", offset: 0, msg: `invalid path "a{b": unexpected '{' (expected "." or "[")`},
		{src: "{{{a}}}", offset: 0, msg: `invalid path "{a": must start with a letter or "_"`},
		{src: "ok {{a {{b}} }}", offset: 3, msg: `nested "{{" inside a placeholder`},
		{src: "{{a{{b}}", offset: 0, msg: `nested "{{" inside a placeholder`},
		{src: "{{inputs.date}} {{env.$HOME}}", offset: 16, msg: `invalid path "env.$HOME": expected a name after "."`},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			tmpl, err := Parse(tt.src)
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want an error", tt.src, refStrings(tmpl.Refs()))
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *SyntaxError", err)
			}
			if se.Offset != tt.offset || se.Msg != tt.msg {
				t.Errorf("error = {%d, %q}, want {%d, %q}", se.Offset, se.Msg, tt.offset, tt.msg)
			}
			if !strings.HasPrefix(tt.src[se.Offset:], "{{") {
				t.Errorf("offset %d does not point at a {{", se.Offset)
			}
		})
	}
}

func TestSyntaxErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := Parse("abc {{a")
	if got, want := err.Error(), `malformed template at offset 4: unclosed "{{"`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func testDoc() map[string]any {
	return map[string]any{
		"inputs": map[string]any{"date": "2024-05-01", "count": 3.0, "ratio": 0.25, "flag": true, "none": nil},
		"list": map[string]any{
			"files": []any{
				map[string]any{"path": "/in/a.ma", "size": 1024.0},
				map[string]any{"path": "/in/b.ma", "size": 2048.0},
			},
		},
		"file": map[string]any{"path": "/in/a.ma"},
		"tags": []any{"x", "y<z"},
	}
}

func TestRender(t *testing.T) {
	t.Parallel()
	doc := testDoc()
	resolve := func(r Ref) any { return Lookup(doc, r) }
	tests := []struct {
		src  string
		want any
	}{
		{src: "", want: ""},
		{src: "plain }} text", want: "plain }} text"},
		{src: "{{inputs.date}}", want: "2024-05-01"},
		{src: "{{ inputs.count }}", want: 3.0},
		{src: "{{inputs.flag}}", want: true},
		{src: "{{inputs.none}}", want: nil},
		{src: "{{inputs.missing}}", want: nil},
		{src: "{{nope.deeper[3]}}", want: nil},
		{src: "{{list.files}}", want: doc["list"].(map[string]any)["files"]},
		{src: "{{list.files[1].size}}", want: 2048.0},
		{src: "{{tags}}", want: []any{"x", "y<z"}},
		{src: " {{inputs.count}}", want: " 3"},
		{src: "n={{inputs.count}} r={{inputs.ratio}}", want: "n=3 r=0.25"},
		{src: "flag={{inputs.flag}}", want: "flag=true"},
		{src: "[{{inputs.none}}|{{inputs.missing}}]", want: "[|]"},
		{src: "export_{{file.path}}", want: "export_/in/a.ma"},
		{src: "tags={{tags}}", want: `tags=["x","y<z"]`},
		{src: "f={{list.files[0]}}", want: `f={"path":"/in/a.ma","size":1024}`},
		{src: "{{a}}{{b}}", want: ""},
		{src: "{{file.path}}{{file.path}}", want: "/in/a.ma/in/a.ma"},
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			t.Parallel()
			tmpl, err := Parse(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if got := tmpl.Render(resolve); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Render = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestRenderDoesNotReparse(t *testing.T) {
	t.Parallel()
	tmpl, err := Parse("x={{a}}")
	if err != nil {
		t.Fatal(err)
	}
	got := tmpl.Render(func(Ref) any { return "{{b}}" })
	if got != "x={{b}}" {
		t.Errorf("Render = %#v, want %q", got, "x={{b}}")
	}
}

func TestRenderNilResolve(t *testing.T) {
	t.Parallel()
	for src, want := range map[string]any{"lit": "lit", "{{a}}": nil, "<{{a}}>": "<>"} {
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if got := tmpl.Render(nil); got != want {
			t.Errorf("Render(nil) of %q = %#v, want %#v", src, got, want)
		}
	}
}

func TestRenderCallsResolveOncePerPlaceholder(t *testing.T) {
	t.Parallel()
	tmpl, err := Parse("{{a}} {{b[1]}} {{a}}")
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	got := tmpl.Render(func(r Ref) any { seen = append(seen, r.String()); return len(seen) })
	if got != "1 2 3" {
		t.Errorf("Render = %#v, want %q", got, "1 2 3")
	}
	if want := []string{"a", "b[1]", "a"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("resolve calls = %q, want %q", seen, want)
	}
}

func TestZeroTemplate(t *testing.T) {
	t.Parallel()
	var tmpl Template
	if !tmpl.IsLiteral() || tmpl.IsWhole() || tmpl.Refs() != nil || tmpl.Render(nil) != "" {
		t.Errorf("zero Template is not the empty literal")
	}
}

func TestRefsReturnsCopy(t *testing.T) {
	t.Parallel()
	tmpl, err := Parse("{{a}}")
	if err != nil {
		t.Fatal(err)
	}
	tmpl.Refs()[0] = Ref{Root: "changed"}
	if got := tmpl.Refs()[0].Root; got != "a" {
		t.Errorf("Root after modifying a copy = %q, want %q", got, "a")
	}
}

func TestConcurrentRender(t *testing.T) {
	t.Parallel()
	tmpl, err := Parse("{{file.path}}:{{inputs.count}}")
	if err != nil {
		t.Fatal(err)
	}
	doc := testDoc()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if got := tmpl.Render(func(r Ref) any { return Lookup(doc, r) }); got != "/in/a.ma:3" {
					t.Errorf("Render = %#v", got)
					return
				}
			}
		})
	}
	wg.Wait()
}
