package remote

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func parseWire(t *testing.T, wire string) *mcp.CallToolResult {
	t.Helper()
	raw := json.RawMessage(wire)
	res, err := mcp.ParseCallToolResult(&raw)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A dcc-flow worker's files and environment (_meta "dcc-flow/files", "dcc-flow/env") reach the
// Result, a failed call's too, in the order the worker sent them; a server that sends neither
// gives none.
func TestResultFromToolFilesAndEnv(t *testing.T) {
	t.Parallel()
	meta := `"_meta":{"dcc-flow/files":[{"path":"/in/a.ma","role":"read"},{"path":"/out/a.fbx","role":"write","size":3},
		{"path":"/in/a.ma","role":"read"}],"dcc-flow/env":{"version":"2025.3","dcc":"maya","plugins":{"mtoa":"5.4.1"},"n":2,"html":"<b>"}}`
	want := []flowtype.FileUse{{Path: "/in/a.ma", Role: "read"}, {Path: "/out/a.fbx", Role: "write"}, {Path: "/in/a.ma", Role: "read"}}
	const wantEnv = `{"dcc":"maya","html":"<b>","n":2,"plugins":{"mtoa":"5.4.1"},"version":"2025.3"}`
	for _, wire := range []string{
		`{"content":[{"type":"text","text":"1"}],` + meta + `}`,
		`{"isError":true,"content":[{"type":"text","text":"license busy"}],"structuredContent":{"kind":"transient","message":"license busy"},` + meta + `}`,
	} {
		got := resultFromTool(parseWire(t, wire))
		if !reflect.DeepEqual(got.Files, want) || string(got.Env) != wantEnv {
			t.Errorf("%.40s: files %+v env %s", wire, got.Files, got.Env)
		}
		if strings.Contains(wire, "isError") && (got.Kind != "transient" || got.Message != "license busy") {
			t.Errorf("the tool's error is kept: %+v", got)
		}
	}
	for _, wire := range []string{
		`{"content":[{"type":"text","text":"1"}]}`,
		`{"content":[{"type":"text","text":"1"}],"_meta":{"dcc-flow/files":[],"dcc-flow/env":null}}`,
		`{"content":[{"type":"text","text":"1"}],"_meta":{"dcc-flow/files":null,"other":{"x":1}}}`,
	} {
		if got := resultFromTool(parseWire(t, wire)); got.Files != nil || got.Env != nil || got.IsError {
			t.Errorf("%s: %+v", wire, got)
		}
	}
}

// Files or an env of another shape fail the call with kind invalid_output and a message naming
// the key and the entry (the worker is broken; its files cannot be trusted); a tool's own error
// is named in it too.
func TestRedteamResultFromToolBadFilesAndEnv(t *testing.T) {
	t.Parallel()
	big := `{"x":"` + strings.Repeat("y", MaxEnvBytes) + `"}`
	for meta, want := range map[string]string{
		`{"dcc-flow/files":{"path":"/a","role":"read"}}`:                       `_meta["dcc-flow/files"] is an object, not a list`,
		`{"dcc-flow/files":["/a"]}`:                                            `_meta["dcc-flow/files"][0] is the string "/a", not a {"path", "role"} object`,
		`{"dcc-flow/files":[{"path":"/a","role":"read"},{"role":"write"}]}`:    `_meta["dcc-flow/files"][1].path is missing or null; it must be a non-empty string`,
		`{"dcc-flow/files":[{"path":"","role":"read"}]}`:                       `[0].path is the string ""`,
		`{"dcc-flow/files":[{"path":7,"role":"read"}]}`:                        `[0].path is a number`,
		`{"dcc-flow/files":[{"path":"/a","role":"wrote"}]}`:                    `[0].role is the string "wrote"; it must be "read" or "write"`,
		`{"dcc-flow/env":["maya"]}`:                                            `_meta["dcc-flow/env"] is a list, not a JSON object`,
		`{"dcc-flow/env":"maya"}`:                                              `_meta["dcc-flow/env"] is the string "maya", not a JSON object`,
		`{"dcc-flow/env":` + big + `}`:                                         `_meta["dcc-flow/env"] is 65544 bytes of JSON; at most 65536 (64 KiB)`,
		`{"dcc-flow/files":[{"path":"/a","role":"read"}],"dcc-flow/env":true}`: `_meta["dcc-flow/env"] is a boolean`,
	} {
		for _, failed := range []bool{false, true} {
			wire := `{"content":[{"type":"text","text":"1"}],"_meta":` + meta + `}`
			if failed {
				wire = `{"isError":true,"content":[{"type":"text","text":"boom"}],"structuredContent":{"kind":"fatal","message":"boom"},"_meta":` + meta + `}`
			}
			got := resultFromTool(parseWire(t, wire))
			if !got.IsError || got.Kind != run.KindInvalidOutput || got.Output != nil || got.Files != nil || got.Env != nil ||
				!strings.HasPrefix(got.Message, "the worker's answer is not a valid dcc-flow tool result: ") ||
				!strings.Contains(got.Message, want) || failed != strings.HasSuffix(got.Message, "; the tool failed too: fatal: boom") {
				t.Errorf("failed=%v %.80s:\n got %+v\nwant %q", failed, meta, got, want)
			}
		}
	}
}

// filesWorker is a stand-in dcc-flow worker: it answers every tools/call with the files and the
// environment a dcc-flow worker sends (python/dcc_flow/_worker.py), and fails tool "fail".
const filesWorker = `
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m.get("method") == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "stub", "version": "0"}}
    elif m.get("method") == "tools/call":
        meta = {"dcc-flow/files": [{"path": "/in/" + m["params"]["name"] + ".ma", "role": "read"}, {"path": "/out/x.fbx", "role": "write"}],
                "dcc-flow/env": {"dcc": "maya", "version": "2025.3"}}
        if m["params"]["name"] == "fail":
            r = {"isError": True, "content": [{"type": "text", "text": "no licence"}], "structuredContent": {"kind": "transient", "message": "no licence"}, "_meta": meta}
        else:
            r = {"content": [{"type": "text", "text": "{\"ok\": 1}"}], "structuredContent": {"ok": 1}, "_meta": meta}
    else:
        r = {}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
`

// Through a pool of stand-in workers: a call's Result carries the files and env its worker sent.
func TestWorkerResultCarriesFilesAndEnv(t *testing.T) {
	needPOSIXTools(t)
	t.Parallel()
	b := setup(t, "stdio", func(c *Config) {
		c.Command = []string{"python3", "-c", filesWorker}
		c.Workers = 1
	})
	for _, tool := range []string{"export", "fail"} {
		res := b.call(t, nil, tool, nil)
		want := []flowtype.FileUse{{Path: "/in/" + tool + ".ma", Role: "read"}, {Path: "/out/x.fbx", Role: "write"}}
		if !reflect.DeepEqual(res.Files, want) || string(res.Env) != `{"dcc":"maya","version":"2025.3"}` || res.Worker == nil {
			t.Fatalf("%s: %+v", tool, res)
		}
		if (tool == "fail") != (res.IsError && res.Kind == "transient") {
			t.Fatalf("%s: %+v", tool, res)
		}
	}
}
