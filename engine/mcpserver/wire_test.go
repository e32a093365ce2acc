package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

var update = flag.Bool("update", false, "rewrite the golden wire files in testdata/")

var (
	runIDRe = regexp.MustCompile(`r[0-9a-f]{28}`)
	timeRe  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	hashRe  = regexp.MustCompile(`"[0-9a-f]{64}"`)
)

// normalize makes a wire message stable: run ids, times and hashes are replaced.
func normalize(b []byte) []byte {
	b = runIDRe.ReplaceAll(b, []byte("<run-id>"))
	b = timeRe.ReplaceAll(b, []byte("<time>"))
	return hashRe.ReplaceAll(b, []byte(`"<sha256>"`))
}

// TestWireGolden drives every tool with raw JSON-RPC and compares each request/response pair with
// testdata/wire.golden (go test -run TestWireGolden -update rewrites it).
func TestWireGolden(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, _ := spec.ParseString(gated)
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
	srv := mcpserver.New(e).MCPServer()
	var out bytes.Buffer
	id := ""
	exchange := func(title, req string) map[string]any {
		t.Helper()
		req = runIDRe.ReplaceAllString(req, id)
		resp := srv.HandleMessage(ctx, json.RawMessage(req))
		raw, err := json.MarshalIndent(resp, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, []byte(req), "", "  ")
		out.WriteString("## " + title + "\n-> " + string(normalize(pretty.Bytes())) + "\n<- " + string(normalize(raw)) + "\n\n")
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return m
	}
	exchange("initialize", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"golden","version":"1"}}}`)
	exchange("tools/list", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	exchange("workflows_lookup", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"workflows_lookup","arguments":{"query":"gated"}}}`)
	m := exchange("workflows_run", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"workflows_run","arguments":{"workflow":"gated","inputs":{"shot":"sh010"}}}}`)
	id = m["result"].(map[string]any)["structuredContent"].(map[string]any)["workflow_id"].(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := e.Status(ctx, id)
		if info.Status == "waiting" || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	exchange("workflows_get_status (waiting)", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"workflows_get_status","arguments":{"workflow_id":"r0000000000000000000000000000"}}}`)
	exchange("workflows_approve", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"workflows_approve","arguments":{"workflow_id":"r0000000000000000000000000000","step":"human_gate","approved":true,"by":"sup"}}}`)
	if _, err := e.Wait(ctx, id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	exchange("workflows_get_status (completed)", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"workflows_get_status","arguments":{"workflow_id":"r0000000000000000000000000000"}}}`)
	exchange("workflows_cancel (finished run: nothing to do)", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"workflows_cancel","arguments":{"workflow_id":"r0000000000000000000000000000"}}}`)
	exchange("workflows_resume (completed, no force_steps: tool error)", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"workflows_resume","arguments":{"workflow_id":"r0000000000000000000000000000"}}}`)
	exchange("workflows_run (invalid spec: tool error with problems)", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"workflows_run","arguments":{"spec":"steps: [{id: a, tol: t}]"}}}`)
	exchange("unknown tool (protocol error)", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	exchange("resources/read catalog", `{"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":"dccflow://catalog"}}`)

	golden := filepath.Join("testdata", "wire.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(want, out.Bytes()) {
		t.Fatalf("wire messages differ from %s (rerun with -update if the change is intended):\n%s", golden, out.String())
	}
}
