package engine

import (
	"os"
	"reflect"
	"runtime"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// filesWorker is a stand-in dcc-flow worker that answers every tools/call with the files and the
// environment a dcc-flow worker sends (_meta "dcc-flow/files", "dcc-flow/env"), failing tool
// "fail".
const filesWorker = `
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m.get("method") == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "stub", "version": "0"}}
    elif m.get("method") == "tools/call":
        meta = {"dcc-flow/files": [{"path": "/in/a.ma", "role": "read"}, {"path": "/out/a.fbx", "role": "write"}],
                "dcc-flow/env": {"dcc": "maya", "version": "2025.3"}}
        if m["params"]["name"] == "fail":
            r = {"isError": True, "content": [{"type": "text", "text": "no licence"}], "structuredContent": {"kind": "transient", "message": "no licence"}, "_meta": meta}
        else:
            r = {"content": [{"type": "text", "text": "{\"ok\": 1}"}], "structuredContent": {"ok": 1}, "_meta": meta}
    else:
        r = {}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
`

// A pool worker's files and environment are carried from remote.Result to the ToolResult of
// the step's call, a failed call's too.
func TestPoolCallerCarriesFilesAndEnv(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in worker is a python3 script")
	}
	t.Parallel()
	pool, err := newRemotePool(map[string]RemoteConfig{"maya": {Command: []string{"python3", "-c", filesWorker}, Workers: 1}}, os.Environ, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	want := []flowtype.FileUse{{Path: "/in/a.ma", Role: "read"}, {Path: "/out/a.fbx", Role: "write"}}
	for _, tool := range []string{"export", "fail"} {
		res, err := poolCaller{pool}.CallRemote(t.Context(), "maya", tool, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Files, want) || string(res.Env) != `{"dcc":"maya","version":"2025.3"}` {
			t.Fatalf("%s: files %+v env %s", tool, res.Files, res.Env)
		}
		if (tool == "fail") != (res.Error != nil && res.Error.Kind == "transient") {
			t.Fatalf("%s: %+v", tool, res)
		}
	}
}
