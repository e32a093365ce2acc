package expr

import (
	"encoding/json"
	"math"
	"reflect"
	"testing"
)

func TestTruthy(t *testing.T) {
	t.Parallel()
	var nilPtr *int
	one := 1
	tests := []struct {
		name string
		v    any
		want bool
	}{
		{"nil", nil, false},
		{"false", false, false},
		{"true", true, true},
		{"zero", 0.0, false},
		{"negative zero", math.Copysign(0, -1), false},
		{"one", 1.0, true},
		{"negative", -0.5, true},
		{"NaN", math.NaN(), true},
		{"int zero", 0, false},
		{"int", 3, true},
		{"int64 zero", int64(0), false},
		{"uint8 zero", uint8(0), false},
		{"float32 zero", float32(0), false},
		{"json.Number 0", json.Number("0"), false},
		{"json.Number 0.0", json.Number("0.0"), false},
		{"json.Number 2", json.Number("2"), true},
		{"empty string", "", false},
		{"string", "x", true},
		{`string "false"`, "false", true},
		{`string "0"`, "0", true},
		{"empty array", []any{}, false},
		{"nil array", []any(nil), false},
		{"array of false", []any{false}, true},
		{"empty object", map[string]any{}, false},
		{"nil object", map[string]any(nil), false},
		{"object", map[string]any{"a": nil}, true},
		{"empty []string", []string{}, false},
		{"[]string", []string{""}, true},
		{"empty map[string]int", map[string]int{}, false},
		{"nil pointer", nilPtr, false},
		{"pointer", &one, true},
		{"struct", struct{}{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Truthy(tt.v); got != tt.want {
				t.Errorf("Truthy(%#v) = %v, want %v", tt.v, got, tt.want)
			}
		})
	}
}

func TestItems(t *testing.T) {
	t.Parallel()
	obj := map[string]any{"path": "/a"}
	tests := []struct {
		name string
		v    any
		want []any
	}{
		{"nil", nil, nil},
		{"array", []any{1.0, "b", nil}, []any{1.0, "b", nil}},
		{"empty array", []any{}, []any{}},
		{"object", obj, []any{obj}},
		{"empty object", map[string]any{}, []any{map[string]any{}}},
		{"string", "x", []any{"x"}},
		{"empty string", "", []any{""}},
		{"number", 2.0, []any{2.0}},
		{"false", false, []any{false}},
		{"int", 3, []any{3}},
		{"json.Number", json.Number("4"), []any{json.Number("4")}},
		{"[]string", []string{"a", "b"}, []any{"a", "b"}},
		{"[]map", []map[string]any{obj}, []any{obj}},
		{"array type", [2]int{1, 2}, []any{1, 2}},
		{"nil []string", []string(nil), []any{}},
		{"[]byte is a scalar", []byte("ab"), []any{[]byte("ab")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Items(tt.v); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Items(%#v) = %#v, want %#v", tt.v, got, tt.want)
			}
		})
	}
}

func TestItemsDoesNotCopyArrays(t *testing.T) {
	t.Parallel()
	in := []any{1.0, 2.0}
	if got := Items(in); &got[0] != &in[0] {
		t.Errorf("Items copied a []any")
	}
}
