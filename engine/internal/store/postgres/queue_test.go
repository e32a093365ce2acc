package postgres_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The tool-call queue: a call is claimed once among engines claiming at once, only by an engine
// that names its tool; the outcome reaches the orchestrator with a NOTIFY; a claim whose lease
// expires is failed worker_lost once, however many engines expire at once, and its late
// outcome is dropped; a cancel reaches a queued and a claimed call.
func TestCallQueue(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	open := func(id string, lease time.Duration) *postgres.Store {
		s, err := postgres.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Attach(ctx, store.EngineInfo{ID: id, Lease: lease}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	orch, w1, w2 := open("O", time.Minute), open("W1", 300*time.Millisecond), open("W2", time.Minute)

	lctx, stop := context.WithCancel(ctx)
	defer stop()
	woken := make(chan string, 64)
	listening := make(chan error, 1)
	go func() { listening <- orch.ListenCalls(lctx, func(p string) { woken <- p }) }()
	// LISTEN is issued asynchronously: notify a probe until it arrives, so that no wake-up the
	// test waits for is sent before the listener listens (one was, under load: "no wake-up d:2").
	probe, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(ctx)
	for listened := false; !listened; {
		if _, err := probe.Exec(ctx, `SELECT pg_notify('dcc_flow_calls', 'probe')`); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-woken:
			listened = p == "probe"
		case err := <-listening:
			t.Fatalf("listen: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	wait := func(want string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case p := <-woken:
				if p == want {
					return
				}
			case <-deadline:
				t.Fatalf("no wake-up %q", want)
			}
		}
	}

	// Twenty calls, two tools; three claimers at once never share a call.
	var ids []int64
	for i := range 20 {
		tool := "export"
		if i%2 == 1 {
			tool = "render"
		}
		id, err := orch.EnqueueCall(ctx, store.QueuedCall{RunID: "r", StepKey: "s", Attempt: 1, Tool: tool, Args: json.RawMessage(`{"i":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var mu sync.Mutex
	got := map[int64]string{}
	first, err := w1.ClaimCall(ctx, []string{"export"}, nil)
	if err != nil || first == nil || first.ID != ids[0] {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	got[first.ID] = first.Tool
	var wg sync.WaitGroup
	for _, w := range []*postgres.Store{w1, w2, w2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := w.ClaimCall(ctx, []string{"export"}, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if c == nil {
					return
				}
				mu.Lock()
				if _, dup := got[c.ID]; dup {
					t.Errorf("call %d claimed twice", c.ID)
				}
				got[c.ID] = c.Tool
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(got) != 10 {
		t.Fatalf("claimed %d export calls, want 10: %v", len(got), got)
	}
	for _, tool := range got {
		if tool != "export" {
			t.Fatalf("claimed a %s call for export", tool)
		}
	}

	// A render call claimed by W2 and completed: its orchestrator is woken and reads the output.
	c, err := w2.ClaimCall(ctx, []string{"render"}, nil)
	if err != nil || c == nil || c.Tool != "render" || c.RunID != "r" || string(c.Args) != `{"i":1}` {
		t.Fatalf("claim: %+v %v", c, err)
	}
	if ok, err := w1.CompleteCall(ctx, c.ID, store.CallOutcome{Output: json.RawMessage(`1`)}); ok || err != nil {
		t.Fatalf("W1 completed W2's call: %v %v", ok, err)
	}
	if ok, err := w2.CompleteCall(ctx, c.ID, store.CallOutcome{Output: json.RawMessage(`{"fbx":"a.fbx"}`)}); !ok || err != nil {
		t.Fatalf("complete: %v %v", ok, err)
	}
	wait("d:" + itoa(c.ID))
	if st, out, err := orch.CallStatus(ctx, c.ID); st != "done" || string(out.Output) != `{"fbx":"a.fbx"}` || out.ErrorKind != "" || out.Worker != "W2" || err != nil {
		t.Fatalf("status: %s %+v %v", st, out, err)
	}

	// W1's claims (lease 300 ms) expire: three engines expiring at once fail each once.
	var w1ids []int64
	for id := range got {
		if held, err := w2.RenewCalls(ctx, []int64{id}); err != nil || len(held) > 1 {
			t.Fatal(held, err)
		} else if len(held) == 0 {
			w1ids = append(w1ids, id)
		}
	}
	if len(w1ids) == 0 {
		t.Fatal("W1 holds no claim (it claimed one before the race)")
	}
	time.Sleep(400 * time.Millisecond)
	var expired []int64
	for _, s := range []*postgres.Store{orch, w2, orch} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids, err := s.ExpireCalls(ctx)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			expired = append(expired, ids...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(expired, func(i, j int) bool { return expired[i] < expired[j] })
	sort.Slice(w1ids, func(i, j int) bool { return w1ids[i] < w1ids[j] })
	if len(expired) != len(w1ids) || itoas(expired) != itoas(w1ids) {
		t.Fatalf("expired %v, want W1's claims %v once each", expired, w1ids)
	}
	st, out, err := orch.CallStatus(ctx, w1ids[0])
	if st != "done" || out.ErrorKind != "worker_lost" || !strings.Contains(out.ErrorMessage, "engine W1") || err != nil {
		t.Fatalf("expired call: %s %+v %v", st, out, err)
	}
	if ok, err := w1.CompleteCall(ctx, w1ids[0], store.CallOutcome{Output: json.RawMessage(`2`)}); ok || err != nil {
		t.Fatalf("a late outcome was recorded: %v %v", ok, err)
	}

	// Cancel: a queued call is never claimed; a claimed one drops out of its worker's renewals.
	var q int64
	for _, id := range ids {
		if st, _, _ := orch.CallStatus(ctx, id); st == "queued" {
			q = id
			break
		}
	}
	if q == 0 {
		t.Fatal("no call left queued")
	}
	if err := orch.CancelCall(ctx, q); err != nil {
		t.Fatal(err)
	}
	wait("c:" + itoa(q))
	c2, err := w2.ClaimCall(ctx, []string{"render"}, nil)
	if err != nil || c2 == nil || c2.ID == q {
		t.Fatalf("claim after cancel: %+v %v", c2, err)
	}
	if err := orch.CancelCall(ctx, c2.ID); err != nil {
		t.Fatal(err)
	}
	if held, err := w2.RenewCalls(ctx, []int64{c2.ID}); len(held) != 0 || err != nil {
		t.Fatalf("a cancelled claim was renewed: %v %v", held, err)
	}
	if st, _, _ := orch.CallStatus(ctx, c2.ID); st != "cancelled" {
		t.Fatalf("cancelled claim: %s", st)
	}
	if ok, _ := w2.CompleteCall(ctx, c2.ID, store.CallOutcome{ErrorKind: "cancelled"}); ok {
		t.Fatal("a cancelled call took an outcome")
	}
	if _, _, err := orch.CallStatus(ctx, 1<<40); err != store.ErrNotFound {
		t.Fatalf("unknown call: %v", err)
	}
	// A call that finished more than a day ago is deleted by the next expiry; a recent one stays.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE tool_calls SET done_at = now() - interval '25 hours' WHERE id = $1`, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := orch.ExpireCalls(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := orch.CallStatus(ctx, c.ID); err != store.ErrNotFound {
		t.Fatalf("a call done 25 h ago: %v", err)
	}
	if st, _, err := orch.CallStatus(ctx, c2.ID); st != "cancelled" || err != nil {
		t.Fatalf("a call cancelled just now: %s %v", st, err)
	}
	stop()
	if err := <-listening; err != context.Canceled {
		t.Fatalf("listen ended with %v", err)
	}
}

func itoa(v int64) string { b, _ := json.Marshal(v); return string(b) }

func itoas(v []int64) string { b, _ := json.Marshal(v); return string(b) }

// Calls of a remote (a worker pool, an MCP server): an engine claims them by the remote's
// name, never by the tool's, and a host-tool claim never takes them; the worker recorded with
// the outcome (engine and pool worker) and the call's output lines are what CallStatus returns;
// the engines row lists the remotes an engine advertises.
func TestCallQueueRemoteCalls(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	open := func(id string, remotes []string) *postgres.Store {
		s, err := postgres.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Attach(ctx, store.EngineInfo{ID: id, Lease: time.Minute, Tools: []string{"export"}, Remotes: remotes}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	orch, farm := open("O", nil), open("FARM", []string{"maya"})
	es, err := orch.Engines(ctx)
	if err != nil {
		t.Fatal(err)
	}
	advertised := map[string][]string{}
	for _, e := range es {
		advertised[e.ID] = e.Remotes
	}
	if strings.Join(advertised["FARM"], ",") != "maya" || len(advertised["O"]) != 0 {
		t.Fatalf("engines' remotes: %v", advertised)
	}
	// A heartbeat rewrites them.
	if _, err := farm.Heartbeat(ctx, store.EngineInfo{ID: "FARM", Remotes: []string{"houdini", "maya"}}, nil); err != nil {
		t.Fatal(err)
	}
	if es, err = orch.Engines(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.ID == "FARM" && strings.Join(e.Remotes, ",") != "houdini,maya" {
			t.Fatalf("FARM's remotes after a beat: %v", e.Remotes)
		}
	}
	id, err := orch.EnqueueCall(ctx, store.QueuedCall{RunID: "r", StepKey: "s", Attempt: 1, Tool: "export", Remote: "maya", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	// The tool is hosted by both, but the call is for remote maya: a host-tool claim skips it.
	if c, err := orch.ClaimCall(ctx, []string{"export"}, nil); err != nil || c != nil {
		t.Fatalf("a host-tool claim took a remote call: %+v %v", c, err)
	}
	if c, err := orch.ClaimCall(ctx, nil, []string{"houdini"}); err != nil || c != nil {
		t.Fatalf("a claim for another remote took it: %+v %v", c, err)
	}
	c, err := farm.ClaimCall(ctx, []string{"other"}, []string{"maya"})
	if err != nil || c == nil || c.ID != id || c.Remote != "maya" || c.Tool != "export" {
		t.Fatalf("claim by remote: %+v %v", c, err)
	}
	logs := json.RawMessage(`[{"stream":"stdout","text":"opening sh010.ma"}]`)
	if ok, err := farm.CompleteCall(ctx, id, store.CallOutcome{Output: json.RawMessage(`{"ok":1}`), Worker: "FARM/maya/42",
		Logs: logs, LogsDropped: 3}); err != nil || !ok {
		t.Fatalf("complete: %v %v", ok, err)
	}
	status, out, err := orch.CallStatus(ctx, id)
	if err != nil || status != "done" || out.Worker != "FARM/maya/42" || string(out.Output) != `{"ok":1}` ||
		string(out.Logs) != string(logs) || out.LogsDropped != 3 {
		t.Fatalf("status: %s %+v %v", status, out, err)
	}
	// A host-tool call is still claimed by tool, and its worker defaults to the claiming engine.
	hid, err := orch.EnqueueCall(ctx, store.QueuedCall{RunID: "r", StepKey: "h", Attempt: 1, Tool: "export"})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := farm.ClaimCall(ctx, nil, []string{"maya"}); err != nil || c != nil {
		t.Fatalf("a remote claim took a host-tool call: %+v %v", c, err)
	}
	if c, err := farm.ClaimCall(ctx, []string{"export"}, []string{"maya"}); err != nil || c == nil || c.ID != hid || c.Remote != "" {
		t.Fatalf("host-tool claim: %+v %v", c, err)
	}
	if ok, err := farm.CompleteCall(ctx, hid, store.CallOutcome{Output: json.RawMessage(`1`)}); err != nil || !ok {
		t.Fatalf("complete: %v %v", ok, err)
	}
	if _, out, err := orch.CallStatus(ctx, hid); err != nil || out.Worker != "FARM" || out.Logs != nil || out.LogsDropped != 0 {
		t.Fatalf("host-tool call's worker: %+v %v", out, err)
	}
}
