package gotest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// queueCluster is engines on one real PostgreSQL database (internal/pgtest) declaring houdini
// with one limit, each with the worker-lane host tool cook that the test answers.
type queueCluster struct {
	t       *testing.T
	db      string
	engines []*engine.Engine
}

func newQueueCluster(t *testing.T, n, limit int) *queueCluster {
	t.Helper()
	ctx := context.Background()
	c := &queueCluster{t: t, db: pgtest.DB(t)}
	for range n {
		e, err := engine.Open(ctx, engine.Config{DB: c.db, LeaseSecs: 30, StallAfterSecs: -1,
			Resources: map[string]engine.ResourceConfig{"houdini": {Limit: limit}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Close(ctx) })
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
			t.Fatal(err)
		}
		c.engines = append(c.engines, e)
	}
	return c
}

// submit starts src (YAML) on engine i with priority prio and inputs in.
func (c *queueCluster) submit(i int, src string, prio int, in map[string]any) string {
	c.t.Helper()
	s, err := spec.ParseString(src)
	if err != nil {
		c.t.Fatal(err)
	}
	id, err := c.engines[i].Submit(context.Background(), engine.StartRequest{Spec: s, Priority: &prio, Inputs: in})
	if err != nil {
		c.t.Fatal(err)
	}
	return id
}

// next waits for the one call the engines have for their hosts (the limit is 1: one at a time)
// and returns it with the engine it came from.
func (c *queueCluster) next() (flowtype.PendingCall, int) {
	c.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		for i, e := range c.engines {
			cs, err := e.Host().Pull(context.Background(), flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 5, Timeout: 5 * time.Millisecond})
			if err != nil {
				c.t.Fatal(err)
			}
			if len(cs) > 1 {
				c.t.Fatalf("%d calls at once with a limit of 1: %+v", len(cs), cs)
			}
			if len(cs) == 1 {
				return cs[0], i
			}
		}
	}
	c.t.Fatal("timed out waiting for a call")
	return flowtype.PendingCall{}, 0
}

// complete answers call of engine i.
func (c *queueCluster) complete(call flowtype.PendingCall, i int) {
	c.t.Helper()
	if err := c.engines[i].Host().Complete(call.ID, flowtype.ToolResult{Output: map[string]any{"ok": true}}); err != nil {
		c.t.Fatal(err)
	}
}

// waitersInDB is the number of rows of the shared queue.
func (c *queueCluster) waitersInDB() int {
	c.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.db)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_waiters`).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// queued waits until the steps of runs of engine i all say they wait in the database's queue.
func (c *queueCluster) queued(i int, runs ...string) {
	c.t.Helper()
	for _, id := range runs {
		c.until("run "+id+" waiting in the database's queue", func() bool {
			info, err := c.engines[i].Status(context.Background(), id)
			if err != nil {
				c.t.Fatal(err)
			}
			n := 0
			for _, st := range info.Steps {
				if st.Progress != nil && strings.Contains(st.Progress.Message, "in the database's queue (all engines)") {
					n++
				}
			}
			return n > 0
		})
	}
}

func (c *queueCluster) until(what string, cond func() bool) {
	c.t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out waiting for %s", what)
		}
	}
}

const cookSpec = "name: sim\nsteps: [{id: cook, tool: cook, resources: {houdini: 1}}]"

// On a shared PostgreSQL database the waiters of every engine are one queue: a high-priority
// run submitted on engine B goes before the low-priority runs engine A queued earlier, the
// lows then go first come first served, and a cancelled waiter leaves the database's queue.
func TestResourceQueueAcrossEnginesPriority(t *testing.T) {
	c := newQueueCluster(t, 2, 1)
	holder := c.submit(0, cookSpec, 0, nil)
	first, on := c.next()
	if first.RunID != holder {
		t.Fatalf("first call of %s; want %s", first.RunID, holder)
	}
	var lows []string
	for range 3 {
		id := c.submit(0, cookSpec, 0, nil)
		c.queued(0, id)
		lows = append(lows, id)
	}
	gone := c.submit(1, cookSpec, 20, nil)
	high := c.submit(1, cookSpec, 10, nil)
	c.queued(1, gone, high)
	if n := c.waitersInDB(); n != 5 {
		t.Fatalf("%d waiters in the database; want 5", n)
	}
	if err := c.engines[1].Cancel(context.Background(), gone, "not needed"); err != nil {
		t.Fatal(err)
	}
	c.until("the cancelled waiter to leave the database's queue", func() bool { return c.waitersInDB() == 4 })
	want := append([]string{high}, lows...)
	// Either engine lists the whole database's queue, in the order it is served, with each
	// waiter's engine.
	for i, e := range c.engines {
		info, err := e.Resources(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, w := range info.Resources[0].Queue {
			got = append(got, strings.SplitN(w.Label, "/", 2)[0])
			if w.Engine == "" || w.Position != len(got) {
				t.Errorf("engine %d lists waiter %+v: want its engine and place", i, w)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("engine %d lists the queue %v; want %v (the high one of engine 1 first, then engine 0's)", i, got, want)
		}
	}
	c.complete(first, on)
	for i, id := range want {
		call, on := c.next()
		if call.RunID != id {
			t.Fatalf("call %d after the holder is of %s; want %s (high %s, lows %v)", i+1, call.RunID, id, high, lows)
		}
		c.complete(call, on)
	}
	for i, e := range c.engines {
		for _, id := range append(want, holder, gone) {
			if info, err := e.Status(context.Background(), id); err == nil && (info.Status == run.StatusRunning || info.Status == run.StatusPending) {
				if _, err := e.Wait(context.Background(), id, 10*time.Second); err != nil {
					t.Fatalf("engine %d, run %s: %v", i, id, err)
				}
			}
		}
	}
	if n := c.waitersInDB(); n != 0 {
		t.Fatalf("%d waiters left in the database", n)
	}
}

// Fair share across engines: a foreach of 3 items on engine A queued before a foreach of 2 on
// engine B (each run its own key) are served in turns, A, B, A, B, A.
func TestResourceQueueAcrossEnginesFairShare(t *testing.T) {
	c := newQueueCluster(t, 2, 1)
	holder := c.submit(0, cookSpec, 0, nil)
	first, on := c.next()
	if first.RunID != holder {
		t.Fatalf("first call of %s; want %s", first.RunID, holder)
	}
	const each = `
name: shots
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 8
    steps:
      - { id: cook, tool: cook, args: { n: "{{item}}" }, resources: { houdini: 1 } }
`
	x := c.submit(0, each, 0, map[string]any{"items": []any{1, 2, 3}})
	c.until("A's three items in the database's queue", func() bool { return c.waitersInDB() == 3 })
	y := c.submit(1, each, 0, map[string]any{"items": []any{1, 2}})
	c.until("B's two items in the database's queue", func() bool { return c.waitersInDB() == 5 })
	c.complete(first, on)
	var got []string
	for range 5 {
		call, on := c.next()
		switch call.RunID {
		case x:
			got = append(got, "A")
		case y:
			got = append(got, "B")
		default:
			got = append(got, call.RunID)
		}
		c.complete(call, on)
	}
	if s := strings.Join(got, ","); s != "A,B,A,B,A" {
		t.Fatalf("served %s; want A,B,A,B,A", s)
	}
}

// The waiters of an engine past its lease do not hold anything back: a dead engine's waiter of
// priority 1000 (its row left in the database) does not keep engine A's step from its unit.
func TestResourceQueueDeadEngineWaiters(t *testing.T) {
	c := newQueueCluster(t, 1, 1)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO engines (id, heartbeat_at, lease_secs) VALUES ('dead', now() - interval '1 minute', 15)`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO resource_waiters (holder, engine_id, names, amounts, limits, caps, priority, aging_ms, fair_key)
		VALUES ('ghost', 'dead', '{houdini}', '{1}', '{1}', '{1}', 1000, 10000, 'ghost')`); err != nil {
		t.Fatal(err)
	}
	holder := c.submit(0, cookSpec, 0, nil)
	call, on := c.next()
	if call.RunID != holder {
		t.Fatalf("call of %s; want %s", call.RunID, holder)
	}
	next := c.submit(0, cookSpec, 0, nil)
	c.queued(0, next)
	c.complete(call, on)
	if call, _ = c.next(); call.RunID != next {
		t.Fatalf("call of %s; want %s", call.RunID, next)
	}
	c.complete(call, 0)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_waiters WHERE engine_id = 'dead'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the dead engine's waiters: %d, %v; want deleted", n, err)
	}
}
