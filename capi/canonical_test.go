package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// decodedCanonical is what the C ABI sent before canonicalRaw: decode as the engine does
// (spec.DecodeValue: integers beyond ±2^53 exact), then encode.
func decodedCanonical(t testing.TB, raw string) string {
	t.Helper()
	v, err := spec.DecodeValue([]byte(raw))
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	b, err := spec.CanonicalValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var canonicalCorpus = []string{
	`null`, `true`, `false`, `0`, `-0`, `1.0`, `1e2`, `1E-7`, `0.000001`, `1e21`, `123456789012345678901234`, `-1.5e-300`,
	`""`, `"abc"`, `"a\"b"`, `"\u00e9\n\t\b\f\u0001"`, `"é ü 中"`, `"<&>"`, `"\u2028\u2029"`, "\"\u2028\"", `"\ud800"`, `"\/"`,
	`[]`, `{}`, ` [ 1 , 2 , [ ] , { } ] `, `{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"b":{"d":[1,{"z":0,"y":1}],"c":null},"a":"x"}`,
	`{"é":1,"e":2,"\u0065\u0301":3}`, `{"a\nb":1,"a":{"a":{"a":[]}}}`, "\t{\n \"k\" : \"v\" \r\n}\n", `[1,"a",{"x":[true,false,null]}]`,
	`{"files":[{"path":"/a.ma","size":1024,"ok":true},{"size":2048,"path":"/b.ma"}]}`, `{"":0,"\u0000":1}`, `[1e400]`,
}

func TestCanonicalRawMatchesDecodeEncode(t *testing.T) {
	t.Parallel()
	for _, raw := range canonicalCorpus {
		var v any
		if json.Unmarshal([]byte(raw), &v) != nil {
			if got := string(canonicalRaw([]byte(raw))); got != "null" {
				t.Errorf("%q (does not decode) = %s, want null", raw, got)
			}
			continue
		}
		if got, want := string(canonicalRaw([]byte(raw))), decodedCanonical(t, raw); got != want {
			t.Errorf("canonicalRaw(%q)\n got %s\nwant %s", raw, got, want)
		}
	}
	deep := strings.Repeat(`{"a":[`, 2000) + "1" + strings.Repeat("]}", 2000)
	if got := string(canonicalRaw([]byte(deep))); got != decodedCanonical(t, deep) {
		t.Error("deep nesting differs")
	}
}

func FuzzCanonicalRaw(f *testing.F) {
	for _, raw := range canonicalCorpus {
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		var v any
		if json.Unmarshal([]byte(raw), &v) != nil {
			return
		}
		if got, want := string(canonicalRaw([]byte(raw))), decodedCanonical(t, raw); got != want {
			t.Fatalf("canonicalRaw(%q)\n got %s\nwant %s", raw, got, want)
		}
	})
}

// calls_complete reads its request in place (no json.Decoder buffer), as strictly as decode.
func TestCompleteRequestDecoding(t *testing.T) {
	t.Parallel()
	pad := `"output": "` + strings.Repeat("x", 64<<10) + `", `
	var r completeRequest
	if err := r.decodeRequest([]byte(`{"call_id": 7, "output": {"b": [1, 2], "a": "x"}, "NEXT": {"max": 2}}`)); err != nil {
		t.Fatal(err)
	}
	if r.CallID != 7 || string(r.Output) != `{"b": [1, 2], "a": "x"}` || r.Next == nil || r.Next.Max != 2 || r.Error != nil {
		t.Fatalf("%+v", r)
	}
	r = completeRequest{}
	if err := r.decodeRequest([]byte(`{` + pad + `"call_id": 8, "error": {"kind": "fatal", "message": "m"}}`)); err != nil || r.Error == nil || r.Error.Kind != "fatal" {
		t.Fatalf("%+v %v", r, err)
	}
	for in, want := range map[string]string{
		`{"call_id": 1, "outptu": 2}`:                    `invalid request JSON: json: unknown field "outptu"`,
		`{"call_id": 1, "error": {"kind": "x", "y": 1}}`: `invalid request JSON: json: unknown field "y"`,
		`{"call_id": 1, "next": {"lanes": "main"}}`:      "invalid request JSON: json: cannot unmarshal string",
		`{"call_id": 1} {}`:                              "invalid request JSON: invalid character '{' after top-level value",
		`[1]`:                                            "invalid request JSON: json: cannot unmarshal array",
		`{"call_id": 1, "next": }`:                       "invalid request JSON: invalid character '}'",
	} {
		var r completeRequest
		if strings.HasPrefix(in, "{") {
			in = "{" + pad + in[1:] // over 64 KiB: the in-place path
		}
		err := r.decodeRequest([]byte(in))
		var br *badRequest
		if !errors.As(err, &br) || !strings.HasPrefix(br.msg, want) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
}
