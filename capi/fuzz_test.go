package main

import (
	"encoding/json"
	"testing"
)

// FuzzSpecRequest feeds arbitrary request bytes to the spec exports: the result is always one JSON
// document and the return code is one of the documented ones.
func FuzzSpecRequest(f *testing.F) {
	for _, s := range []string{
		`{"text": "steps: [{id: a, tool: t}]"}`,
		`{"text": "{\"steps\": []}", "format": "json"}`,
		`{"text": 1}`, `null`, `[]`, `{`, "",
		`{"text": "steps:\n  - id: f\n    kind: foreach\n    items: \"$.a\"\n    steps: [{id: b, tool: t}]"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, fn := range []op{opSpecParse, opSpecValidate} {
			out, rc := dispatch(0, in, fn)
			if rc != rcOK && rc != rcError && rc != rcBadRequest {
				t.Fatalf("rc %d: %s", rc, out)
			}
			var v map[string]any
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("output is not a JSON object: %q", out)
			}
			if rc != rcOK && (v["code"] == nil || v["message"] == nil) {
				t.Fatalf("error without code/message: %s", out)
			}
		}
	})
}
