package template

import (
	"encoding/json"
	"math"
	"testing"
)

func TestStringify(t *testing.T) {
	t.Parallel()
	type custom struct {
		A int `json:"a"`
	}
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"nil", nil, ""},
		{"string", "a b", "a b"},
		{"empty string", "", ""},
		{"true", true, "true"},
		{"false", false, "false"},
		{"zero", 0.0, "0"},
		{"negative zero", math.Copysign(0, -1), "-0"},
		{"integer float", 3.0, "3"},
		{"negative integer float", -42.0, "-42"},
		{"large integer float", 1234567890123.0, "1234567890123"},
		{"2^53", 9007199254740992.0, "9007199254740992"},
		{"1e20", 1e20, "100000000000000000000"},
		{"1e21", 1e21, "1e+21"},
		{"fraction", 0.1, "0.1"},
		{"fraction 2", 2.5, "2.5"},
		{"small", 0.000001, "0.000001"},
		{"tiny", 1e-7, "1e-7"},
		{"tiny negative", -1.5e-10, "-1.5e-10"},
		{"NaN", math.NaN(), "NaN"},
		{"+Inf", math.Inf(1), "+Inf"},
		{"-Inf", math.Inf(-1), "-Inf"},
		{"float32", float32(0.1), "0.1"},
		{"int", 7, "7"},
		{"int8", int8(-8), "-8"},
		{"int64", int64(-1 << 62), "-4611686018427387904"},
		{"uint64", uint64(math.MaxUint64), "18446744073709551615"},
		{"uint8", uint8(255), "255"},
		{"json.Number", json.Number("12.50"), "12.50"},
		{"empty object", map[string]any{}, "{}"},
		{"object sorted", map[string]any{"b": 1.0, "a": []any{true, nil, "x"}}, `{"a":[true,null,"x"],"b":1}`},
		{"no HTML escape", map[string]any{"s": "a<b>&c"}, `{"s":"a<b>&c"}`},
		{"empty array", []any{}, "[]"},
		{"nil array", []any(nil), "null"},
		{"nested", []any{map[string]any{"path": "/x", "n": 2.0}}, `[{"n":2,"path":"/x"}]`},
		{"array of float", []any{1.0, 0.5, 1e21}, "[1,0.5,1e+21]"},
		{"struct", custom{A: 1}, `{"a":1}`},
		{"unencodable", map[string]any{"f": math.NaN()}, "map[f:NaN]"},
		{"channel", make(chan int), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Stringify(tt.v)
			if tt.name == "channel" {
				if got == "" {
					t.Errorf("Stringify(chan) is empty, want fmt's %%v")
				}
				return
			}
			if got != tt.want {
				t.Errorf("Stringify(%#v) = %q, want %q", tt.v, got, tt.want)
			}
		})
	}
}

func TestStringifyMatchesJSONForFloats(t *testing.T) {
	t.Parallel()
	for _, f := range []float64{0, 1, -1, 0.1, 1.0 / 3, 123456.789, 1e-6, 9.99e-7, 1e20, 9.99e20, 1e21, 1e300, -1e-300, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := Stringify(f); got != string(b) {
			t.Errorf("Stringify(%v) = %q, json.Marshal = %q", f, got, b)
		}
	}
}
