package gotest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The tool-call queue (docs/operations/cluster.md, "The tool-call queue"), with engines in this process.

// openQueueEngine opens an engine on db with a short lease; tool, when set, is registered and
// answered by answer (nil: pulled and never answered; the number of pulls is counted).
func openQueueEngine(t *testing.T, db, tool string, answer func(args map[string]any) flowtype.ToolResult, pulls *atomic.Int32) *engine.Engine {
	t.Helper()
	return openLeasedEngine(t, db, 0.6, tool, answer, pulls)
}

// openLeasedEngine is openQueueEngine with a lease of leaseSecs.
func openLeasedEngine(t *testing.T, db string, leaseSecs float64, tool string, answer func(args map[string]any) flowtype.ToolResult, pulls *atomic.Int32) *engine.Engine {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: leaseSecs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = e.Close(context.Background())
	})
	if tool == "" {
		return e
	}
	if err := e.RegisterTool(flowtype.ToolInfo{Name: tool, Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				if pulls != nil {
					pulls.Add(1)
				}
				if answer != nil {
					_ = e.Host().Complete(c.ID, answer(c.Args))
				}
			}
		}
	}()
	return e
}

func queueRows(t *testing.T, db string) []string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT tool || ' ' || attempt || ' ' || status || ' ' || error_kind FROM tool_calls ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runRow returns the workflows row of run id as the lease logic sees it (status, owner, lease,
// the database's clock), for a failing test's message.
func runRow(t *testing.T, db, id string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(context.Background())
	var row string
	if err := conn.QueryRow(context.Background(), `SELECT format('status %s owner %s lease_until %s now %s updated_at %s',
		status, owner, lease_until, now(), updated_at) FROM workflows WHERE id = $1`, id).Scan(&row); err != nil {
		return err.Error()
	}
	return row
}

func mustSpec(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// An engine that does not host `export` runs a workflow that calls it: the calls go through the
// queue to the engine that hosts it, with their args, and the outputs come back.
func TestQueueCallRunsOnTheEngineThatHostsTheTool(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	orch := openQueueEngine(t, db, "", nil, nil)
	// Without an engine that hosts it, the tool is unknown, as on one engine.
	s := mustSpec(t, `
name: q
steps:
  - id: per
    kind: foreach
    items: [1, 2, 3]
    steps: [{id: export, tool: export, args: {i: "{{item}}"}}]
  - {id: after, tool: flow__echo, args: {value: "{{per}}"}}
`)
	ctx := context.Background()
	if _, err := orch.Submit(ctx, engine.StartRequest{Spec: s}); run.CodeOf(err) != run.CodeUnknownTool {
		t.Fatalf("submit without a host of export: %v", err)
	}
	var pulls atomic.Int32
	worker := openQueueEngine(t, db, "export", func(args map[string]any) flowtype.ToolResult {
		return flowtype.ToolResult{Output: map[string]any{"fbx": args["i"].(float64) * 10}}
	}, &pulls)
	start := time.Now()
	id, err := orch.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	info, err := orch.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	t.Logf("3 queued calls and the run: %s", time.Since(start))
	out, _ := json.Marshal(info.Outputs["after"])
	if string(out) != `{"value":[{"export":{"fbx":10}},{"export":{"fbx":20}},{"export":{"fbx":30}}]}` {
		t.Fatalf("outputs: %s", out)
	}
	if pulls.Load() != 3 {
		t.Fatalf("the worker engine pulled %d calls, want 3", pulls.Load())
	}
	if rows := queueRows(t, db); strings.Join(rows, ",") != "export 1 done ,export 1 done ,export 1 done " {
		t.Fatalf("queue rows: %q", rows)
	}
	// The step records name the engine that ran the call as their worker.
	steps, err := orch.Steps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, st := range steps {
		if st.StepID == "export" {
			n++
			if st.Worker != worker.EngineID() {
				t.Errorf("step %s: worker %q, want %q", st.Key, st.Worker, worker.EngineID())
			}
		}
	}
	if n != 3 {
		t.Fatalf("%d export steps: %+v", n, steps)
	}
}

// A worker engine that claimed a call and died (here a claim made by hand for an engine that
// never answers) has the attempt failed worker_lost once its claim's lease expired; the step is
// retried and the retry runs on a live worker.
func TestQueueLostWorkerIsRetried(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	orch := openQueueEngine(t, db, "", nil, nil)
	// A "ghost" engine that hosts render: the call is queued for it.
	if _, err := conn.Exec(ctx, `INSERT INTO engines (id, tools, lease_secs) VALUES ('ghost', '["render"]', 0.6)`); err != nil {
		t.Fatal(err)
	}
	s := mustSpec(t, `
name: lost
steps:
  - {id: r, tool: render, args: {f: 1}, retry: {max_attempts: 2, initial_delay_ms: 0}}
`)
	var id string
	deadline := time.Now().Add(5 * time.Second)
	for {
		// The orchestrator reads the engines table at most once a second on a miss.
		if id, err = orch.Submit(ctx, engine.StartRequest{Spec: s}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	var claimed int64
	for claimed == 0 && time.Now().Before(deadline) {
		tag, err := conn.Exec(ctx, `UPDATE tool_calls SET status = 'claimed', claimed_by = 'ghost', claimed_at = now(),
			lease_until = now() + interval '300 milliseconds' WHERE status = 'queued' AND tool = 'render'`)
		if err != nil {
			t.Fatal(err)
		}
		claimed = tag.RowsAffected()
		time.Sleep(20 * time.Millisecond)
	}
	if claimed != 1 {
		t.Fatal("the call was never queued")
	}
	lostAt := time.Now()
	// The orchestrator's heartbeat fails the claim worker_lost; the retry is queued and waits.
	for {
		rows := queueRows(t, db)
		if len(rows) == 2 {
			if rows[0] != "render 1 done worker_lost" || rows[1] != "render 2 queued " {
				t.Fatalf("queue rows: %q", rows)
			}
			break
		}
		if time.Since(lostAt) > 5*time.Second {
			t.Fatalf("no worker_lost within 5 s: %q", rows)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("worker_lost and the retry queued %s after the claim (lease 300 ms)", time.Since(lostAt))
	openQueueEngine(t, db, "render", func(map[string]any) flowtype.ToolResult { return flowtype.ToolResult{Output: "ok"} }, nil)
	info, err := orch.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	steps, err := orch.Steps(ctx, id)
	if err != nil || len(steps) != 1 || steps[0].Attempts != 2 || steps[0].Status != run.StepCompleted {
		t.Fatalf("steps: %+v %v", steps, err)
	}
	if rows := queueRows(t, db); len(rows) != 2 || rows[1] != "render 2 done " {
		t.Fatalf("queue rows: %q", rows)
	}
}

// A cancel reaches a queued call (nobody claimed it: it is marked cancelled, never claimed) and
// a claimed one (the worker engine's call is cancelled; its host sees it).
func TestQueueCancelReachesQueuedAndClaimedCalls(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	orch := openQueueEngine(t, db, "", nil, nil)
	if _, err := conn.Exec(ctx, `INSERT INTO engines (id, tools, lease_secs) VALUES ('ghost', '["idle"]', 0.6)`); err != nil {
		t.Fatal(err)
	}
	var pulls atomic.Int32
	worker := openQueueEngine(t, db, "hang", nil, &pulls) // pulled, never answered
	idle, err := orch.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: c1\nsteps: [{id: queued, tool: idle, args: {}}]\n")})
	if err != nil {
		t.Fatal(err)
	}
	hang, err := orch.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: c2\nsteps: [{id: claimed, tool: hang, args: {}}]\n")})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	// Both calls queued (the idle one stays queued: only the ghost hosts it), the hang one pulled.
	for pulls.Load() == 0 || worker.Host().Pending() == 0 || len(queueRows(t, db)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the calls never reached the queue and the worker: %q", queueRows(t, db))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, id := range []string{idle, hang} {
		if err := orch.Cancel(ctx, id, "enough"); err != nil {
			t.Fatal(err)
		}
		info, err := orch.Wait(ctx, id, 10*time.Second)
		if err != nil || info.Status != run.StatusCancelled {
			t.Fatalf("run: %+v %v", info, err)
		}
	}
	for worker.Host().Pending() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the claimed call is still pending on the worker engine")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rows := queueRows(t, db)
	sort.Strings(rows) // the two runs enqueue their calls concurrently: either may come first
	if strings.Join(rows, ",") != "hang 1 cancelled ,idle 1 cancelled " {
		t.Fatalf("queue rows: %q", rows)
	}
}

// A worker engine that closes while it runs a queued call fails it worker_lost at once (not a
// lease later: its lease here is 30 s), and the retry runs on another worker.
func TestQueueClosingWorkerFailsItsCallsAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	ctx := context.Background()
	orch := openQueueEngine(t, db, "", nil, nil)
	w, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close(ctx)
	if err := w.RegisterTool(flowtype.ToolInfo{Name: "render", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	id, err := orch.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: closing
steps:
  - {id: r, tool: render, args: {}, retry: {max_attempts: 2, initial_delay_ms: 0}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Host().Pending() == 0 { // claimed, waiting for a pull that never comes
		if time.Now().After(deadline) {
			t.Fatalf("the call never reached the worker: %q", queueRows(t, db))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The engine that takes the retry is up before the worker closes: a closing engine deletes
	// its row of hosted tools, and a retry queued while no attached engine hosts render fails at
	// once with unknown_tool (docs/operations/cluster.md). Opened after the Close, it raced the immediate
	// retry (initial_delay_ms 0) and lost about 1 run in 7 under -race.
	openQueueEngine(t, db, "render", func(map[string]any) flowtype.ToolResult { return flowtype.ToolResult{Output: 1} }, nil)
	closed := time.Now()
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rows := queueRows(t, db); len(rows) == 0 || rows[0] != "render 1 done worker_lost" {
		t.Fatalf("after the worker closed: %q", rows)
	}
	info, err := orch.Wait(ctx, id, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		var why []string
		for _, st := range info.Steps {
			for _, a := range st.AttemptHistory {
				if a.Error != nil {
					why = append(why, fmt.Sprintf("attempt %d on %q: %s: %s", a.Attempt, a.Worker, a.Error.Kind, a.Error.Message))
				}
			}
		}
		t.Fatalf("run: %+v %v; attempts: %q; queue: %q", info, err, why, queueRows(t, db))
	}
	t.Logf("worker closed; retried and completed %s later", time.Since(closed))
}

// An event subscription on one engine sees, as they commit, the events of a run another engine
// orchestrates (the dashboard of the pipeline server following a run submitted elsewhere): the
// other engine's writes do not wake this engine's readers, so a waiting subscription polls the
// shared database.
func TestEventsOfAnotherEngineReachASubscription(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	// The viewer's sessions are named, so the test can watch its reads in pg_stat_activity.
	viewer := openQueueEngine(t, db+"&application_name=dcc-flow-viewer", "", nil, nil)
	runner := openQueueEngine(t, db, "", nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := viewer.Subscribe(ctx, engine.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	submitted := make(chan string, 1)
	var wg sync.WaitGroup
	defer wg.Wait() // before ctx is cancelled: the goroutine ends with ctx at the latest
	wg.Go(func() {
		defer close(submitted)
		// The subscription is waiting before the run starts: Next reads the stream once, then
		// (finding nothing) again as it starts to wait, then only when its poll ticks. So once
		// two of the viewer's reads of the stream were seen, the later one finished, whatever
		// the run writes from then on reaches the subscription only through the poll.
		if err := awaitReads(ctx, conn, "dcc-flow-viewer", 2); err != nil {
			t.Error(err)
			return
		}
		id, err := runner.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: elsewhere\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]\n")})
		if err != nil {
			t.Error(err)
		}
		submitted <- id
	})
	var id string
	var ended []string // runs whose workflow_terminal was seen
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			break
		}
		if ev.Type == run.EventWorkflowTerminal {
			ended = append(ended, ev.RunID)
		}
		if id == "" {
			select {
			case id = <-submitted:
			default:
			}
		}
		if id != "" && slices.Contains(ended, id) {
			return
		}
	}
	t.Fatalf("the viewer engine's subscription never saw run %s complete: %v", id, context.Cause(ctx))
}

// awaitReads waits until pg_stat_activity has shown n reads of the event stream
// (workflow_events) by the sessions named app on conn's database, each started at another
// time, the latest finished (its session idle).
func awaitReads(ctx context.Context, conn *pgx.Conn, app string, n int) error {
	seen := map[int64]bool{} // query_start, in ns
	for {
		rows, err := conn.Query(ctx, `SELECT query_start, state FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = $1 AND query LIKE '%FROM workflow_events%' AND query_start IS NOT NULL`, app)
		if err != nil {
			return err
		}
		var latest time.Time
		idle := false
		for rows.Next() {
			var start time.Time
			var state string
			if err := rows.Scan(&start, &state); err != nil {
				rows.Close()
				return err
			}
			seen[start.UnixNano()] = true
			if start.After(latest) {
				latest, idle = start, state == "idle"
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(seen) >= n && idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d reads of the event stream by %s seen, want %d (a waiting subscription reads again when its poll ticks): %w",
				len(seen), app, n, context.Cause(ctx))
		case <-time.After(time.Millisecond):
		}
	}
}
