package spec_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Issue #26 item 4: integers beyond ±2^53 are never rounded; everything else decodes as before.
func TestRedteamDecodeValueKeepsLargeIntegersExact(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want any
	}{
		{`9007199254740992`, float64(1 << 53)},
		{`9007199254740993`, json.Number("9007199254740993")},
		{`-9007199254740993`, json.Number("-9007199254740993")},
		{`18446744073709551615`, json.Number("18446744073709551615")},
		{`123456789012345678901234567890`, json.Number("123456789012345678901234567890")},
		{`1234567890123456.5`, 1234567890123456.5},
		{`1e300`, 1e300},
		{`0.1`, 0.1},
		{`{"id": 18446744073709551615, "n": 3, "s": "12345678901234567890"}`,
			map[string]any{"id": json.Number("18446744073709551615"), "n": float64(3), "s": "12345678901234567890"}},
		{`[1, 9007199254740993, [true, null]]`, []any{float64(1), json.Number("9007199254740993"), []any{true, nil}}},
	}
	for _, c := range cases {
		got, err := spec.DecodeValue([]byte(c.in))
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Fatalf("%s: got %#v, want %#v", c.in, got, c.want)
		}
		// Encoding it again gives the same numbers.
		back, err := spec.CanonicalValue(got)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(c.in, "18446744073709551615") && !strings.Contains(string(back), "18446744073709551615") {
			t.Fatalf("%s: encoded as %s", c.in, back)
		}
	}
	for _, bad := range []string{`1e400`, `12345678901234567890 1`, `{"a": 1e99999}`, `[1,`} {
		if v, err := spec.DecodeValue([]byte(bad)); err == nil {
			t.Fatalf("%s: want an error, got %#v", bad, v)
		}
	}
	var o spec.Object
	if err := json.Unmarshal([]byte(`{"asset": 9007199254740993}`), &o); err != nil || o["asset"] != json.Number("9007199254740993") {
		t.Fatalf("Object: %#v %v", o, err)
	}
	if err := json.Unmarshal([]byte(`[1]`), &o); err == nil {
		t.Fatal("Object accepted an array")
	}
	if v, ok := spec.NumberValue("0x1F"); ok {
		t.Fatalf("NumberValue(0x1F) = %v", v) // YAML-only forms are the YAML decoder's business
	}
}
