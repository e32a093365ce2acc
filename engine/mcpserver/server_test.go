package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

const gated = `
name: gated
steps:
  - {id: prep, tool: flow__echo, args: {value: "{{inputs.shot}}"}}
  - {id: human_gate, kind: approve, prompt: "push {{inputs.shot}}?"}
  - {id: push, tool: flow__echo, args: {value: pushed}}
inputs: {shot: {type: string, required: true}}
`

type bundle struct {
	e      *engine.Engine
	srv    *mcpserver.Server
	url    string // the HTTP endpoint ("" over stdio)
	c      *client.Client
	mu     sync.Mutex
	notifs []mcp.JSONRPCNotification
}

func (b *bundle) notifications(method string) []mcp.JSONRPCNotification {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []mcp.JSONRPCNotification
	for _, n := range b.notifs {
		if n.Method == method {
			out = append(out, n)
		}
	}
	return out
}

func setup(t testing.TB, transportKind string, opts ...mcpserver.Option) *bundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	e, err := engine.Open(ctx, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	s, _ := spec.ParseString(gated)
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
	return setupOn(t, transportKind, e, opts...)
}

// setupOn serves e (which the caller closes) to a client over transportKind.
func setupOn(t testing.TB, transportKind string, e *engine.Engine, opts ...mcpserver.Option) *bundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv := mcpserver.New(e, opts...)
	b := &bundle{e: e, srv: srv}
	var tr transport.Interface
	switch transportKind {
	case "http":
		hs := httptest.NewServer(srv.Handler(""))
		t.Cleanup(hs.Close)
		b.url = hs.URL + "/mcp"
		st, err := transport.NewStreamableHTTP(b.url)
		if err != nil {
			t.Fatal(err)
		}
		tr = st
	case "stdio":
		// mcp-go keeps one stdio session per process (a package variable), so two stdio
		// servers of one test binary would send each other's notifications: one at a time.
		stdioMu.Lock()
		t.Cleanup(stdioMu.Unlock) // registered first, so it runs after the session ends
		cr, sw := io.Pipe()
		sr, cw := io.Pipe()
		served := make(chan struct{})
		go func() { _ = srv.ServeStdio(ctx, sr, sw); close(served) }()
		// Closing the client's pipe ends the session: ServeStdio returns once it is over.
		t.Cleanup(func() {
			cw.Close()
			sw.Close()
			select {
			case <-served:
			case <-time.After(10 * time.Second):
				t.Error("ServeStdio did not return after the client closed its pipe")
			}
		})
		tr = transport.NewIO(cr, cw, io.NopCloser(strings.NewReader("")))
	}
	b.c = start(t, ctx, tr, func(n mcp.JSONRPCNotification) {
		b.mu.Lock()
		b.notifs = append(b.notifs, n)
		b.mu.Unlock()
	})
	return b
}

// stdioMu serializes the tests' stdio servers (see setup).
var stdioMu sync.Mutex

// start starts and initializes a client on tr whose notifications go to onNotification.
func start(t testing.TB, ctx context.Context, tr transport.Interface, onNotification func(mcp.JSONRPCNotification)) *client.Client {
	t.Helper()
	c := client.NewClient(tr, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	c.OnNotification(onNotification)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: mcp.ProtocolVersion20251125,
		ClientInfo: mcp.Implementation{Name: "test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	return c
}

func call(t *testing.T, c *client.Client, name string, args map[string]any, meta *mcp.Meta) (map[string]any, bool) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name = name
	req.Params.Arguments = args
	req.Params.Meta = meta
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	return out, res.IsError
}

func TestToolsListedWithAnnotations(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	res, err := b.c.ListTools(context.Background(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]mcp.ToolAnnotation{}
	for _, tool := range res.Tools {
		got[tool.Name] = tool.Annotations
	}
	want := map[string][2]bool{ // destructive, read-only
		"workflows_run": {true, false}, "workflows_get_status": {false, true}, "workflows_cancel": {true, false},
		"workflows_lookup": {false, true}, "workflows_resume": {true, false}, "workflows_approve": {true, false},
		"workflows_pause": {false, false}, "workflows_unpause": {false, false},
	}
	for name, w := range want {
		a, ok := got[name]
		if !ok || a.DestructiveHint == nil || *a.DestructiveHint != w[0] || a.ReadOnlyHint == nil || *a.ReadOnlyHint != w[1] {
			t.Errorf("%s: annotations %+v", name, a)
		}
	}
	if a := got["workflows_run"]; a.OpenWorldHint == nil || !*a.OpenWorldHint {
		t.Error("workflows_run is not open-world")
	}
	if a := got["workflows_cancel"]; a.IdempotentHint == nil || !*a.IdempotentHint {
		t.Error("workflows_cancel is not idempotent")
	}
}

func TestRunApproveCompleteOverMCP(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"stdio", "http"} {
		kind := kind
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, kind)
			out, isErr := call(t, b.c, "workflows_run", map[string]any{"workflow": "gated", "inputs": map[string]any{"shot": "sh010"}}, nil)
			if isErr {
				t.Fatalf("run: %v", out)
			}
			id := out["workflow_id"].(string)
			deadline := time.Now().Add(10 * time.Second)
			for {
				st, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": id}, nil)
				if st["status"] == "waiting" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("never waiting: %v", st)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if out, isErr := call(t, b.c, "workflows_approve", map[string]any{"workflow_id": id, "step": "human_gate", "approved": true, "by": "sup"}, nil); isErr {
				t.Fatalf("approve: %v", out)
			}
			info, err := b.e.Wait(context.Background(), id, 10*time.Second)
			if err != nil || info.Status != "completed" {
				t.Fatalf("%v %+v", err, info)
			}
			st, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": id}, nil)
			if st["terminal"] != true || st["outputs"].(map[string]any)["push"].(map[string]any)["value"] != "pushed" {
				t.Fatalf("status %v", st)
			}
			// A spec given inline, waited for, with progress.
			out, isErr = call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: a, tool: flow__echo, args: {value: 1}}]", "wait_secs": 10},
				&mcp.Meta{ProgressToken: "tok-1"})
			if isErr || out["status"] != "completed" || out["terminal"] != true {
				t.Fatalf("inline run: %v", out)
			}
			deadline = time.Now().Add(5 * time.Second)
			for len(b.notifications("notifications/progress")) == 0 || len(b.notifications(mcpserver.UpdatedMethod)) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("notifications: progress %d, updated %d", len(b.notifications("notifications/progress")), len(b.notifications(mcpserver.UpdatedMethod)))
				}
				time.Sleep(10 * time.Millisecond)
			}
			// The run resource.
			rr := mcp.ReadResourceRequest{}
			rr.Params.URI = "dccflow://runs/" + id
			res, err := b.c.ReadResource(context.Background(), rr)
			if err != nil || len(res.Contents) != 1 || !strings.Contains(res.Contents[0].(mcp.TextResourceContents).Text, `"completed"`) {
				t.Fatalf("resource: %v %+v", err, res)
			}
		})
	}
}

func TestToolErrorsCarryCodes(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	cases := []struct {
		tool string
		args map[string]any
		code string
	}{
		{"workflows_run", map[string]any{"spec": "steps: [{id: a, tol: t}]"}, "validation_failed"},
		{"workflows_run", map[string]any{"workflow": "nope"}, "not_found"},
		{"workflows_run", map[string]any{"workflow": "gated"}, "invalid_input"},
		{"workflows_get_status", map[string]any{"workflow_id": "nope"}, "not_found"},
		{"workflows_approve", map[string]any{"workflow_id": "nope", "step": "s", "approved": true}, "not_found"},
		{"workflows_resume", map[string]any{"workflow_id": "nope"}, "not_found"},
	}
	for _, tc := range cases {
		out, isErr := call(t, b.c, tc.tool, tc.args, nil)
		if !isErr || out["code"] != tc.code {
			t.Errorf("%s %v: isError %v, %v", tc.tool, tc.args, isErr, out)
		}
		// A validation error lists every problem (spec.ProblemError), with its step and position.
		if ps, _ := out["problems"].([]any); tc.code == "validation_failed" &&
			(len(ps) != 2 || ps[0].(map[string]any)["step_id"] != "a" || ps[0].(map[string]any)["severity"] != "error") {
			t.Errorf("%s %v: problems %v", tc.tool, tc.args, out["problems"])
		}
	}
	// A mistyped workflow or tool name is answered with the closest registered one.
	out, _ := call(t, b.c, "workflows_run", map[string]any{"workflow": "gatd"}, nil)
	if msg, _ := out["message"].(string); out["code"] != "not_found" || !strings.Contains(msg, `did you mean "gated"?`) {
		t.Errorf("workflow typo: %v", out)
	}
	out, _ = call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: a, tool: flow__ehco}]"}, nil)
	if msg, _ := out["message"].(string); out["code"] != "unknown_tool" || !strings.Contains(msg, `flow__ehco (did you mean "flow__echo"?)`) {
		t.Errorf("tool typo: %v", out)
	}
}

func TestCancelOverMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	out, _ := call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: s, tool: flow__sleep, args: {ms: 60000}}]"}, nil)
	id := out["workflow_id"].(string)
	out, isErr := call(t, b.c, "workflows_cancel", map[string]any{"workflow_id": id, "reason": "agent"}, nil)
	if isErr || out["status"] != "cancelled" {
		t.Fatalf("cancel: %v", out)
	}
	if out, isErr = call(t, b.c, "workflows_cancel", map[string]any{"workflow_id": id}, nil); isErr || out["status"] != "cancelled" {
		t.Fatalf("cancel twice: %v", out)
	}
	lookup, _ := call(t, b.c, "workflows_lookup", map[string]any{"query": "gat"}, nil)
	if ws := lookup["workflows"].([]any); len(ws) != 1 {
		t.Fatalf("lookup %v", lookup)
	}
}

func TestRunRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio", mcpserver.WithRunRateLimit(0.01, 2))
	for i := 0; i < 2; i++ {
		if out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: a, tool: flow__echo}]"}, nil); isErr {
			t.Fatalf("run %d: %v", i, out)
		}
	}
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: a, tool: flow__echo}]"}, nil)
	if !isErr || out["code"] != "rate_limited" {
		t.Fatalf("third run: %v", out)
	}
}

func TestHTTPBindAndToken(t *testing.T) {
	t.Parallel()
	e, _ := engine.Open(context.Background(), engine.Config{})
	defer e.Close(context.Background())
	srv := mcpserver.New(e)
	if _, err := srv.ListenHTTP("0.0.0.0:0", ""); err == nil || !strings.Contains(err.Error(), "requires a bearer token") {
		t.Fatalf("non-loopback without token: %v", err)
	}
	hs, err := srv.ListenHTTP("127.0.0.1:0", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer hs.Close(context.Background())
	resp, err := http.Post(hs.URL(), "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without token: %d", resp.StatusCode)
	}
}

func TestResumeOverMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	out, _ := call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: a, tool: flow__echo, args: {value: 1}}, {id: s, tool: flow__sleep, args: {ms: 60000}}]"}, nil)
	id := out["workflow_id"].(string)
	// Cancel only once a has completed: a cancel that lands first cancels a too, and the resumed
	// run calls it again (what this test checks is that a completed step is reused).
	eventually(t, "step a completed", func() bool {
		info, err := b.e.Status(context.Background(), id)
		if err != nil {
			return false
		}
		for _, st := range info.Steps {
			if st.Key == "a" {
				return st.Status == "completed"
			}
		}
		return false
	})
	if out, isErr := call(t, b.c, "workflows_cancel", map[string]any{"workflow_id": id}, nil); isErr || out["status"] != "cancelled" {
		t.Fatalf("cancel: %v", out)
	}
	out, isErr := call(t, b.c, "workflows_resume", map[string]any{"workflow_id": id, "expected_spec_hash": "0000"}, nil)
	if !isErr || out["code"] != "spec_changed" {
		t.Fatalf("resume with a wrong hash: %v", out)
	}
	out, isErr = call(t, b.c, "workflows_resume", map[string]any{"workflow_id": id}, nil)
	if isErr || out["workflow_id"] != id {
		t.Fatalf("resume: %v", out)
	}
	info, err := b.e.Status(context.Background(), id)
	if err != nil || info.Terminal {
		t.Fatalf("the resumed run is not running: %v %+v", err, info)
	}
	for _, st := range info.Steps {
		if st.Key == "a" && st.Status != "completed" {
			t.Fatalf("step a: %+v", st)
		}
	}
	if out, isErr := call(t, b.c, "workflows_cancel", map[string]any{"workflow_id": id}, nil); isErr || out["status"] != "cancelled" {
		t.Fatalf("cancel the resumed run: %v", out)
	}
}

// TestHTTPWritesNothingToTheDefaultLogger: mcp-go logs transport trouble to slog.Default (the
// host's stderr) unless given a logger; the server gives it one that discards. A stray
// client-to-server response (a string id, nothing pending) is such trouble. Not parallel: it swaps
// slog.Default.
func TestHTTPWritesNothingToTheDefaultLogger(t *testing.T) {
	var logged bytes.Buffer
	previous := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, nil)))
	defer slog.SetDefault(previous)

	e, _ := engine.Open(context.Background(), engine.Config{})
	defer e.Close(context.Background())
	hs, err := mcpserver.New(e).ListenHTTP("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	post := func(session, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, hs.URL(), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	init := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",`+
		`"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	session := init.Header.Get("Mcp-Session-Id")
	if session == "" {
		t.Fatalf("initialize: no session id (status %d)", init.StatusCode)
	}
	if resp := post(session, `{"jsonrpc":"2.0","id":"not-a-number","result":{"content":[]}}`); resp.StatusCode < 400 {
		t.Fatalf("a response with a string id to nothing was accepted: %d", resp.StatusCode)
	}
	if err := hs.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if logged.Len() != 0 {
		t.Fatalf("the MCP HTTP server wrote to slog.Default:\n%s", logged.String())
	}
}

// Issue #26 item 4: JSON-RPC numbers reach the server as doubles, so an integer of 2^53 or more
// may already be rounded; the run is refused with a clear error instead of starting with a changed
// asset id. Smaller numbers and large ids sent as strings are fine.
func TestRedteamMCPRefusesIntegersItCannotCarryExactly(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	for _, args := range []map[string]any{
		{"spec": "steps: [{id: a, tool: flow__echo}]", "inputs": map[string]any{"asset": json.Number("9007199254740993")}},
		{"spec": map[string]any{"steps": []any{map[string]any{"id": "a", "tool": "flow__echo", "args": map[string]any{"v": []any{1, json.Number("18446744073709551615")}}}}}},
	} {
		out, isErr := call(t, b.c, "workflows_run", args, nil)
		if !isErr || out["code"] != "invalid_input" || !strings.Contains(fmt.Sprint(out["message"]), "send it as a string") {
			t.Fatalf("%v: isError %v, %v", args, isErr, out)
		}
	}
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: a, tool: flow__echo}]",
		"inputs": map[string]any{"asset": "18446744073709551615", "n": 9007199254740991}}, nil)
	if isErr {
		t.Fatalf("a string id and 2^53-1 were refused: %v", out)
	}
}

// TestToolProgressReachesMCPProgressNotifications: a host tool's progress (current_call().progress,
// Host.Report) reaches a client that gave workflows_run a progress token as notifications/progress
// naming the step and its progress, with the value the run's completed steps plus the step's
// fraction done, and its logged lines as workflowUpdated notifications.
func TestToolProgressReachesMCPProgressNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t, "http") // notifications on the request's stream
	if err := b.e.RegisterTool(flowtype.ToolInfo{Name: "cache", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	go func() { // the host: reports, then answers
		calls, err := b.e.Host().Pull(context.Background(), flowtype.PullRequest{Timeout: 10 * time.Second})
		if err != nil || len(calls) != 1 {
			t.Errorf("pull: %v %v", calls, err)
			return
		}
		total := 120.0
		b.e.Host().Report(calls[0].ID, flowtype.ToolReport{Progress: &run.StepProgress{Done: 37, Total: &total, Message: "caching frames"},
			Logs: []run.LogLine{run.LogLineOf("cached frame", json.RawMessage(`{"frame":37}`))}})
		time.Sleep(50 * time.Millisecond)
		_ = b.e.Host().Complete(calls[0].ID, flowtype.ToolResult{Output: "ok"})
	}()
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: export, tool: cache}, {id: after, tool: flow__echo}]", "wait_secs": 10},
		&mcp.Meta{ProgressToken: "tok-p"})
	if isErr || out["status"] != "completed" {
		t.Fatalf("run: %v", out)
	}
	deadline := time.Now().Add(5 * time.Second)
	var found map[string]any
	var values []float64
	for found == nil {
		values = values[:0]
		for _, n := range b.notifications("notifications/progress") {
			f := n.Params.AdditionalFields
			if f["progressToken"] != "tok-p" {
				continue
			}
			values = append(values, f["progress"].(float64))
			if f["message"] == "step_progress export 37/120 caching frames" {
				found = f
			}
		}
		if found == nil && time.Now().After(deadline) {
			t.Fatalf("no progress notification of the step: %+v", b.notifications("notifications/progress"))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v := found["progress"].(float64); v < 37.0/120-1e-9 || v > 37.0/120+1e-9 || found["total"].(float64) != 2 || found["progressToken"] != "tok-p" {
		t.Fatalf("progress notification %+v", found)
	}
	for i := 1; i < len(values); i++ {
		if values[i] < values[i-1] {
			t.Fatalf("progress went backwards: %v", values)
		}
	}
	var logged bool
	for _, n := range b.notifications(mcpserver.UpdatedMethod) {
		d, _ := n.Params.AdditionalFields["detail"].(map[string]any)
		if d["kind"] == "step_log" {
			lines, _ := d["lines"].([]any)
			if len(lines) == 1 && lines[0].(map[string]any)["text"] == "cached frame" {
				logged = true
			}
		}
	}
	if !logged {
		t.Fatalf("no workflowUpdated notification with the logged line: %+v", b.notifications(mcpserver.UpdatedMethod))
	}
}

// TestOnFailureOverMCP: an inline spec's on_failure steps run when it fails and show in its
// status, keyed on_failure.<id>, while the run keeps its own error.
func TestOnFailureOverMCP(t *testing.T) {
	t.Parallel()
	b := setup(t, "stdio")
	spec := `
steps: [{id: export, tool: flow__fail, args: {kind: fatal, message: corrupt scene}}]
on_failure: [{id: alert, tool: flow__echo, args: {text: "{{run.error.step_key}}: {{run.error.message}}"}}]
`
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": spec, "wait_secs": 10}, nil)
	if isErr || out["status"] != "failed" || out["error"].(map[string]any)["step_key"] != "export" {
		t.Fatalf("run: %v", out)
	}
	st, _ := call(t, b.c, "workflows_get_status", map[string]any{"workflow_id": out["workflow_id"]}, nil)
	found := false
	for _, s := range st["steps"].([]any) {
		s := s.(map[string]any)
		if s["key"] == "on_failure.alert" {
			found = s["status"] == "completed" && s["output"].(map[string]any)["text"] == "export: corrupt scene"
		}
	}
	if !found {
		t.Fatalf("status lacks a completed on_failure.alert with the error: %v", st["steps"])
	}
}
