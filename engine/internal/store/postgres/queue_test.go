package postgres_test

import (
	"context"
	"encoding/json"
	"github.com/dcc-flow/dcc-flow/engine/run"
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

// listening starts s listening to the queue's wake-ups and returns them, once the listener
// listens, with the function that stops it (and returns how ListenCalls ended; the test's end
// stops it too): LISTEN is issued asynchronously, so it notifies a probe until the
// probe arrives, and no wake-up the test waits for is sent before the listener listens (one
// was, under load: "no wake-up d:2").
func listening(t *testing.T, s *postgres.Store, url string) (chan string, func() error) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	woken := make(chan string, 64)
	failed := make(chan error, 1)
	go func() { failed <- s.ListenCalls(ctx, nil, func(p string) { woken <- p }) }()
	probe, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(context.Background())
	for {
		if _, err := probe.Exec(ctx, `SELECT pg_notify('dcc_flow_calls', 'probe')`); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-woken:
			if p == "probe" {
				return woken, func() error { stop(); return <-failed }
			}
		case err := <-failed:
			t.Fatalf("listen: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The tool-call queue: a call is claimed once among engines claiming at once, only by an engine
// that names its tool; the outcome reaches the orchestrator with a NOTIFY; a claim whose lease
// expires is failed worker_lost once, however many engines expire at once, and its late
// outcome is dropped; a cancel reaches a queued and a claimed call.
func TestCallQueue(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	open := func(id string, lease time.Duration) *postgres.Store {
		s := openURL(t, url)
		if err := s.Attach(ctx, store.EngineInfo{ID: id, Lease: lease}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	orch, w1, w2 := open("O", time.Minute), open("W1", 300*time.Millisecond), open("W2", time.Minute)

	woken, stop := listening(t, orch, url)
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
	if err := stop(); err != context.Canceled {
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
		s := openURL(t, url)
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

// The reports of a queued call: only the engine holding the claim writes them (not another
// engine, not after a cancel, not after its claim expired); the orchestrator is woken ("p:ID")
// and reads them past the last seq it read, in order, with their progress, lines and drop
// counts; they are deleted with the call's row.
func TestCallReports(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	open := func(id string, lease time.Duration) *postgres.Store {
		s := openURL(t, url)
		if err := s.Attach(ctx, store.EngineInfo{ID: id, Lease: lease}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	orch, w1, w2 := open("O", time.Minute), open("W1", 300*time.Millisecond), open("W2", time.Minute)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	woken := make(chan string, 64)
	go func() { _ = orch.ListenCalls(lctx, nil, func(p string) { woken <- p }) }()
	// LISTEN is issued asynchronously: enqueue until the first wake-up arrives.
	for listening := false; !listening; {
		if _, err := orch.EnqueueCall(ctx, store.QueuedCall{RunID: "r", StepKey: "warm", Tool: "warm"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woken:
			listening = true
		case <-time.After(100 * time.Millisecond):
		}
	}

	enqueueClaim := func(w *postgres.Store) int64 {
		t.Helper()
		if _, err := orch.EnqueueCall(ctx, store.QueuedCall{RunID: "r", StepKey: "s", Attempt: 1, Tool: "cache"}); err != nil {
			t.Fatal(err)
		}
		c, err := w.ClaimCall(ctx, []string{"cache"}, nil)
		if err != nil || c == nil {
			t.Fatalf("claim: %+v %v", c, err)
		}
		return c.ID
	}
	report := func(w *postgres.Store, id int64, seq int) bool {
		t.Helper()
		total := 10.0
		ok, err := w.ReportCall(ctx, id, store.CallReport{Seq: seq, Progress: &run.StepProgress{Done: float64(seq), Total: &total, Message: "frames"},
			Lines: []run.LogLine{run.LogLineOf("line "+itoa(int64(seq)), json.RawMessage(`{"frame":1}`)), run.LogLineOf("bad \xff\x00", nil)}, Dropped: seq - 1})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	rows := func(id int64) int {
		t.Helper()
		rs, err := orch.CallReports(ctx, id, 0)
		if err != nil {
			t.Fatal(err)
		}
		return len(rs)
	}

	id := enqueueClaim(w1)
	if report(w2, id, 1) {
		t.Fatal("W2 wrote a report of W1's claim")
	}
	for seq := 1; seq <= 3; seq++ {
		if !report(w1, id, seq) {
			t.Fatalf("W1's report %d of its own claim was refused", seq)
		}
	}
	deadline := time.After(5 * time.Second)
	for p := ""; p != "p:"+itoa(id); {
		select {
		case p = <-woken:
		case <-deadline:
			t.Fatal("no p: wake-up for a report")
		}
	}
	if st, out, err := orch.CallStatus(ctx, id); st != "claimed" || out.LastReport != 3 || err != nil {
		t.Fatalf("status: %s, last report %d, %v; want claimed, 3", st, out.LastReport, err)
	}
	rs, err := orch.CallReports(ctx, id, 1)
	if err != nil || len(rs) != 2 || rs[0].Seq != 2 || rs[1].Seq != 3 {
		t.Fatalf("reports past 1: %+v %v", rs, err)
	}
	r := rs[1]
	if r.Progress == nil || r.Progress.Done != 3 || *r.Progress.Total != 10 || r.Progress.Message != "frames" || r.Dropped != 2 ||
		len(r.Lines) != 2 || r.Lines[0].Text != "line 3" || string(r.Lines[0].Fields) != `{"frame":1}` || r.Lines[0].Stream != run.StreamLog ||
		r.Lines[1].Text != "bad \uFFFD\u0000" {
		t.Fatalf("report 3: %+v %+v", r, r.Lines)
	}

	// A cancelled call takes no more reports; nor does a done one.
	if err := orch.CancelCall(ctx, id); err != nil {
		t.Fatal(err)
	}
	if report(w1, id, 4) || rows(id) != 3 {
		t.Fatalf("a report after the cancel was written (%d rows)", rows(id))
	}
	done := enqueueClaim(w2)
	if !report(w2, done, 1) {
		t.Fatal("refused")
	}
	if ok, err := w2.CompleteCall(ctx, done, store.CallOutcome{Output: json.RawMessage(`1`)}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if report(w2, done, 2) || rows(done) != 1 {
		t.Fatal("a report after the outcome was written")
	}
	// W1's claim (lease 300 ms) expires and is failed worker_lost: W1 cannot report any more.
	lost := enqueueClaim(w1)
	time.Sleep(400 * time.Millisecond)
	if _, err := orch.ExpireCalls(ctx); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := orch.CallStatus(ctx, lost); out.LastReport != 0 {
		t.Fatalf("a call without reports: last report %d", out.LastReport)
	}
	if report(w1, lost, 1) || rows(lost) != 0 {
		t.Fatal("a worker whose claim expired wrote a report")
	}
	if rs, err := orch.CallReports(ctx, 1<<40, 0); len(rs) != 0 || err != nil {
		t.Fatalf("reports of an unknown call: %v %v", rs, err)
	}

	// Housekeeping deletes the reports written more than an hour ago (of a call still running),
	// and a call's reports with its row.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	running := enqueueClaim(w2)
	for seq := 1; seq <= 2; seq++ {
		if !report(w2, running, seq) {
			t.Fatal("refused")
		}
	}
	if _, err := conn.Exec(ctx, `UPDATE tool_call_reports SET created_at = now() - interval '61 minutes' WHERE call_id = $1 AND seq = 1`, running); err != nil {
		t.Fatal(err)
	}
	if _, err := orch.ExpireCalls(ctx); err != nil {
		t.Fatal(err)
	}
	if rs, err := orch.CallReports(ctx, running, 0); err != nil || len(rs) != 1 || rs[0].Seq != 2 {
		t.Fatalf("after an expiry, the reports of a running call: %+v %v; want seq 2 only", rs, err)
	}
	if rows(id) != 3 {
		t.Fatal("recent reports were deleted")
	}
	if _, err := conn.Exec(ctx, `UPDATE tool_calls SET done_at = now() - interval '25 hours' WHERE id = ANY($1)`, []int64{id, done}); err != nil {
		t.Fatal(err)
	}
	if _, err := orch.ExpireCalls(ctx); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM tool_call_reports WHERE call_id <> $1`, running).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d report rows left after their calls were deleted (%v)", left, err)
	}
}
