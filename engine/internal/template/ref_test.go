package template

import (
	"reflect"
	"testing"
)

func TestRefString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ref  Ref
		want string
	}{
		{Ref{Root: "item"}, "item"},
		{Ref{Root: "inputs", Path: []Segment{{Name: "date"}}}, "inputs.date"},
		{Ref{Root: "steps", Path: []Segment{{Name: "list"}, {Name: "files"}, {Index: 0, IsIndex: true}}}, "steps.list.files[0]"},
		{Ref{Root: "a", Path: []Segment{{Index: 3, IsIndex: true}, {Index: 10, IsIndex: true}, {Name: "b"}}}, "a[3][10].b"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			t.Parallel()
			if got := tt.ref.String(); got != tt.want {
				t.Errorf("String = %q, want %q", got, tt.want)
			}
		})
	}
}

func mustRef(t *testing.T, path string) Ref {
	t.Helper()
	tmpl, err := Parse("{{" + path + "}}")
	if err != nil {
		t.Fatal(err)
	}
	return tmpl.Refs()[0]
}

func TestLookup(t *testing.T) {
	t.Parallel()
	doc := map[string]any{
		"inputs": map[string]any{"date": "2024-05-01", "none": nil},
		"list":   map[string]any{"files": []any{map[string]any{"path": "/a"}, "b", []any{1.0, 2.0}}},
		"num":    1.5,
		"str":    "abc",
		"null":   nil,
	}
	tests := []struct {
		path string
		want any
	}{
		{"inputs.date", "2024-05-01"},
		{"inputs", doc["inputs"]},
		{"inputs.none", nil},
		{"inputs.missing", nil},
		{"missing", nil},
		{"missing.deeper[0]", nil},
		{"list.files[0].path", "/a"},
		{"list.files[1]", "b"},
		{"list.files[2][1]", 2.0},
		{"list.files[3]", nil},
		{"list.files[999999999]", nil},
		{"list.files.path", nil},
		{"list[0]", nil},
		{"num.x", nil},
		{"num[0]", nil},
		{"str[0]", nil},
		{"str.len", nil},
		{"null.x", nil},
		{"list.files[1].x", nil},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			t.Parallel()
			if got := Lookup(doc, mustRef(t, tt.path)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lookup = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestLookupNilDoc(t *testing.T) {
	t.Parallel()
	if got := Lookup(nil, Ref{Root: "a", Path: []Segment{{Name: "b"}}}); got != nil {
		t.Errorf("Lookup(nil) = %#v, want nil", got)
	}
}
