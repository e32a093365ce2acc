package remote

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestResultFromTool(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		wire string // a tools/call result as it arrives
		want Result
	}{
		{"structured content wins over text",
			`{"content":[{"type":"text","text":"ignored"}],"structuredContent":{"n":1,"s":"x"}}`,
			Result{Output: map[string]any{"n": json.Number("1"), "s": "x"}}},
		{"text parsed as JSON",
			`{"content":[{"type":"text","text":" [1, {\"a\": null}] "}]}`,
			Result{Output: []any{json.Number("1"), map[string]any{"a": nil}}}},
		{"JSON scalar text",
			`{"content":[{"type":"text","text":"42"}]}`,
			Result{Output: json.Number("42")}},
		{"plain text",
			`{"content":[{"type":"text","text":"exported 3 files"}]}`,
			Result{Output: map[string]any{"text": "exported 3 files"}}},
		{"text blocks joined",
			`{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}`,
			Result{Output: map[string]any{"text": "a\nb"}}},
		{"JSON followed by more is text",
			`{"content":[{"type":"text","text":"{} {}"}]}`,
			Result{Output: map[string]any{"text": "{} {}"}}},
		{"null structured content falls back to text",
			`{"content":[{"type":"text","text":"{\"ok\":true}"}],"structuredContent":null}`,
			Result{Output: map[string]any{"ok": true}}},
		{"no content",
			`{"content":[]}`,
			Result{Output: map[string]any{"text": ""}}},
		{"image kept beside the text",
			`{"content":[{"type":"text","text":"{\"w\":2}"},{"type":"image","data":"AAAA","mimeType":"image/png"}]}`,
			Result{Output: map[string]any{"text": `{"w":2}`, "content": []any{map[string]any{"type": "image", "data": "AAAA", "mimeType": "image/png"}}}}},
		{"error with structured kind",
			`{"isError":true,"content":[{"type":"text","text":"Maya is busy"}],"structuredContent":{"kind":"transient"}}`,
			Result{Output: map[string]any{"kind": "transient"}, IsError: true, Kind: "transient", Message: "Maya is busy"}},
		{"error with kind and message in JSON text",
			`{"isError":true,"content":[{"type":"text","text":"{\"kind\":\"permission\",\"message\":\"read-only share\"}"}]}`,
			Result{Output: map[string]any{"kind": "permission", "message": "read-only share"}, IsError: true, Kind: "permission", Message: "read-only share"}},
		{"error without kind",
			`{"isError":true,"content":[{"type":"text","text":"Traceback: boom"}]}`,
			Result{Output: map[string]any{"text": "Traceback: boom"}, IsError: true, Kind: "error", Message: "Traceback: boom"}},
		{"error with a non-string kind",
			`{"isError":true,"content":[{"type":"text","text":"x"}],"structuredContent":{"kind":7}}`,
			Result{Output: map[string]any{"kind": json.Number("7")}, IsError: true, Kind: "error", Message: "x"}},
		{"error with a traceback (a dcc-flow worker)",
			`{"isError":true,"content":[{"type":"text","text":"ValueError: bad"}],"structuredContent":{"kind":"invalid_input","message":"ValueError: bad","trace":"Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: bad\n"}}`,
			Result{Output: map[string]any{"kind": "invalid_input", "message": "ValueError: bad", "trace": "Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: bad\n"},
				IsError: true, Kind: "invalid_input", Message: "ValueError: bad", Trace: "Traceback (most recent call last):\n  File \"t.py\", line 1\nValueError: bad\n"}},
		{"a worker's output lines (_meta)",
			`{"content":[{"type":"text","text":"1"}],"_meta":{"dcc-flow/output":[{"stream":"stdout","text":"opening a.ma"},{"stream":"stderr","text":"Warning: x"},"old style",{"stream":"other","text":"odd"},{"stream":"stdout"}],"dcc-flow/output-dropped":3}}`,
			Result{Output: json.Number("1"), Logs: []run.LogLine{{Stream: "stdout", Text: "opening a.ma"}, {Stream: "stderr", Text: "Warning: x"},
				{Stream: "stdout", Text: "old style"}, {Stream: "stdout", Text: "odd"}}, LogsDropped: 3}},
		{"an error keeps its output lines",
			`{"isError":true,"content":[{"type":"text","text":"bad"}],"_meta":{"dcc-flow/output":[{"stream":"stderr","text":"why"}]}}`,
			Result{Output: map[string]any{"text": "bad"}, IsError: true, Kind: "error", Message: "bad", Logs: []run.LogLine{{Stream: "stderr", Text: "why"}}}},
		{"error without any text",
			`{"isError":true,"content":[]}`,
			Result{Output: map[string]any{"text": ""}, IsError: true, Kind: "error", Message: "the remote tool reported an error without a message"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := json.RawMessage(tc.wire)
			res, err := mcp.ParseCallToolResult(&raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := resultFromTool(res); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("resultFromTool =\n%#v\nwant\n%#v", got, tc.want)
			}
		})
	}
}

// A result built in Go (no wire bytes) uses StructuredContent.
func TestResultFromToolInProcess(t *testing.T) {
	t.Parallel()
	got := resultFromTool(mcp.NewToolResultStructuredOnly(map[string]int{"n": 2}))
	if want := (Result{Output: map[string]any{"n": json.Number("2")}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v, want %#v", got, want)
	}
}
