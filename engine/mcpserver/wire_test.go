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

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// goldenSession is a client session whose notifications the test reads from ch.
type goldenSession struct{ ch chan mcp.JSONRPCNotification }

func (*goldenSession) Initialize()                                           {}
func (*goldenSession) Initialized() bool                                     { return true }
func (g *goldenSession) NotificationChannel() chan<- mcp.JSONRPCNotification { return g.ch }
func (*goldenSession) SessionID() string                                     { return "golden" }

var update = flag.Bool("update", false, "rewrite the golden wire files in testdata/")

var (
	runIDRe = regexp.MustCompile(`r[0-9a-f]{28}`)
	timeRe  = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	hashRe  = regexp.MustCompile(`"[0-9a-f]{64}"`)
	// the engine's host and pid in an attempt record, in JSON or in JSON text inside JSON
	hostRe = regexp.MustCompile(`(\\?"host\\?":\s*\\?")[^"\\]*`)
	pidRe  = regexp.MustCompile(`(\\?"pid\\?":\s*)\d+`)

	// a run's status and completed steps, in JSON or in JSON text inside JSON
	runStatusRe   = regexp.MustCompile(`(\\?"status\\?":\s*\\?")(running|waiting)`)
	runProgressRe = regexp.MustCompile(`(\\?"completed\\?":\s*)[01]\b`)
)

// normalize makes a wire message stable: run ids, times and hashes are replaced.
func normalize(b []byte) []byte {
	b = runIDRe.ReplaceAll(b, []byte("<run-id>"))
	b = timeRe.ReplaceAll(b, []byte("<time>"))
	b = hostRe.ReplaceAll(b, []byte("${1}<host>"))
	b = pidRe.ReplaceAll(b, []byte("${1}0"))
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
	ms := mcpserver.New(e)
	srv := ms.MCPServer()
	var out bytes.Buffer
	id := ""
	reqCtx := ctx // the context of HandleMessage: no session until the session part below
	mask := func(b []byte) []byte { return b }
	exchange := func(title, req string) map[string]any {
		t.Helper()
		req = runIDRe.ReplaceAllString(req, id)
		resp := srv.HandleMessage(reqCtx, json.RawMessage(req))
		raw, err := json.MarshalIndent(resp, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, []byte(req), "", "  ")
		out.WriteString("## " + title + "\n-> " + string(normalize(pretty.Bytes())) + "\n<- " + string(mask(normalize(raw))) + "\n\n")
		var m map[string]any
		_ = json.Unmarshal(raw, &m)
		return m
	}
	exchange("initialize", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"golden","version":"1"}}}`)
	exchange("tools/list", `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	exchange("workflows_lookup", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"workflows_lookup","arguments":{"query":"gated"}}}`)
	// What workflows_run answers at once depends on how far the run got meanwhile: the first
	// step done or not, already waiting for the approval or not.
	mask = func(b []byte) []byte {
		b = runStatusRe.ReplaceAll(b, []byte(`${1}<running or waiting>`))
		return runProgressRe.ReplaceAll(b, []byte(`${1}<0 or 1>`))
	}
	m := exchange("workflows_run", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"workflows_run","arguments":{"workflow":"gated","inputs":{"shot":"sh010"}}}}`)
	id = m["result"].(map[string]any)["structuredContent"].(map[string]any)["workflow_id"].(string)
	mask = func(b []byte) []byte { return b }
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
	exchange("workflows_pause (finished run: tool error invalid_state)", `{"jsonrpc":"2.0","id":30,"method":"tools/call","params":{"name":"workflows_pause","arguments":{"workflow_id":"r0000000000000000000000000000","reason":"farm full","by":"wrangler"}}}`)
	exchange("workflows_resume (completed, no force_steps: tool error)", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"workflows_resume","arguments":{"workflow_id":"r0000000000000000000000000000"}}}`)
	exchange("workflows_run (invalid spec: tool error with problems)", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"workflows_run","arguments":{"spec":"steps: [{id: a, tol: t}]"}}}`)
	exchange("workflows_run dry_run (no tool called, nothing recorded)", `{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"workflows_run","arguments":{"workflow":"gated","inputs":{"shot":"sh020"},"dry_run":true,"fixtures":{"prep":{"value":"fixture"}},"approvals":{"human_gate":false}}}}`)
	exchange("unknown tool (protocol error)", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"nope","arguments":{}}}`)
	exchange("resources/read catalog", `{"jsonrpc":"2.0","id":12,"method":"resources/read","params":{"uri":"dccflow://catalog"}}`)
	// Without a session (HandleMessage) a subscription is acknowledged and tracks nothing.
	exchange("resources/subscribe run", `{"jsonrpc":"2.0","id":13,"method":"resources/subscribe","params":{"uri":"dccflow://runs/r0000000000000000000000000000"}}`)
	exchange("resources/unsubscribe run", `{"jsonrpc":"2.0","id":14,"method":"resources/unsubscribe","params":{"uri":"dccflow://runs/r0000000000000000000000000000"}}`)
	exchange("resources/subscribe unknown run (protocol error naming the URI)", `{"jsonrpc":"2.0","id":15,"method":"resources/subscribe","params":{"uri":"dccflow://runs/nope"}}`)
	exchange("resources/subscribe catalog (protocol error: only runs send updates)", `{"jsonrpc":"2.0","id":16,"method":"resources/subscribe","params":{"uri":"dccflow://catalog"}}`)
	exchange("resources/subscribe unknown resource", `{"jsonrpc":"2.0","id":17,"method":"resources/subscribe","params":{"uri":"file:///etc/passwd"}}`)
	exchange("resources/subscribe without uri (mcp-go: invalid params)", `{"jsonrpc":"2.0","id":18,"method":"resources/subscribe","params":{}}`)

	// In a session: the notifications/resources/updated a subscription brings.
	sess := &goldenSession{ch: make(chan mcp.JSONRPCNotification, 1000)}
	if err := srv.RegisterSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	reqCtx = srv.WithContext(ctx, sess)
	interval := ms.UpdateInterval()
	// updates waits until no notification came for three intervals and returns the
	// notifications/resources/updated received; notification prints the last one.
	updates := func() []mcp.JSONRPCNotification {
		var got []mcp.JSONRPCNotification
		for {
			select {
			case n := <-sess.ch:
				if n.Method == string(mcp.MethodNotificationResourceUpdated) {
					got = append(got, n)
				}
			case <-time.After(3 * interval):
				return got
			}
		}
	}
	notification := func(title string, got []mcp.JSONRPCNotification) {
		t.Helper()
		if len(got) == 0 {
			t.Fatalf("%s: no notifications/resources/updated", title)
		}
		raw, _ := json.MarshalIndent(got[len(got)-1], "", "  ")
		out.WriteString("## " + title + "\n<~ " + string(normalize(raw)) + "\n\n")
	}
	// The run starts outside the exchanges: workflows_run's answer (running or already
	// waiting) depends on timing.
	if id, err = e.Submit(ctx, engine.StartRequest{Workflow: "gated", Inputs: map[string]any{"shot": "sh020"}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if info, _ := e.Status(ctx, id); info.Status == "waiting" {
			break
		}
	}
	exchange("resources/subscribe run (in a session)", `{"jsonrpc":"2.0","id":19,"method":"resources/subscribe","params":{"uri":"dccflow://runs/r0000000000000000000000000000"}}`)
	exchange("workflows_approve (in a session)", `{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"workflows_approve","arguments":{"workflow_id":"r0000000000000000000000000000","step":"human_gate","approved":true}}}`)
	if _, err := e.Wait(ctx, id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	notification("notifications/resources/updated (coalesced, at most one per interval; the last follows the run's end)", updates())
	exchange("resources/unsubscribe run (in a session)", `{"jsonrpc":"2.0","id":21,"method":"resources/unsubscribe","params":{"uri":"dccflow://runs/r0000000000000000000000000000"}}`)
	exchange("resources/unsubscribe again (not subscribed: nothing to do)", `{"jsonrpc":"2.0","id":22,"method":"resources/unsubscribe","params":{"uri":"dccflow://runs/r0000000000000000000000000000"}}`)
	exchange("resources/subscribe ended run (in a session)", `{"jsonrpc":"2.0","id":23,"method":"resources/subscribe","params":{"uri":"dccflow://runs/r0000000000000000000000000000"}}`)
	got := updates()
	if len(got) != 1 {
		t.Fatalf("subscribing to an ended run brought %d notifications; want 1", len(got))
	}
	notification("notifications/resources/updated (exactly one, at once, for a run already ended)", got)
	srv.UnregisterSession(ctx, sess.SessionID())

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
