package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// stepBatch is one step row and its step_exit event of run r.
func stepBatch(r, key string) *store.Batch {
	now := time.Now()
	return &store.Batch{Steps: []store.Step{{RunID: r, Key: key, StepID: key, Kind: "tool", Status: run.StepCompleted}},
		Events: []run.Event{{RunID: r, Type: run.EventStepExit, StepKey: key, Time: now}}}
}

// terminate ends every other session on the database of conn (the store's pooled
// connections), as a server restart or an operator's pg_terminate_backend does, and returns
// how many it ended once they are gone: a backend leaves pg_stat_activity as it exits, after
// it sent its FATAL message, so the pooled sockets then hold it (pg_terminate_backend only
// signals the backend).
func terminate(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	ctx := context.Background()
	var pids []int32
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(pid), '{}') FROM (SELECT pid, pg_terminate_backend(pid) AS ended
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()) x WHERE ended`).Scan(&pids); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left int // each statement is a transaction of its own: a new pg_stat_activity snapshot
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return len(pids)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d terminated backends still running after 10 s", left, len(pids))
		}
		time.Sleep(time.Millisecond)
	}
}

// countEvents returns how many events of step key run r has.
func countEvents(t *testing.T, s *postgres.Store, r, key string) int {
	t.Helper()
	evs, err := s.ListEvents(context.Background(), store.EventFilter{RunID: r})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range evs {
		if ev.StepKey == key {
			n++
		}
	}
	return n
}

// A write on pooled connections whose backends were terminated (what a server restart leaves
// in the pool) is retried on a new connection and succeeds, applied once.
func TestWriteAfterBackendsTerminatedIsRetried(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openURL(t, url)
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for i, key := range []string{"a", "b", "c"} {
		if err := s.Write(ctx, stepBatch("r", "warm"+key)); err != nil { // the pool holds live connections
			t.Fatal(err)
		}
		if n := terminate(t, conn); n == 0 {
			t.Fatal("no session of the store to terminate")
		}
		before := s.Retries()
		if err := s.Write(ctx, stepBatch("r", key)); err != nil {
			t.Fatalf("write %d after its connection was terminated: %v", i, err)
		}
		if s.Retries() == before {
			t.Errorf("write %d: no retry counted, so it never met the terminated connection", i)
		}
		if n := countEvents(t, s, "r", key); n != 1 {
			t.Errorf("step %s: %d events, want 1", key, n)
		}
	}
}

// A write whose backend is terminated while its statement runs (waiting for a row lock) was
// rolled back by the server, which said so in place of the statement's result: it is retried
// and applied once.
func TestWriteTerminatedMidStatementIsRetried(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openURL(t, url)
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The event counter's row: the write's events append waits for it.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM store_counters WHERE name = 'event_seq' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Write(ctx, stepBatch("r", "x")) }()
	waitLocked := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			// pg_stat_activity is a snapshot taken once per transaction: clear it.
			if _, err := tx.Exec(ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
				t.Fatal(err)
			}
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
				AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the write never waited for the lock")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitLocked()
	var killed int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND wait_event_type = 'Lock') x`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the write returned while the lock was held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	waitLocked() // the retry waits for the lock again
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("write whose backend was terminated mid-statement: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the write never returned")
	}
	if killed != 1 || s.Retries() == 0 {
		t.Errorf("terminated %d backends, %d retries; want 1 and > 0", killed, s.Retries())
	}
	if n := countEvents(t, s, "r", "x"); n != 1 {
		t.Errorf("%d events of the write, want 1", n)
	}
}

// A database out of reach for longer than the lease fails the write with
// store.ErrConnectionLost (code storage) after about a lease, not at once; once the server is
// back, writes succeed again on new connections. A server error on a live connection that is
// not about the connection (here an unknown run) still fails the write as before.
func TestWriteWhileServerDownIsConnectionLost(t *testing.T) {
	ctx := context.Background()
	c := pgtest.StartT(t)
	url, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	s := openURL(t, url)
	const lease = 600 * time.Millisecond
	if err := s.Attach(ctx, store.EngineInfo{ID: "e1", Host: "h", PID: 1, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	if err := c.StopServer(ctx); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = s.Write(ctx, stepBatch("r", "a"))
	took := time.Since(began)
	if !errors.Is(err, store.ErrConnectionLost) || run.CodeOf(err) != run.CodeStorage {
		t.Fatalf("write with the server down: %v (code %s), want ErrConnectionLost, code storage", err, run.CodeOf(err))
	}
	if took < lease/2 || took > lease+2*time.Second {
		t.Errorf("the write failed after %s, want about the lease (%s)", took, lease)
	}
	if err := c.StartServer(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, stepBatch("r", "b")); err != nil {
		t.Fatalf("write once the server is back: %v", err)
	}
	err = s.Write(ctx, stepBatch("missing", "c"))
	if !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConnectionLost) {
		t.Errorf("write to an unknown run: %v, want ErrNotFound", err)
	}
}

// The tool-call queue across a terminated connection (what a server restart leaves in the
// pool): queueing a call, renewing a claim and recording a call's outcome are retried on a new
// connection and succeed, the call queued once; the lost connection closes the pool's other
// connections (Resets), which were cut as well.
func TestCallQueueAfterBackendsTerminated(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openURL(t, url)
	if err := s.Attach(ctx, store.EngineInfo{ID: "E", Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r")}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cut := func() {
		t.Helper()
		if terminate(t, conn) == 0 {
			t.Fatal("no session of the store to terminate")
		}
	}
	cut()
	resets := s.Resets()
	id, err := s.EnqueueCall(ctx, store.QueuedCall{RunID: "r", StepKey: "a", Attempt: 1, Tool: "t", Args: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatalf("queueing after the connection was cut: %v", err)
	}
	if s.Resets() == resets {
		t.Error("the lost connection did not reset the pool")
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM tool_calls`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d calls queued (%v), want 1", n, err)
	}
	c, err := s.ClaimCall(ctx, []string{"t"}, nil)
	if err != nil || c == nil || c.ID != id {
		t.Fatalf("claim: %+v %v", c, err)
	}
	cut()
	if held, err := s.RenewCalls(ctx, []int64{id}); err != nil || len(held) != 1 {
		t.Fatalf("renewing after the connection was cut: %v %v", held, err)
	}
	cut()
	ok, err := s.CompleteCall(ctx, id, store.CallOutcome{Output: json.RawMessage(`{"v":1}`)})
	if err != nil || !ok {
		t.Fatalf("recording the outcome after the connection was cut: %v %v", ok, err)
	}
	status, out, err := s.CallStatus(ctx, id)
	if err != nil || status != "done" || string(out.Output) != `{"v": 1}` && string(out.Output) != `{"v":1}` {
		t.Fatalf("call after its outcome: %s %s %v", status, out.Output, err)
	}
}

// A fire recorded on pooled connections whose backends were terminated (what a server restart
// leaves in the pool) is retried on a new connection and recorded once: the next engine's
// redelivery check finds it.
func TestRecordFireAfterBackendsTerminated(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openURL(t, url)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	now := time.Now()
	fire := func(delivery string) store.Fire {
		return store.Fire{ScheduleID: "hook", Kind: store.FireFired, RunID: "run-" + delivery, Origin: "webhook",
			ScheduledAt: now, FiredAt: now, DeliveryID: delivery}
	}
	for i, d := range []string{"d-1", "d-2", "d-3"} {
		if err := s.RecordFire(ctx, fire("warm-"+d)); err != nil { // the pool holds live connections
			t.Fatal(err)
		}
		if terminate(t, conn) == 0 {
			t.Fatal("no session of the store to terminate")
		}
		time.Sleep(20 * time.Millisecond) // the FATAL message is on the pooled sockets
		before := s.Retries()
		if err := s.RecordFire(ctx, fire(d)); err != nil {
			t.Fatalf("fire %d after its connection was terminated: %v", i, err)
		}
		if s.Retries() == before {
			t.Errorf("fire %d: no retry counted, so it never met the terminated connection", i)
		}
		if f, ok, err := s.FireByDelivery(ctx, "hook", d); err != nil || !ok || f.RunID != "run-"+d {
			t.Fatalf("the fire of %s: %+v %v %v", d, f, ok, err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM schedule_fires WHERE delivery_id = $1`, d).Scan(&n); err != nil || n != 1 {
			t.Fatalf("%d fires of %s recorded (%v); want 1", n, d, err)
		}
	}
}
