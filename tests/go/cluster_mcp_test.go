package gotest

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/mcpserver"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// mcpGated is the workflow of TestClusterControlOverMCPOfAnotherEngine: `work` is hosted by
// engine A only.
const mcpGated = `
name: mcp_gated
steps:
  - {id: prep, tool: work, args: {k: prep}}
  - {id: gate, kind: approve, prompt: "publish {{prep.k}}?", depends_on: [prep]}
  - {id: after, tool: work, args: {k: after}, depends_on: [gate]}
`

// workCalls records the calls of the `work` tool that engine A ran, per run.
type workCalls struct {
	mu    sync.Mutex
	byRun map[string][]string
}

func (w *workCalls) of(runID string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.byRun[runID])
}

// Status, approve, cancel and resume over the MCP server of an engine that does not run the run
// (docs/operations/cluster.md, "Control from any engine": "CLI, MCP or Python on any host"). Engine A runs
// the runs and is the only one to host `work`; engine B, on the same PostgreSQL database, serves
// MCP over streamable HTTP on 127.0.0.1 and a real mcp-go client talks to it. B never ran the
// runs, so each answer it gives comes from the database or from A (through control_requests):
// an engine that answered from its own memory would not know the runs at all.
func TestClusterControlOverMCPOfAnotherEngine(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	// A lease of 3 s: long enough that no heartbeat falls behind on a busy machine (a takeover
	// would move a run to B), short enough for the test's engines to close quickly.
	const lease = 3

	// Engine A: runs the runs, hosts `work` (answered by the test, which records the calls).
	a, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: lease})
	if err != nil {
		t.Fatal(err)
	}
	hostCtx, stopHost := context.WithCancel(ctx)
	hostDone := make(chan struct{})
	t.Cleanup(func() {
		stopHost()
		<-hostDone
		_ = a.Close(context.Background())
	})
	if err := a.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	calls := &workCalls{byRun: map[string][]string{}}
	go func() {
		defer close(hostDone)
		for hostCtx.Err() == nil {
			cs, err := a.Host().Pull(hostCtx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				k, _ := c.Args["k"].(string)
				calls.mu.Lock()
				calls.byRun[c.RunID] = append(calls.byRun[c.RunID], k)
				calls.mu.Unlock()
				_ = a.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"k": k}})
			}
		}
	}()

	// Engine B: hosts nothing, serves MCP.
	b, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: lease})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	hs, err := mcpserver.New(b).ListenHTTP("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hs.Close(cctx); err != nil {
			t.Errorf("closing B's MCP server: %v", err)
		}
	})
	tr, err := transport.NewStreamableHTTP(hs.URL(), transport.WithHTTPLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, client.WithProtocolVersion(mcp.ProtocolVersion20251125))
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{ProtocolVersion: mcp.ProtocolVersion20251125,
		ClientInfo: mcp.Implementation{Name: "cluster-test", Version: "1"}}}); err != nil {
		t.Fatal(err)
	}
	callB := func(name string, args map[string]any) (map[string]any, bool) {
		t.Helper()
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = name, args
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatalf("%s over B's MCP: %v", name, err)
		}
		var out map[string]any
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s over B's MCP: structured content %s: %v", name, raw, err)
		}
		return out, res.IsError
	}
	// waitingOnA submits the workflow on A and returns the run once A lists its open approval.
	waitingOnA := func() string {
		t.Helper()
		id, err := a.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, mcpGated)})
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			info, err := a.Status(ctx, id)
			if err == nil && info.Status == run.StatusWaiting && len(info.Approvals) == 1 {
				return id
			}
			if time.Now().After(deadline) {
				t.Fatalf("run %s never waited for its approval on A: %+v %v", id, info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// statusOverB is workflows_get_status through B; it checks that the run waits for gate.
	statusOverB := func(id string) {
		t.Helper()
		st, isErr := callB("workflows_get_status", map[string]any{"workflow_id": id})
		if isErr {
			t.Fatalf("workflows_get_status of %s over B: %v", id, st)
		}
		approvals, _ := st["approvals"].([]any)
		if st["status"] != string(run.StatusWaiting) || st["terminal"] != false || len(approvals) != 1 {
			t.Fatalf("workflows_get_status of %s over B: %v; want waiting with one open approval", id, st)
		}
		ap, _ := approvals[0].(map[string]any)
		if ap["step_key"] != "gate" || ap["prompt"] != "publish prep?" {
			t.Fatalf("open approval over B: %v; want step gate, prompt %q", ap, "publish prep?")
		}
	}
	owner := func(id string) string {
		t.Helper()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var o string
		if err := conn.QueryRow(ctx, `SELECT owner FROM workflows WHERE id = $1`, id).Scan(&o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	stepWorker := func(info *engine.RunInfo, key string) string {
		t.Helper()
		for _, s := range info.Steps {
			if s.Key == key {
				return s.Worker
			}
		}
		t.Fatalf("run %s has no step %s: %+v", info.ID, key, info.Steps)
		return ""
	}

	// 1. A run waiting on A: its status and open approval over B; a refusal of A comes back
	// through B; the approval over B lets the run complete on A.
	gated := waitingOnA()
	statusOverB(gated)
	if out, isErr := callB("workflows_approve", map[string]any{"workflow_id": gated, "step": "nope", "approved": true}); !isErr ||
		out["code"] != run.CodeInvalidState {
		t.Fatalf("approving a step that does not wait, over B: %v (error %v); want A's invalid_state", out, isErr)
	}
	if out, isErr := callB("workflows_approve", map[string]any{"workflow_id": gated, "step": "gate", "approved": true,
		"by": "mcp-client-of-b"}); isErr || out["approved"] != true {
		t.Fatalf("workflows_approve over B: %v (error %v)", out, isErr)
	}
	info, err := a.Wait(ctx, gated, 15*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("the approved run on A: %+v %v", info, err)
	}
	if got := calls.of(gated); !slices.Equal(got, []string{"prep", "after"}) {
		t.Fatalf("work calls of the approved run: %v", got)
	}
	// A ran it to its end: its own call of `after` (not one queued by another orchestrator), and
	// it is still the run's owner.
	if w := stepWorker(info, "after"); w != "" {
		t.Fatalf("step after of the approved run ran through the queue (worker %q), not on A", w)
	}
	if o := owner(gated); o != a.EngineID() {
		t.Fatalf("the approved run's owner is %q, want A %q (B %q)", o, a.EngineID(), b.EngineID())
	}
	evs, err := b.PollEvents(ctx, engine.EventQuery{RunID: gated}, 0)
	if err != nil {
		t.Fatal(err)
	}
	resolved := false
	for _, ev := range evs {
		if ev.Type == run.EventInterrupted {
			t.Fatalf("the approved run was interrupted (taken over?): %+v", ev)
		}
		if ev.Type == run.EventApproveResolved {
			resolved = strings.Contains(string(ev.Detail), "mcp-client-of-b")
		}
	}
	if !resolved {
		t.Fatalf("no approve_resolved event by mcp-client-of-b among the run's events: %+v", evs)
	}

	// 2. Another run waiting on A, cancelled over B: it ends cancelled on A, with the reason.
	cancelled := waitingOnA()
	statusOverB(cancelled)
	out, isErr := callB("workflows_cancel", map[string]any{"workflow_id": cancelled, "reason": "stopped over B's MCP"})
	if isErr || out["status"] != string(run.StatusCancelled) || out["terminal"] != true {
		t.Fatalf("workflows_cancel over B: %v (error %v); want cancelled", out, isErr)
	}
	info, err = a.Wait(ctx, cancelled, 15*time.Second)
	if err != nil || info.Status != run.StatusCancelled || info.Error == nil || !strings.Contains(info.Error.Message, "stopped over B's MCP") {
		t.Fatalf("the cancelled run on A: %+v %v", info, err)
	}
	if o := owner(cancelled); o != a.EngineID() {
		t.Fatalf("the cancelled run's owner is %q, want A %q (B %q)", o, a.EngineID(), b.EngineID())
	}

	// 3. The run cancelled on A, resumed over B: B becomes its owner and orchestrates it; prep
	// (completed on A) does not run again, the gate asks again and, approved over B, lets
	// `after` run, on A through the tool-call queue (B hosts no `work`).
	out, isErr = callB("workflows_resume", map[string]any{"workflow_id": cancelled})
	if isErr || out["terminal"] != false {
		t.Fatalf("workflows_resume over B: %v (error %v)", out, isErr)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		st, isErr := callB("workflows_get_status", map[string]any{"workflow_id": cancelled})
		if approvals, _ := st["approvals"].([]any); !isErr && st["status"] == string(run.StatusWaiting) && len(approvals) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed run never waited for its approval again: %v", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	statusOverB(cancelled)
	if o := owner(cancelled); o != b.EngineID() {
		t.Fatalf("the resumed run's owner is %q, want B %q (A %q)", o, b.EngineID(), a.EngineID())
	}
	// A, which no longer runs it, reads the open approval from the database: one, not also the
	// one its own cancelled attempt asked.
	if seen, err := a.Status(ctx, cancelled); err != nil || len(seen.Approvals) != 1 || seen.Approvals[0].StepKey != "gate" {
		t.Fatalf("A's status of the run B resumed: %+v %v", seen, err)
	}
	if out, isErr := callB("workflows_approve", map[string]any{"workflow_id": cancelled, "step": "gate", "approved": true}); isErr {
		t.Fatalf("workflows_approve of the resumed run over B: %v", out)
	}
	info, err = a.Wait(ctx, cancelled, 15*time.Second) // A reads it from the database
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("the resumed run: %+v %v", info, err)
	}
	if got := calls.of(cancelled); !slices.Equal(got, []string{"prep", "after"}) {
		t.Fatalf("work calls of the resumed run: %v; want prep once (before the cancel) and after once", got)
	}
	if w := stepWorker(info, "after"); w != a.EngineID() {
		t.Fatalf("step after of the resumed run: worker %q, want A %q through the queue", w, a.EngineID())
	}
	if st, isErr := callB("workflows_get_status", map[string]any{"workflow_id": cancelled}); isErr || st["status"] != string(run.StatusCompleted) {
		t.Fatalf("workflows_get_status of the resumed run over B: %v", st)
	}
	t.Logf("A %s, B %s", a.EngineID(), b.EngineID())
}
