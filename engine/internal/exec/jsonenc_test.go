package exec

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// reference is encoding/json with sorted keys and HTML escaping off: what marshalJSON must write.
func reference(t *testing.T, v any) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}

func TestMarshalJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	values := []any{
		nil, true, false, "", "plain", "quote \" backslash \\ slash /", "tab\tnl\nctl\x01\x1f del\x7f",
		"<html> & 'amp'", "é ü 日本 🎬", "bad \xff utf8 \xc3", "line\u2028sep\u2029", 0.0, math.Copysign(0, -1),
		1.0, -3.0, 0.1, 1e20, 1e21, 1e-6, 1e-7, 123456789012345678.0, 3.14159, -2.5e-10, 1e300,
		int(7), int64(-9), json.Number("12.5e3"), json.RawMessage(`{"a":[1,2]}`),
		[]any{}, []any{1.0, "x", nil, []any{true}}, map[string]any{},
		map[string]any{"b": 1.0, "a": map[string]any{"z": []any{"<"}, "y": nil}, "é": "x", "": 0.5},
		map[string]any{"k1": 1.0, "k2": 2.0, "k3": 3.0, "k4": 4.0, "k5": 5.0, "k6": 6.0, "k7": 7.0, "k8": 8.0, "k9": 9.0, "k0": 0.0},
		struct {
			A int    `json:"a"`
			B string `json:"b"`
		}{1, "<x>"},
	}
	for _, v := range values {
		got, err := marshalJSON(v)
		if err != nil {
			t.Fatalf("%#v: %v", v, err)
		}
		want := reference(t, v)
		if _, isStruct := v.(struct {
			A int    `json:"a"`
			B string `json:"b"`
		}); isStruct {
			want = `{"a":1,"b":"\u003cx\u003e"}` // encoding/json fallback escapes HTML
		}
		if string(got) != want {
			t.Errorf("%#v:\n got %s\nwant %s", v, got, want)
		}
	}
	for _, bad := range []any{math.NaN(), math.Inf(1), []any{math.Inf(-1)}, json.Number("1x"), json.RawMessage(`{`), map[string]any{"f": func() {}}} {
		if _, err := marshalJSON(bad); err == nil {
			t.Errorf("%#v should fail", bad)
		}
	}
}

// FuzzMarshalJSONMatchesEncodingJSON checks marshalJSON against encoding/json on every JSON value
// the fuzzer finds, decoded as the engine decodes tool outputs (spec.DecodeValue: large integers
// as json.Number) and as plain encoding/json does (float64 only).
func FuzzMarshalJSONMatchesEncodingJSON(f *testing.F) {
	for _, seed := range []string{`null`, `{"b":1,"a":[true,"<x>",1e21,0.1]}`, `"bad \u2028 \ud800"`, `[18446744073709551615, -0, 1e-7]`,
		`{"é":{"":{"k":"\u0000"}}}`, `123456789012345678901234567890`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var plain any
		if json.Unmarshal(data, &plain) != nil {
			return
		}
		exact, err := spec.DecodeValue(data)
		if err != nil {
			t.Fatalf("encoding/json decodes %q but spec.DecodeValue fails: %v", data, err)
		}
		for _, v := range []any{plain, exact} {
			got, err := marshalJSON(v)
			if err != nil {
				t.Fatalf("%q: %v", data, err)
			}
			if want := reference(t, v); string(got) != want {
				t.Fatalf("%q:\n got %s\nwant %s", data, got, want)
			}
		}
	})
}
