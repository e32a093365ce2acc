package mcpserver_test

import (
	"context"
	"fmt"
	"log/slog"
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

// twoGates waits for an approval twice.
const twoGates = `
name: two_gates
steps:
  - {id: first, kind: approve, prompt: "first?"}
  - {id: mid, tool: flow__echo, args: {value: 1}}
  - {id: second, kind: approve, prompt: "second?"}
  - {id: last, tool: flow__echo, args: {value: 2}}
`

// burst waits for an approval, then runs 200 echo steps as fast as it can.
func burst() string {
	var b strings.Builder
	b.WriteString("name: burst\nsteps:\n  - {id: gate, kind: approve, prompt: \"go?\"}\n")
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&b, "  - {id: s%03d, tool: flow__echo, args: {value: %d}}\n", i, i)
	}
	return b.String()
}

// recorder keeps the notifications a client receives.
type recorder struct {
	mu  sync.Mutex
	got []mcp.JSONRPCNotification
}

func (r *recorder) add(n mcp.JSONRPCNotification) {
	r.mu.Lock()
	r.got = append(r.got, n)
	r.mu.Unlock()
}

// updated counts the notifications/resources/updated received for uri ("" = any URI).
func (r *recorder) updated(uri string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.got {
		if m.Method == string(mcp.MethodNotificationResourceUpdated) && (uri == "" || m.Params.AdditionalFields["uri"] == uri) {
			n++
		}
	}
	return n
}

// sentLog keeps what the server reports having sent (mcpserver.Server.OnUpdateSent).
type sentLog struct {
	mu      sync.Mutex
	entries []sent
}

type sent struct {
	session, uri string
	seq          uint64
	at           time.Time
}

func (l *sentLog) add(session, uri string, seq uint64) {
	l.mu.Lock()
	l.entries = append(l.entries, sent{session, uri, seq, time.Now()})
	l.mu.Unlock()
}

// to returns the notifications sent to session.
func (l *sentLog) to(session string) []sent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sent
	for _, e := range l.entries {
		if e.session == session {
			out = append(out, e)
		}
	}
	return out
}

// connect opens another session on b's HTTP server, with the GET stream open so notifications
// reach it between requests. The server implements resources/subscribe, whose notifications
// arrive on that stream (docs/reference/mcp.md): the tests use the client calls of that protocol on purpose.
func connect(t *testing.T, b *bundle) (*client.Client, *recorder) {
	t.Helper()
	//lint:ignore SA1019 resources/subscribe notifications arrive on the standalone GET stream, which is what is tested
	listen := transport.WithContinuousListening()
	tr, err := transport.NewStreamableHTTP(b.url, listen, transport.WithHTTPLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	return start(t, context.Background(), tr, r.add), r
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func register(t *testing.T, e *engine.Engine, text string) {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
}

// startWaiting starts workflow over c and waits until it waits for an approval.
func startWaiting(t *testing.T, b *bundle, c *client.Client, workflow string, inputs map[string]any) string {
	t.Helper()
	out, isErr := call(t, c, "workflows_run", map[string]any{"workflow": workflow, "inputs": inputs}, nil)
	if isErr {
		t.Fatalf("run %s: %v", workflow, out)
	}
	id := out["workflow_id"].(string)
	waitStatus(t, b.e, id, "waiting")
	return id
}

func waitStatus(t *testing.T, e *engine.Engine, id, status string) {
	t.Helper()
	eventually(t, "run "+id+" "+status, func() bool {
		info, err := e.Status(context.Background(), id)
		return err == nil && string(info.Status) == status
	})
}

func approve(t *testing.T, c *client.Client, id, step string) {
	t.Helper()
	if out, isErr := call(t, c, "workflows_approve", map[string]any{"workflow_id": id, "step": step, "approved": true}, nil); isErr {
		t.Fatalf("approve %s: %v", step, out)
	}
}

func subscribe(c *client.Client, uri string) error {
	//lint:ignore SA1019 the server implements resources/subscribe (docs/reference/mcp.md): that is what is tested
	return c.Subscribe(context.Background(), mcp.SubscribeRequest{Params: mcp.SubscribeParams{URI: uri}})
}

func unsubscribe(c *client.Client, uri string) error {
	//lint:ignore SA1019 the server implements resources/unsubscribe (docs/reference/mcp.md): that is what is tested
	return c.Unsubscribe(context.Background(), mcp.UnsubscribeRequest{Params: mcp.UnsubscribeParams{URI: uri}})
}

func mustSubscribe(t *testing.T, c *client.Client, uri string) {
	t.Helper()
	if err := subscribe(c, uri); err != nil {
		t.Fatalf("subscribe %s: %v", uri, err)
	}
}

// terminalSeq returns the sequence number of the run's workflow_terminal event.
func terminalSeq(t *testing.T, e *engine.Engine, id string) uint64 {
	t.Helper()
	evs, err := e.PollEvents(context.Background(), engine.EventQuery{RunID: id, Max: 100000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == run.EventWorkflowTerminal {
			return ev.Seq
		}
	}
	t.Fatalf("run %s has no workflow_terminal event", id)
	return 0
}

// waitFinal waits until the server has sent session a notification for uri after the event
// seq, and the client has received every notification sent; it returns what was sent.
func waitFinal(t *testing.T, log *sentLog, session string, r *recorder, uri string, seq uint64) []sent {
	t.Helper()
	var got []sent
	eventually(t, "a notification after the terminal event", func() bool {
		got = log.to(session)
		return len(got) > 0 && got[len(got)-1].seq >= seq
	})
	eventually(t, "the client to receive every notification", func() bool { return r.updated(uri) == len(got) })
	return got
}

// quiet waits three coalescing windows, so that a notification that was due has been sent.
func quiet(b *bundle) { time.Sleep(3 * b.srv.UpdateInterval()) }

func TestSubscribeRunResourceHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	log := &sentLog{}
	b.srv.OnUpdateSent(log.add)
	watcher, wr := connect(t, b)
	bystander, br := connect(t, b)

	id := startWaiting(t, b, b.c, "gated", map[string]any{"shot": "sh010"})
	uri := "dccflow://runs/" + id
	mustSubscribe(t, watcher, uri)
	if sessions, watches, reading, _ := b.srv.SubscriptionStats(); sessions != 1 || watches != 1 || !reading {
		t.Fatalf("after subscribe: %d sessions, %d watches, reading %v", sessions, watches, reading)
	}
	approve(t, b.c, id, "human_gate")
	if info, err := b.e.Wait(context.Background(), id, 10*time.Second); err != nil || info.Status != "completed" {
		t.Fatalf("%v %+v", err, info)
	}
	got := waitFinal(t, log, watcher.GetSessionId(), wr, uri, terminalSeq(t, b.e, id))
	for _, s := range got {
		if s.uri != uri {
			t.Errorf("notification for %s", s.uri)
		}
	}

	// After the terminal notification, reading the resource shows the end.
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uri
	res, err := watcher.ReadResource(context.Background(), rr)
	if err != nil || !strings.Contains(res.Contents[0].(mcp.TextResourceContents).Text, `"status":"completed"`) {
		t.Fatalf("resource: %v %+v", err, res)
	}
	// Neither the session that did not subscribe nor the one that drove the run got any.
	quiet(b)
	if n := br.updated(""); n != 0 || len(log.to(bystander.GetSessionId())) != 0 {
		t.Errorf("the bystander received %d updates", n)
	}
	if n := len(b.notifications(string(mcp.MethodNotificationResourceUpdated))); n != 0 {
		t.Errorf("the driving session received %d updates", n)
	}
}

// TestSubscribeRunResourceStdio is not parallel: mcp-go's stdio session is one per process.
func TestSubscribeRunResourceStdio(t *testing.T) {
	b := setup(t, "stdio")
	log := &sentLog{}
	b.srv.OnUpdateSent(log.add)
	id := startWaiting(t, b, b.c, "gated", map[string]any{"shot": "sh020"})
	uri := "dccflow://runs/" + id
	mustSubscribe(t, b.c, uri)
	approve(t, b.c, id, "human_gate")
	if info, err := b.e.Wait(context.Background(), id, 10*time.Second); err != nil || info.Status != "completed" {
		t.Fatalf("%v %+v", err, info)
	}
	r := &recorder{got: b.notifications(string(mcp.MethodNotificationResourceUpdated))}
	eventually(t, "the final notification", func() bool {
		r.got = b.notifications(string(mcp.MethodNotificationResourceUpdated))
		s := log.to("stdio") // mcp-go's stdio session id
		return len(s) > 0 && s[len(s)-1].seq >= terminalSeq(t, b.e, id) && r.updated(uri) == len(s)
	})
	if n := r.updated(""); n != r.updated(uri) {
		t.Fatalf("updates for other resources: %d of %d", n-r.updated(uri), n)
	}

	// Closing the session frees its subscriptions and stops the event reader.
	b.c.Close()
	eventually(t, "the session's subscriptions to go", func() bool {
		sessions, watches, reading, _ := b.srv.SubscriptionStats()
		return sessions == 0 && watches == 0 && !reading
	})
	_, _, _, done := b.srv.SubscriptionStats()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the event reader did not return")
	}
}

func TestUnsubscribeStopsUpdates(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	register(t, b.e, twoGates)
	log := &sentLog{}
	b.srv.OnUpdateSent(log.add)
	c, r := connect(t, b)
	session := c.GetSessionId()

	id := startWaiting(t, b, b.c, "two_gates", nil)
	uri := "dccflow://runs/" + id
	mustSubscribe(t, c, uri)
	mustSubscribe(t, c, uri) // twice is once
	if _, watches, _, _ := b.srv.SubscriptionStats(); watches != 1 {
		t.Fatalf("%d watches after subscribing twice", watches)
	}
	approve(t, b.c, id, "first")
	eventually(t, "an update after the first approval", func() bool { return r.updated(uri) > 0 })
	waitStatus(t, b.e, id, "waiting")
	quiet(b) // the trailing notification of the first approval's burst

	if err := unsubscribe(c, uri); err != nil {
		t.Fatal(err)
	}
	sessions, watches, reading, done := b.srv.SubscriptionStats()
	if sessions != 0 || watches != 0 || reading {
		t.Fatalf("after unsubscribe: %d sessions, %d watches, reading %v", sessions, watches, reading)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the event reader did not return")
	}
	// Counted once unsubscribe has returned (a trailing notification of the first burst may
	// still go out before that on a loaded machine: quiet is only a pause).
	before := len(log.to(session))
	approve(t, b.c, id, "second")
	if info, err := b.e.Wait(context.Background(), id, 10*time.Second); err != nil || info.Status != "completed" {
		t.Fatalf("%v %+v", err, info)
	}
	quiet(b)
	if after := len(log.to(session)); after != before {
		t.Fatalf("%d updates after unsubscribing", after-before)
	}
	// Unsubscribing from what one never subscribed to is fine.
	if err := unsubscribe(c, uri); err != nil {
		t.Fatal(err)
	}
}

func TestSessionCloseFreesSubscriptions(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	a, _ := connect(t, b)
	c, _ := connect(t, b)
	id1 := startWaiting(t, b, b.c, "gated", map[string]any{"shot": "a"})
	id2 := startWaiting(t, b, b.c, "gated", map[string]any{"shot": "b"})
	mustSubscribe(t, a, "dccflow://runs/"+id1)
	mustSubscribe(t, a, "dccflow://runs/"+id2)
	mustSubscribe(t, c, "dccflow://runs/"+id1)
	if sessions, watches, reading, _ := b.srv.SubscriptionStats(); sessions != 2 || watches != 3 || !reading {
		t.Fatalf("%d sessions, %d watches, reading %v", sessions, watches, reading)
	}
	a.Close() // DELETE: mcp-go unregisters the session
	if sessions, watches, reading, _ := b.srv.SubscriptionStats(); sessions != 1 || watches != 1 || !reading {
		t.Fatalf("after closing a: %d sessions, %d watches, reading %v", sessions, watches, reading)
	}
	c.Close()
	sessions, watches, reading, done := b.srv.SubscriptionStats()
	if sessions != 0 || watches != 0 || reading {
		t.Fatalf("after closing both: %d sessions, %d watches, reading %v", sessions, watches, reading)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the event reader did not return")
	}
}

func TestHTTPServerCloseFreesSubscriptions(t *testing.T) {
	t.Parallel()
	e, err := engine.Open(context.Background(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	register(t, e, gated)
	srv := mcpserver.New(e)
	hs, err := srv.ListenHTTP("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{e: e, srv: srv, url: hs.URL()}
	c, _ := connect(t, b)
	b.c = c
	id := startWaiting(t, b, c, "gated", map[string]any{"shot": "x"})
	mustSubscribe(t, c, "dccflow://runs/"+id)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Close(ctx); err != nil { // the client's GET stream is still open
		t.Fatalf("close: %v", err)
	}
	sessions, watches, reading, done := srv.SubscriptionStats()
	if sessions != 0 || watches != 0 || reading {
		t.Fatalf("after Close: %d sessions, %d watches, reading %v", sessions, watches, reading)
	}
	<-done
}

func TestUpdatesAreCoalesced(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	register(t, b.e, burst())
	log := &sentLog{}
	b.srv.OnUpdateSent(log.add)
	c, r := connect(t, b)
	id := startWaiting(t, b, b.c, "burst", nil)
	uri := "dccflow://runs/" + id
	mustSubscribe(t, c, uri)
	t0 := time.Now()
	approve(t, b.c, id, "gate")
	if info, err := b.e.Wait(context.Background(), id, 60*time.Second); err != nil || info.Status != "completed" {
		t.Fatalf("%v %+v", err, info)
	}
	got := waitFinal(t, log, c.GetSessionId(), r, uri, terminalSeq(t, b.e, id))
	evs, _ := b.e.PollEvents(context.Background(), engine.EventQuery{RunID: id, Max: 100000}, 0)
	// Sends are at least one interval apart: about one per interval, plus the first.
	interval := b.srv.UpdateInterval()
	limit := int(got[len(got)-1].at.Sub(t0)/interval) + 2
	t.Logf("%d events, %d notifications in %v (limit %d)", len(evs), len(got), got[len(got)-1].at.Sub(t0), limit)
	if len(evs) < 400 || len(got) > limit {
		t.Fatalf("%d events gave %d notifications in %v; want at most %d", len(evs), len(got), got[len(got)-1].at.Sub(t0), limit)
	}
	for i := 1; i < len(got); i++ {
		if gap := got[i].at.Sub(got[i-1].at); gap < interval*9/10 {
			t.Errorf("notifications %d and %d only %v apart", i-1, i, gap)
		}
	}
}

func TestSubscribeUnknownResource(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	for _, uri := range []string{"dccflow://runs/r0000000000000000000000000000", "dccflow://runs/", "dccflow://catalog", "file:///etc/passwd"} {
		err := subscribe(b.c, uri)
		if err == nil || !strings.Contains(err.Error(), uri) {
			t.Errorf("subscribe %s: %v", uri, err)
		}
	}
	if sessions, watches, reading, _ := b.srv.SubscriptionStats(); sessions != 0 || watches != 0 || reading {
		t.Fatalf("%d sessions, %d watches, reading %v", sessions, watches, reading)
	}
}

// TestReadUnknownRunResource: reading a run that does not exist says so, naming the URI.
func TestReadUnknownRunResource(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	uri := "dccflow://runs/r0000000000000000000000000000"
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uri
	_, err := b.c.ReadResource(context.Background(), rr)
	if err == nil || !strings.Contains(err.Error(), "resource not found: "+uri) {
		t.Fatalf("read %s: %v", uri, err)
	}
}

// TestSubscribeTerminalRunHTTP: subscribing to a run that has already ended gets exactly one
// notification, and the resource then reads terminal.
func TestSubscribeTerminalRunHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	c, r := connect(t, b)
	out, isErr := call(t, b.c, "workflows_run", map[string]any{"spec": "steps: [{id: a, tool: flow__echo, args: {value: 1}}]", "wait_secs": 10}, nil)
	if isErr || out["terminal"] != true {
		t.Fatalf("run: %v", out)
	}
	uri := "dccflow://runs/" + out["workflow_id"].(string)
	mustSubscribe(t, c, uri)
	eventually(t, "the update of the ended run", func() bool { return r.updated(uri) == 1 })
	quiet(b)
	if n := r.updated(""); n != 1 {
		t.Fatalf("%d updates; want 1", n)
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uri
	res, err := c.ReadResource(context.Background(), rr)
	if err != nil || !strings.Contains(res.Contents[0].(mcp.TextResourceContents).Text, `"terminal":true`) {
		t.Fatalf("resource: %v %+v", err, res)
	}
}

// TestSubscribedRunShowsAToolsProgress: a session subscribed to a run resource is told when a
// running tool reports progress (a step_progress event), and reading the resource then shows the
// step's latest progress and logged lines while the step still runs.
func TestSubscribedRunShowsAToolsProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, "http")
	if err := b.e.RegisterTool(flowtype.ToolInfo{Name: "cache", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	watcher, wr := connect(t, b)
	s, _ := spec.ParseString("steps: [{id: export, tool: cache}]")
	id, err := b.e.Submit(context.Background(), engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	calls, err := b.e.Host().Pull(context.Background(), flowtype.PullRequest{Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 {
		t.Fatalf("pull: %v %v", calls, err)
	}
	uri := "dccflow://runs/" + id
	mustSubscribe(t, watcher, uri)
	before := wr.updated(uri)
	total := 120.0
	if !b.e.Host().Report(calls[0].ID, flowtype.ToolReport{Progress: &run.StepProgress{Done: 37, Total: &total, Message: "caching frames"},
		Logs: []run.LogLine{run.LogLineOf("cached frame", nil)}}) {
		t.Fatal("report refused")
	}
	deadline := time.Now().Add(10 * time.Second)
	for wr.updated(uri) == before {
		if time.Now().After(deadline) {
			t.Fatal("no resources/updated after the tool's report")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rr := mcp.ReadResourceRequest{}
	rr.Params.URI = uri
	for {
		res, err := watcher.ReadResource(context.Background(), rr)
		if err != nil {
			t.Fatal(err)
		}
		text := res.Contents[0].(mcp.TextResourceContents).Text
		if strings.Contains(text, `"progress":{"done":37,"total":120,"message":"caching frames","attempt":1}`) &&
			strings.Contains(text, `"text":"cached frame"`) && strings.Contains(text, `"status":"running"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resource does not show the step's progress: %s", text)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.e.Host().Complete(calls[0].ID, flowtype.ToolResult{Output: 1}); err != nil {
		t.Fatal(err)
	}
	if info, err := b.e.Wait(context.Background(), id, 10*time.Second); err != nil || info.Status != "completed" {
		t.Fatalf("%v %+v", err, info)
	}
}
