package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// openAttachedAs opens url as an engine named id (lease of a minute).
func openAttachedAs(t *testing.T, url, id string) *postgres.Store {
	t.Helper()
	s := openURL(t, url)
	if err := s.Attach(context.Background(), store.EngineInfo{ID: id, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return s
}

// countCalls returns how many calls the queue of the database at url holds.
func countCalls(t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM tool_calls`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Queueing a call with a nonce is idempotent: the same nonce sent again (a try repeated after a
// lost connection) returns the first row's id, also once the call is done, and adds nothing;
// calls without a nonce, or with another, are calls of their own.
func TestEnqueueCallNonceIsIdempotent(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	o, w := openAttachedAs(t, url, "O"), openAttachedAs(t, url, "W")
	c := store.QueuedCall{RunID: "r", StepKey: "s", Attempt: 1, Tool: "export", Args: json.RawMessage(`{"a":1}`), Nonce: "n1"}
	id, err := o.EnqueueCall(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := o.EnqueueCall(ctx, c); err != nil || again != id {
		t.Fatalf("the same nonce again: id %d, %v; want %d", again, err, id)
	}
	claimed, err := w.ClaimCall(ctx, []string{"export"}, nil)
	if err != nil || claimed == nil || claimed.ID != id {
		t.Fatalf("claim: %+v %v", claimed, err)
	}
	if ok, err := w.CompleteCall(ctx, id, store.CallOutcome{Output: json.RawMessage(`1`)}); !ok || err != nil {
		t.Fatalf("complete: %v %v", ok, err)
	}
	if again, err := o.EnqueueCall(ctx, c); err != nil || again != id {
		t.Fatalf("the same nonce once the call is done: id %d, %v; want %d", again, err, id)
	}
	if n := countCalls(t, url); n != 1 {
		t.Fatalf("%d calls queued with one nonce, want 1", n)
	}
	c.Nonce = "n2"
	if other, err := o.EnqueueCall(ctx, c); err != nil || other == id {
		t.Fatalf("another nonce: id %d, %v", other, err)
	}
	c.Nonce = ""
	a, err1 := o.EnqueueCall(ctx, c)
	b, err2 := o.EnqueueCall(ctx, c)
	if err1 != nil || err2 != nil || a == b {
		t.Fatalf("no nonce: ids %d, %d (%v, %v); want two calls", a, b, err1, err2)
	}
	if n := countCalls(t, url); n != 4 {
		t.Fatalf("%d calls, want 4", n)
	}
}

// AdoptCall finds the newest call of a run's step still queued or claimed with the same tool,
// remote and args, and nothing else: not a done or cancelled one, not one of other args,
// another step, another remote.
func TestAdoptCall(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	o, w := openAttachedAs(t, url, "O"), openAttachedAs(t, url, "W")
	c := store.QueuedCall{RunID: "r", StepKey: "per[1].s", Attempt: 2, Tool: "export", Args: json.RawMessage(`{"a":1,"b":"x"}`)}
	adopt := func(c store.QueuedCall) (int64, bool) {
		t.Helper()
		id, ok, err := o.AdoptCall(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return id, ok
	}
	if id, ok := adopt(c); ok {
		t.Fatalf("adopted %d from an empty queue", id)
	}
	old, err := o.EnqueueCall(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := w.CompleteCall(ctx, old, store.CallOutcome{}); ok || err != nil {
		t.Fatal("completed an unclaimed call", err)
	}
	if cl, err := w.ClaimCall(ctx, []string{"export"}, nil); err != nil || cl == nil || cl.ID != old {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if ok, err := w.CompleteCall(ctx, old, store.CallOutcome{Output: json.RawMessage(`1`)}); !ok || err != nil {
		t.Fatalf("complete: %v %v", ok, err)
	}
	// The adopter is a resume, which numbers its attempts from 1; Interrupted is the attempt
	// the interrupted step row records.
	without, other, adopter, next := c, c, c, c
	without.Attempt, without.Interrupted = 1, 0
	other.Attempt, other.Interrupted = 3, 1
	adopter.Attempt, adopter.Interrupted = 1, 2
	next.Attempt, next.Interrupted = 1, 1
	if id, ok := adopt(without); ok {
		t.Fatalf("adopted done call %d with no interrupted attempt", id)
	}
	if id, ok := adopt(other); ok {
		t.Fatalf("adopted done call %d of attempt 2 for interrupted attempt 1", id)
	}
	// The interrupted attempt's call ended after its orchestrator stopped: its outcome is taken.
	if id, ok := adopt(adopter); !ok || id != old {
		t.Fatalf("adopted %d (%v), want the done call %d of the interrupted attempt 2", id, ok, old)
	}
	// The call now has the adopter's attempt: if the adopter stops too before its step records
	// the outcome (a second hand-over), the next adopter finds it by the attempt the step row
	// then records (1), and so does a try sent again after a lost connection.
	if id, ok := adopt(next); !ok || id != old {
		t.Fatalf("second adoption: %d (%v), want %d", id, ok, old)
	}
	if id, ok := adopt(adopter); !ok || id != old {
		t.Fatalf("the same adoption again: %d (%v), want %d", id, ok, old)
	}
	first, _ := o.EnqueueCall(ctx, c)
	newest, _ := o.EnqueueCall(ctx, c)
	c.Attempt = 1 // a resume numbers its attempts from 1: the attempt does not matter
	if id, ok := adopt(c); !ok || id != newest {
		t.Fatalf("adopted %d (%v), want the newest live call %d (older %d)", id, ok, newest, first)
	}
	if cl, err := w.ClaimCall(ctx, []string{"export"}, nil); err != nil || cl == nil || cl.ID != first {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if err := o.CancelCall(ctx, newest); err != nil {
		t.Fatal(err)
	}
	if id, ok := adopt(c); !ok || id != first {
		t.Fatalf("adopted %d (%v), want the claimed call %d", id, ok, first)
	}
	// Once done, the older call is an earlier attempt's: the step's newest call is the
	// cancelled one, so nothing is adopted, whatever the interrupted attempt.
	if ok, err := w.CompleteCall(ctx, first, store.CallOutcome{Output: json.RawMessage(`2`)}); !ok || err != nil {
		t.Fatalf("complete: %v %v", ok, err)
	}
	for _, a := range []int{1, 2} {
		c.Attempt, c.Interrupted = a, a
		if id, ok := adopt(c); ok {
			t.Fatalf("attempt %d: adopted %d, an older call than the step's newest", a, id)
		}
	}
	for what, other := range map[string]store.QueuedCall{
		"other args":   {RunID: "r", StepKey: c.StepKey, Tool: "export", Args: json.RawMessage(`{"a":2,"b":"x"}`)},
		"another step": {RunID: "r", StepKey: "per[2].s", Tool: "export", Args: c.Args},
		"another run":  {RunID: "r2", StepKey: c.StepKey, Tool: "export", Args: c.Args},
		"another tool": {RunID: "r", StepKey: c.StepKey, Tool: "render", Args: c.Args},
		"a remote":     {RunID: "r", StepKey: c.StepKey, Tool: "export", Remote: "maya", Args: c.Args},
	} {
		if id, ok := adopt(other); ok {
			t.Errorf("%s: adopted call %d", what, id)
		}
	}
}

// A write that ends a run cancels the run's calls still queued or claimed (left by a former
// orchestrator), waking their engines; the calls of other runs and the run's done calls stay.
func TestEndedRunCancelsItsCalls(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	o, w := openAttachedAs(t, url, "O"), openAttachedAs(t, url, "W")
	if err := o.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r"), newRun("r2")}}); err != nil {
		t.Fatal(err)
	}
	woken, _ := listening(t, w, url)
	q := func(r, key string) int64 {
		id, err := o.EnqueueCall(ctx, store.QueuedCall{RunID: r, StepKey: key, Attempt: 1, Tool: "export", Args: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	done := q("r", "a")
	if cl, err := w.ClaimCall(ctx, []string{"export"}, nil); err != nil || cl == nil || cl.ID != done {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if ok, err := w.CompleteCall(ctx, done, store.CallOutcome{Output: json.RawMessage(`1`)}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	claimed := q("r", "b")
	if cl, err := w.ClaimCall(ctx, []string{"export"}, nil); err != nil || cl == nil || cl.ID != claimed {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	queued, other := q("r", "c"), q("r2", "a")

	now := time.Now()
	if err := o.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r2", Status: run.StatusRunning, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := o.CallStatus(ctx, other); st != "queued" {
		t.Fatalf("a running run's call is %s", st)
	}
	if err := o.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusCompleted, UpdatedAt: now, FinishedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[int64]string{done: "done", claimed: "cancelled", queued: "cancelled", other: "queued"} {
		if st, _, err := o.CallStatus(ctx, id); st != want || err != nil {
			t.Errorf("call %d: %s (%v), want %s", id, st, err, want)
		}
	}
	if held, err := w.RenewCalls(ctx, []int64{claimed}); err != nil || len(held) != 0 {
		t.Errorf("the cancelled call's claim is still held: %v %v", held, err)
	}
	want := map[string]bool{"c:" + itoa(claimed): true, "c:" + itoa(queued): true}
	deadline := time.After(5 * time.Second)
	for len(want) > 0 {
		select {
		case p := <-woken:
			delete(want, p)
		case <-deadline:
			t.Fatalf("no wake-up %v", want)
		}
	}
}
