package main

import (
	"errors"
	"strings"
	"testing"
)

// Issue #26 item 15: text that is not UTF-8 and duplicate keys were accepted (replaced with
// U+FFFD, last key kept); now they are invalid_request naming the byte or the key.
func TestRedteamRequestTextRefusesBadUTF8AndDuplicateKeys(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, says string }{
		{"invalid utf-8 in a string", "{\"text\": \"steps: [{id: a, tool: caf\xe9}]\"}", "not UTF-8 (byte 0xe9 at offset 35)"},
		{"duplicate top-level key", `{"text": "steps: [{id: a, tool: t}]", "text": "steps: []"}`, `key "text" appears twice`},
		{"duplicate nested key", `{"text": "x", "source": "s", "format": "yaml", "x": {"a": 1, "b": {"c": 1, "c": 2}}}`, `key "c" appears twice`},
		{"duplicate key written with an escape", `{"text": "x", "te\u0078t": "y"}`, `key "text" appears twice`},
		{"duplicate after an escaped quote", `{"text": "x\"y\\", "text": 1}`, `key "text" appears twice`},
	}
	for _, tc := range cases {
		out, rc := dispatch(0, []byte(tc.in), opSpecParse)
		m := decodeOut(t, out)
		if rc != rcBadRequest || m["code"] != "invalid_request" || !strings.Contains(m["message"].(string), tc.says) {
			t.Errorf("%s: rc %d %s", tc.name, rc, out)
		}
	}
	// Not duplicates: the same key in sibling objects, in arrays of objects, inside strings, and
	// more than 16 distinct keys (the map path).
	var wide strings.Builder
	wide.WriteString(`{"text": "steps: [{id: a, tool: t}]", "x": {`)
	for i := 0; i < 40; i++ {
		if i > 0 {
			wide.WriteString(",")
		}
		wide.WriteString(`"k` + strings.Repeat("z", i) + `": 1`)
	}
	wide.WriteString(`}}`)
	for _, ok := range []string{
		`[{"a": 1}, {"a": 2}]`,
		`{"a": {"k": 1}, "b": {"k": 2}, "c": "\"a\": \"a\""}`,
		`{"a": [{"k": 1, "j": [1, {"k": 3}]}, {"k": 2}], "k": 0}`,
		`{"a\"": 1, "a": 2, "b": "{\"a\": 1, \"a\": 2}"}`,
		wide.String(),
	} {
		if err := checkRequestText([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	if key, _, dup := duplicateKey([]byte(wide.String()[:len(wide.String())-2] + `, "kzz": 2}}`)); !dup || key != "kzz" {
		t.Errorf("duplicate in a wide object not found: %q %v", key, dup)
	}
}

// BenchmarkCheckRequestText measures the pre-decode check on a calls_complete request carrying a
// 1 MiB tool output of small objects (the worst case: many keys).
func BenchmarkCheckRequestText(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"call_id": 1, "output": [`)
	for i := 0; sb.Len() < 1<<20; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"path": "/proj/shots/sh010/hero_v012.ma", "frame": 1001, "ok": true}`)
	}
	sb.WriteString(`]}`)
	in := []byte(sb.String())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		if err := checkRequestText(in); err != nil {
			b.Fatal(err)
		}
	}
}

// The large-request path of calls_complete (in place, over 64 KiB) refuses the same text.
func TestRedteamLargeCompleteRequestRefusesBadText(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", 70<<10)
	for _, in := range []string{
		`{"call_id": 1, "output": {"name": "caf` + "\xe9" + `", "pad": "` + pad + `"}}`,
		`{"call_id": 1, "output": {"id": 1, "id": 2, "pad": "` + pad + `"}}`,
	} {
		var r completeRequest
		err := r.decodeRequest([]byte(in))
		var br *badRequest
		if !errors.As(err, &br) {
			t.Fatalf("accepted (%v): %.80s", err, in)
		}
	}
}
