package gotest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Pools and remotes on other engines (docs/operations/cluster.md, "Pools and remotes on other engines"):
// an orchestrating engine without a pool queues the calls of its pool steps, tool_pools-routed
// steps and tool_remote steps for an engine attached to the database that has the pool, which
// runs them on its workers (stand-in MCP stdio servers).

// openPoolWorker opens an engine on db with a 2-worker pool named maya of the test MCP server,
// logging to log.
func openPoolWorker(t *testing.T, db, bin, log string) *engine.Engine {
	t.Helper()
	w, err := engine.Open(context.Background(), engine.Config{DB: db, LeaseSecs: 0.6, Remotes: map[string]engine.RemoteConfig{
		"maya": {Command: []string{bin, "-log", log}, Workers: 2, KillAfterSecs: 5},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close(context.Background()) })
	return w
}

func remoteQueueRows(t *testing.T, db string) []string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT remote || ' ' || tool || ' ' || status || ' ' || error_kind FROM tool_calls ORDER BY step_key, id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestQueuePoolStepsRunOnTheEngineThatHasThePool(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	bin := mcpServer(t)
	ctx := context.Background()
	// The orchestrator routes echo to maya by tool_pools, a remote it does not have: on a
	// shared database that is accepted when it opens, and checked at submit.
	orch, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 0.6, ToolPools: map[string]string{"ech*": "maya"}})
	if err != nil {
		t.Fatal(err)
	}
	defer orch.Close(ctx)
	s := mustSpec(t, `
name: farm
steps:
  - {id: pooled, tool: echo, pool: maya, args: {x: 1}}
  - {id: mapped, tool: echo, args: {x: 2}}
  - {id: remote, kind: tool_remote, dcc: maya, tool: echo, args: {x: 3}}
  - {id: after, tool: flow__echo, args: {value: ["{{pooled}}", "{{mapped}}", "{{remote}}"]}}
`)
	// No engine has maya: each step that needs it is named, with the pool.
	_, err = orch.Submit(ctx, engine.StartRequest{Spec: s})
	re := asRunError(err)
	if re == nil || re.Code != run.CodeUnknownTool {
		t.Fatalf("submit without a pool maya anywhere: %v", err)
	}
	mustContain(t, "message", re.Message,
		`echo (step pooled: pool "maya" is neither in this engine's config nor advertised by an engine attached to the database, so the tool runs in-process)`,
		`maya/echo (step mapped: remote "maya" is neither in this engine's config nor advertised by an engine attached to the database)`,
		"dcc-flow worker --db URL --remotes FILE")

	log := filepath.Join(t.TempDir(), "server.log")
	worker := openPoolWorker(t, db, bin, log)
	info, err := orch.Run(ctx, engine.StartRequest{Spec: s})
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	out, _ := json.Marshal(info.Outputs["after"])
	if string(out) != `{"value":[{"x":1},{"x":2},{"x":3}]}` {
		t.Fatalf("outputs: %s", out)
	}
	// Each call was queued with its remote and ran on the worker engine's pool: the step
	// records name the engine, then the pool worker.
	if rows := remoteQueueRows(t, db); strings.Join(rows, ",") != "maya echo done ,maya echo done ,maya echo done " {
		t.Fatalf("queue rows: %q", rows)
	}
	steps, err := orch.Steps(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range steps {
		if st.StepID != "after" && !strings.HasPrefix(st.Worker, worker.EngineID()+"/maya/") {
			t.Errorf("step %s: worker %q, want %s/maya/PID", st.Key, st.Worker, worker.EngineID())
		}
	}
	if len(orch.Pools()) != 0 {
		t.Fatalf("the orchestrator has pools: %+v", orch.Pools())
	}
	if p := worker.Pools(); len(p) != 1 || p[0].Started == 0 {
		t.Fatalf("the worker engine's pool: %+v", p)
	}
}

// A cancel reaches a queued remote call that no engine claimed, and one that a worker engine
// runs on its pool: the pool's server is told (notifications/cancelled) and the rows are
// cancelled. A step's timeout does the same.
func TestQueueCancelReachesRemoteCalls(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	bin := mcpServer(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	orch := openQueueEngine(t, db, "", nil, nil)
	// A (dead) engine that advertises houdini: its calls are queued, never claimed.
	if _, err := conn.Exec(ctx, `INSERT INTO engines (id, remotes, lease_secs) VALUES ('ghost', '["houdini"]', 0.6)`); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "server.log")
	openPoolWorker(t, db, bin, log)
	queued, err := orch.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: c1\nsteps: [{id: queued, kind: tool_remote, dcc: houdini, tool: sleep, args: {ms: 60000}}]\n")})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := orch.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: c2\nsteps: [{id: claimed, tool: sleep, pool: maya, args: {ms: 60000, key: k1}}]\n")})
	if err != nil {
		t.Fatal(err)
	}
	waitLog := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			b, _ := os.ReadFile(log)
			if strings.Contains(string(b), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the server log never had %q: %q; queue %q", want, b, remoteQueueRows(t, db))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitLog("started key=k1")
	start := time.Now()
	for _, id := range []string{queued, claimed} {
		if err := orch.Cancel(ctx, id, "enough"); err != nil {
			t.Fatal(err)
		}
		info, err := orch.Wait(ctx, id, 10*time.Second)
		if err != nil || info.Status != run.StatusCancelled {
			t.Fatalf("run: %+v %v", info, err)
		}
	}
	waitLog("cancelled key=k1")
	t.Logf("the cancel reached the pool's server in %s", time.Since(start))
	if rows := remoteQueueRows(t, db); strings.Join(rows, ",") != "maya sleep cancelled ,houdini sleep cancelled " {
		t.Fatalf("queue rows: %q", rows)
	}
	// The step's timeout ends the queued remote call the same way: the attempt fails timeout
	// and the pool's server is told.
	info, err := orch.Run(ctx, engine.StartRequest{Spec: mustSpec(t,
		"name: c3\nsteps: [{id: slow, tool: sleep, pool: maya, timeout_secs: 1, args: {ms: 60000, key: k2}}]\n")})
	if err != nil || info.Status != run.StatusFailed || info.Error == nil || info.Error.Kind != run.KindTimeout {
		t.Fatalf("timed-out run: %+v %v", info, err)
	}
	waitLog("cancelled key=k2")
}

// A remote call claimed by an engine that then stops renewing its claim (dead) fails
// worker_lost once the claim's lease passed, as a host-tool call does, and the retry goes to an
// engine that has the pool.
func TestQueueLostRemoteCallIsRetriedOnAnotherEngine(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	bin := mcpServer(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	orch := openQueueEngine(t, db, "", nil, nil)
	if _, err := conn.Exec(ctx, `INSERT INTO engines (id, remotes, lease_secs) VALUES ('ghost', '["maya"]', 0.6)`); err != nil {
		t.Fatal(err)
	}
	id, err := orch.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: lost
steps:
  - {id: e, kind: tool_remote, dcc: maya, tool: echo, args: {x: 1}, retry: {max_attempts: 2, initial_delay_ms: 1, max_delay_ms: 2}}
`)})
	if err != nil {
		t.Fatal(err)
	}
	// The ghost claims the call and dies: its claim's lease is already past.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tag, err := conn.Exec(ctx, `UPDATE tool_calls SET status = 'claimed', claimed_by = 'ghost', claimed_at = now(),
			lease_until = now() - interval '1 second' WHERE status = 'queued' AND remote = 'maya'`)
		if err != nil {
			t.Fatal(err)
		}
		if tag.RowsAffected() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the call was never queued: %q", remoteQueueRows(t, db))
		}
		time.Sleep(10 * time.Millisecond)
	}
	worker := openPoolWorker(t, db, bin, filepath.Join(t.TempDir(), "server.log"))
	info, err := orch.Wait(ctx, id, 20*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v; queue %q", info, err, remoteQueueRows(t, db))
	}
	steps, err := orch.Steps(ctx, id)
	if err != nil || len(steps) != 1 || steps[0].Attempts != 2 || !strings.HasPrefix(steps[0].Worker, worker.EngineID()+"/maya/") {
		t.Fatalf("steps: %+v %v", steps, err)
	}
	if rows := remoteQueueRows(t, db); strings.Join(rows, ",") != "maya echo done worker_lost,maya echo done " {
		t.Fatalf("queue rows: %q", rows)
	}
}

// An engine claims no more calls of a pool than the pool has workers: the others stay queued,
// for another engine with the pool to take, so two farm nodes share a batch rather than the
// first one holding it in its pool's local queue.
func TestQueuePoolClaimsAreBoundedByItsWorkers(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	bin := mcpServer(t)
	ctx := context.Background()
	orch := openQueueEngine(t, db, "", nil, nil)
	dir := t.TempDir()
	// a's one worker starts only once the gate file exists (a shell waits for it, then execs
	// the MCP server): a's first call stays busy, however slowly b opens and claims, until the
	// test has seen b claim the other one. (PostgreSQL tests run on Linux and macOS only.)
	gate := filepath.Join(dir, "gate")
	open := func(log string, gated bool) *engine.Engine {
		cmd := []string{bin, "-log", log}
		if gated {
			cmd = []string{"/bin/sh", "-c", `while [ ! -e "$0" ]; do sleep 0.05; done; exec "$@"`, gate, bin, "-log", log}
		}
		w, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 0.6, Remotes: map[string]engine.RemoteConfig{
			"maya": {Command: cmd, Workers: 1, StartTimeoutSecs: 120},
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Close(context.Background()) })
		return w
	}
	a := open(filepath.Join(dir, "a.log"), true)
	id, err := orch.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, `
name: batch
steps:
  - id: each
    kind: foreach
    items: [1, 2]
    concurrency: 2
    steps: [{id: nap, tool: sleep, pool: maya, args: {ms: 100, key: "k{{item}}"}}]
`)})
	if err != nil {
		t.Fatal(err)
	}
	// a's one worker runs one call; the other stays queued (a does not claim it).
	deadline := time.Now().Add(10 * time.Second)
	for {
		rows := strings.Join(remoteQueueRows(t, db), ",")
		if strings.Count(rows, "maya sleep claimed") == 1 && strings.Count(rows, "maya sleep queued") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue rows: %q", rows)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b := open(filepath.Join(dir, "b.log"), false) // takes the queued one
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline = time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM tool_calls WHERE remote = 'maya' AND claimed_by = $1`, b.EngineID()).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b never claimed the queued call: %q", remoteQueueRows(t, db))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil { // a's worker starts and runs its call
		t.Fatal(err)
	}
	info, err := orch.Wait(ctx, id, 20*time.Second)
	if err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	steps, err := orch.Steps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	engines := map[string]bool{}
	for _, st := range steps {
		if st.StepID == "nap" {
			engines[strings.SplitN(st.Worker, "/", 2)[0]] = true
		}
	}
	if !engines[a.EngineID()] || !engines[b.EngineID()] {
		t.Fatalf("the two calls ran on %v, want one on %s and one on %s", engines, a.EngineID(), b.EngineID())
	}
}
