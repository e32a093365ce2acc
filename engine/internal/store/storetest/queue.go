package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// QueueStore is a store with the Leaser and CallQueue features (a call is queued and claimed by
// an attached engine).
type QueueStore interface {
	store.Store
	store.Leaser
	store.CallQueue
}

// ExerciseCallQueue runs the suite of store.CallQueue: newDB returns a new, empty shared
// database for each call. It pins the claims (oldest first, by tool or by remote, once among
// claimers at once), outcomes and statuses (with their files and env), the nonce, the claim lease (renewal, expiry as
// worker_lost once among expirers, a late outcome dropped), cancellation (also by a Write that
// ends the run), reports, adoption, housekeeping, the traceparent a call carries and the
// wake-ups of ListenCalls.
func ExerciseCallQueue(t *testing.T, newDB func(t *testing.T) Shared[QueueStore]) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, db Shared[QueueStore])
	}{
		{"ClaimsOldestFirstOnce", testClaimCalls},
		{"RemoteCalls", testRemoteCalls},
		{"FilesAndEnv", testCallFilesAndEnv},
		{"NonceIsIdempotent", testNonce},
		{"Traceparent", testCallTraceparent},
		{"ClaimLeaseAndExpiry", testCallExpiry},
		{"Cancel", testCancelCall},
		{"EndedRunCancelsItsCalls", testEndedRunCalls},
		{"Reports", testCallReports},
		{"AdoptCall", testAdoptCall},
		{"Housekeeping", testCallHousekeeping},
		{"WakeUps", testWakeUps},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

func enqueue(t *testing.T, q store.CallQueue, c store.QueuedCall) int64 {
	t.Helper()
	id, err := q.EnqueueCall(context.Background(), c)
	if err != nil || id <= 0 {
		t.Fatalf("EnqueueCall(%+v) = %d, %v", c, id, err)
	}
	return id
}

func claim(t *testing.T, q store.CallQueue, tools, remotes []string) *store.QueuedCall {
	t.Helper()
	c, err := q.ClaimCall(context.Background(), tools, remotes)
	if err != nil {
		t.Fatalf("ClaimCall(%v, %v): %v", tools, remotes, err)
	}
	return c
}

func callStatus(t *testing.T, q store.CallQueue, id int64) (string, store.CallOutcome) {
	t.Helper()
	st, out, err := q.CallStatus(context.Background(), id)
	if err != nil {
		t.Fatalf("CallStatus(%d): %v", id, err)
	}
	return st, out
}

func complete(t *testing.T, q store.CallQueue, id int64, out store.CallOutcome) bool {
	t.Helper()
	ok, err := q.CompleteCall(context.Background(), id, out)
	if err != nil {
		t.Fatalf("CompleteCall(%d): %v", id, err)
	}
	return ok
}

// testClaimCalls: ids grow; a claim takes the oldest queued call of the tools it names (host
// tools only), returns its fields, and claimers at once never share a call; the outcome reaches
// CallStatus with the worker; only the claimer completes it, once.
func testClaimCalls(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w1, w2 := attachAs(t, db, "O"), attachAs(t, db, "W1"), attachAs(t, db, "W2")
	if c := claim(t, w1, nil, nil); c != nil {
		t.Fatalf("ClaimCall(no tools, no remotes) = %+v; want nil", c)
	}
	if c := claim(t, w1, []string{"export"}, nil); c != nil {
		t.Fatalf("ClaimCall of an empty queue = %+v; want nil", c)
	}
	var ids []int64
	for i := range 20 {
		tool := "export"
		if i%2 == 1 {
			tool = "render"
		}
		id := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: fmt.Sprintf("s[%d]", i), Attempt: 1 + i%3, Tool: tool,
			Args: json.RawMessage(fmt.Sprintf(`{"i": %d}`, i))})
		if len(ids) > 0 && id <= ids[len(ids)-1] {
			t.Fatalf("EnqueueCall returned id %d after %d; want growing ids", id, ids[len(ids)-1])
		}
		ids = append(ids, id)
	}
	if st, out := callStatus(t, o, ids[0]); st != "queued" || out.Worker != "" || out.Output != nil || out.LastReport != 0 {
		t.Fatalf("a queued call's status = %s, %+v; want queued, no worker, no output", st, out)
	}
	first := claim(t, w1, []string{"export", "other"}, nil)
	if first == nil || first.ID != ids[0] || first.RunID != "r" || first.StepKey != "s[0]" || first.Attempt != 1 || first.Tool != "export" ||
		first.Remote != "" || string(first.Args) != `{"i": 0}` {
		t.Fatalf("first claim = %+v; want call %d with its fields (the oldest export call)", first, ids[0])
	}
	if st, out := callStatus(t, o, first.ID); st != "claimed" || out.Worker != "W1" {
		t.Fatalf("a claimed call's status = %s, worker %q; want claimed by W1", st, out.Worker)
	}
	var mu sync.Mutex
	got := map[int64]string{first.ID: "W1"}
	var wg sync.WaitGroup
	for i, w := range []QueueStore{w1, w2, w2, w1} {
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
				if c.Tool != "export" {
					t.Errorf("claimer %d claimed a %s call for export", i, c.Tool)
				}
				got[c.ID] = c.Tool
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(got) != 10 {
		t.Fatalf("claimed %d export calls; want 10", len(got))
	}
	c := claim(t, w2, []string{"render"}, nil)
	if c == nil || c.ID != ids[1] {
		t.Fatalf("render claim = %+v; want the oldest render call %d", c, ids[1])
	}
	if complete(t, w1, c.ID, store.CallOutcome{Output: json.RawMessage(`1`)}) {
		t.Fatal("W1 completed W2's call")
	}
	if complete(t, o, ids[3], store.CallOutcome{Output: json.RawMessage(`1`)}) {
		t.Fatal("a queued call took an outcome")
	}
	if !complete(t, w2, c.ID, store.CallOutcome{Output: json.RawMessage(`{"fbx":"a.fbx"}`)}) {
		t.Fatal("W2 could not complete its call")
	}
	if st, out := callStatus(t, o, c.ID); st != "done" || string(out.Output) != `{"fbx":"a.fbx"}` || out.ErrorKind != "" || out.Worker != "W2" {
		t.Fatalf("done call = %s, %+v; want done with the output, worker W2", st, out)
	}
	if complete(t, w2, c.ID, store.CallOutcome{Output: json.RawMessage(`2`)}) {
		t.Fatal("a done call took a second outcome")
	}
	// A failure: no output; a success without output is null.
	f := claim(t, w2, []string{"render"}, nil)
	if !complete(t, w2, f.ID, store.CallOutcome{ErrorKind: "tool_error", ErrorMessage: "no camera", ErrorTrace: "at line 3"}) {
		t.Fatal("W2 could not fail its call")
	}
	if st, out := callStatus(t, o, f.ID); st != "done" || out.Output != nil || out.ErrorKind != "tool_error" || out.ErrorMessage != "no camera" ||
		out.ErrorTrace != "at line 3" {
		t.Fatalf("failed call = %s, %+v; want done with the error and no output", st, out)
	}
	n := claim(t, w2, []string{"render"}, nil)
	if !complete(t, w2, n.ID, store.CallOutcome{}) {
		t.Fatal("W2 could not complete its call")
	}
	if _, out := callStatus(t, o, n.ID); string(out.Output) != "null" {
		t.Fatalf("a success without output has output %q; want null", out.Output)
	}
	// Args "" are stored as {}.
	e := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "e", Attempt: 1, Tool: "empty"})
	if c := claim(t, w1, []string{"empty"}, nil); c == nil || c.ID != e || string(c.Args) != `{}` {
		t.Fatalf("claim of a call without args = %+v; want args {}", c)
	}
	if _, _, err := o.CallStatus(ctx, 1<<40); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CallStatus of an unknown call: %v; want ErrNotFound", err)
	}
}

// testRemoteCalls: a call of a remote is claimed by the remote's name, never by its tool's, and a
// host-tool claim never takes one (nor a remote claim a host-tool call); the worker recorded
// with the outcome, the logs and the lines dropped are what CallStatus returns.
func testRemoteCalls(t *testing.T, db Shared[QueueStore]) {
	o, farm := attachAs(t, db, "O"), attachAs(t, db, "FARM")
	id := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "s", Attempt: 1, Tool: "export", Remote: "maya", Args: json.RawMessage(`{}`)})
	if c := claim(t, o, []string{"export"}, nil); c != nil {
		t.Fatalf("a host-tool claim took a remote call: %+v", c)
	}
	if c := claim(t, o, nil, []string{"houdini"}); c != nil {
		t.Fatalf("a claim of another remote took it: %+v", c)
	}
	c := claim(t, farm, []string{"other"}, []string{"maya"})
	if c == nil || c.ID != id || c.Remote != "maya" || c.Tool != "export" {
		t.Fatalf("claim by remote = %+v; want call %d", c, id)
	}
	logs := json.RawMessage(`[{"stream":"stdout","text":"opening sh010.ma"}]`)
	if !complete(t, farm, id, store.CallOutcome{Output: json.RawMessage(`{"ok":1}`), Worker: "FARM/maya/42", Logs: logs, LogsDropped: 3}) {
		t.Fatal("FARM could not complete its call")
	}
	st, out := callStatus(t, o, id)
	if st != "done" || out.Worker != "FARM/maya/42" || string(out.Output) != `{"ok":1}` || !jsonEqual(out.Logs, logs) || out.LogsDropped != 3 {
		t.Fatalf("remote call = %s, %+v; want done with the worker, output and logs recorded", st, out)
	}
	hid := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "h", Attempt: 1, Tool: "export"})
	if c := claim(t, farm, nil, []string{"maya"}); c != nil {
		t.Fatalf("a remote claim took a host-tool call: %+v", c)
	}
	if c := claim(t, farm, []string{"export"}, []string{"maya"}); c == nil || c.ID != hid || c.Remote != "" {
		t.Fatalf("host-tool claim = %+v; want call %d", c, hid)
	}
	if !complete(t, farm, hid, store.CallOutcome{Output: json.RawMessage(`1`)}) {
		t.Fatal("FARM could not complete its call")
	}
	if _, out := callStatus(t, o, hid); out.Worker != "FARM" || out.Logs != nil || out.LogsDropped != 0 {
		t.Fatalf("host-tool call = %+v; want worker FARM (the claimer), no logs", out)
	}
}

// testCallFilesAndEnv: the files and env of an outcome, a success's and a failure's alike, are
// what CallStatus returns (as JSON: the same values); an outcome without them has none (nil,
// not "[]" or "null"), and so has a call failed worker_lost by its claim's expiry.
func testCallFilesAndEnv(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
	files := json.RawMessage(`[{"path":"/show/sh010/layout.usda","role":"read"},{"path":"/show/sh010/ünïcode \u0000 \"q\".usda","role":"write"}]`)
	env := json.RawMessage(`{"dcc":"maya","version":"2025.1","plugins":{"mtoa":"5.4"}}`)
	cases := []struct {
		name string
		out  store.CallOutcome
	}{
		{"success", store.CallOutcome{Output: json.RawMessage(`{"usd":"/show/sh010/layout.usda"}`), Files: files, Env: env}},
		{"failure", store.CallOutcome{ErrorKind: "error", ErrorMessage: "the render crashed", Files: files, Env: env}},
		{"none", store.CallOutcome{Output: json.RawMessage(`1`)}},
		{"failure without", store.CallOutcome{ErrorKind: "transient", ErrorMessage: "busy"}},
	}
	for i, tc := range cases {
		id := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: fmt.Sprint(i), Attempt: 1, Tool: "export"})
		if c := claim(t, w, []string{"export"}, nil); c == nil || c.ID != id {
			t.Fatalf("%s: claim = %+v; want %d", tc.name, c, id)
		}
		if st, out := callStatus(t, o, id); st != "claimed" || out.Files != nil || out.Env != nil {
			t.Fatalf("%s: a claimed call = %s, files %q env %q; want none yet", tc.name, st, out.Files, out.Env)
		}
		if !complete(t, w, id, tc.out) {
			t.Fatalf("%s: W could not complete its call", tc.name)
		}
		st, out := callStatus(t, o, id)
		if st != "done" || out.ErrorKind != tc.out.ErrorKind {
			t.Fatalf("%s: status %s, %+v", tc.name, st, out)
		}
		if tc.out.Files == nil {
			if out.Files != nil || out.Env != nil {
				t.Fatalf("%s: files %q env %q; want nil for none", tc.name, out.Files, out.Env)
			}
			continue
		}
		if !jsonEqual(out.Files, files) || !jsonEqual(out.Env, env) {
			t.Fatalf("%s: files %s env %s; want %s and %s", tc.name, out.Files, out.Env, files, env)
		}
	}
	// A claim that expires is failed worker_lost without files or env.
	db2 := db.Open(t)
	if err := db2.Attach(ctx, store.EngineInfo{ID: "W2", Lease: suiteLease}); err != nil {
		t.Fatal(err)
	}
	id := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "lost", Attempt: 1, Tool: "export"})
	if c := claim(t, db2, []string{"export"}, nil); c == nil || c.ID != id {
		t.Fatalf("claim = %+v; want %d", c, id)
	}
	db.Advance(t, 2*suiteLease)
	if _, err := o.ExpireCalls(ctx); err != nil {
		t.Fatal(err)
	}
	if st, out := callStatus(t, o, id); st != "done" || out.ErrorKind != run.KindWorkerLost || out.Files != nil || out.Env != nil {
		t.Fatalf("an expired claim = %s, %+v; want worker_lost without files or env", st, out)
	}
}

// testCallTraceparent: a call's traceparent reaches its claimer as queued (a host-tool call's
// and a remote's; "" for a call queued without one), and so does the adopter's when a resumed
// step adopts the call while it is still queued (an adopter without one leaves it).
func testCallTraceparent(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
	const tp1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const tp2 = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
	const tp3 = "00-4bf92f3577b34da6a3ce929d0e0e4736-53995c3f42cd8ad8-01"
	host := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "a", Attempt: 1, Tool: "export", Traceparent: tp1})
	remote := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "b", Attempt: 1, Tool: "export", Remote: "maya", Traceparent: tp2})
	none := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "c", Attempt: 1, Tool: "export"})
	for _, want := range []struct {
		id int64
		tp string
	}{{host, tp1}, {remote, tp2}, {none, ""}} {
		c := claim(t, w, []string{"export"}, []string{"maya"})
		if c == nil || c.ID != want.id || c.Traceparent != want.tp {
			t.Fatalf("claim = %+v; want call %d with traceparent %q", c, want.id, want.tp)
		}
	}
	// Adoption: a queued call takes the adopter's traceparent (its tool has not seen one yet);
	// an adopter without one leaves it.
	q := store.QueuedCall{RunID: "r", StepKey: "d", Attempt: 1, Tool: "render", Args: json.RawMessage(`{"f":1}`), Traceparent: tp1}
	queued := enqueue(t, o, q)
	adopt := func(c store.QueuedCall, want int64) {
		t.Helper()
		if id, ok, err := o.AdoptCall(ctx, c); err != nil || !ok || id != want {
			t.Fatalf("AdoptCall = %d, %v, %v; want %d", id, ok, err, want)
		}
	}
	q.Attempt, q.Traceparent = 2, ""
	adopt(q, queued)
	q.Attempt, q.Traceparent = 3, tp3
	adopt(q, queued)
	c := claim(t, w, []string{"render"}, nil)
	if c == nil || c.ID != queued || c.Attempt != 3 || c.Traceparent != tp3 {
		t.Fatalf("claim of the adopted call = %+v; want call %d, attempt 3, the adopter's traceparent %q", c, queued, tp3)
	}
}

// testNonce: a nonce makes EnqueueCall idempotent, also once the call is done; calls without a
// nonce, or with another, are calls of their own.
func testNonce(t *testing.T, db Shared[QueueStore]) {
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
	c := store.QueuedCall{RunID: "r", StepKey: "s", Attempt: 1, Tool: "export", Args: json.RawMessage(`{"a":1}`), Nonce: "n1"}
	id := enqueue(t, o, c)
	if again := enqueue(t, o, c); again != id {
		t.Fatalf("the same nonce again: id %d; want %d", again, id)
	}
	if again := enqueue(t, w, c); again != id {
		t.Fatalf("the same nonce from another engine: id %d; want %d", again, id)
	}
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != id {
		t.Fatalf("claim = %+v; want %d", cl, id)
	}
	if cl := claim(t, w, []string{"export"}, nil); cl != nil {
		t.Fatalf("a second call was queued under one nonce: %+v", cl)
	}
	if !complete(t, w, id, store.CallOutcome{Output: json.RawMessage(`1`)}) {
		t.Fatal("W could not complete its call")
	}
	if again := enqueue(t, o, c); again != id {
		t.Fatalf("the same nonce once the call is done: id %d; want %d", again, id)
	}
	c.Nonce = "n2"
	if other := enqueue(t, o, c); other == id {
		t.Fatal("another nonce returned the first call")
	}
	c.Nonce = ""
	if a, b := enqueue(t, o, c), enqueue(t, o, c); a == b {
		t.Fatalf("no nonce: ids %d, %d; want two calls", a, b)
	}
}

// testCallExpiry: a claim lasts the claimer's lease; RenewCalls extends the claims the engine
// still holds and returns those; an expired claim is failed worker_lost once, however many
// engines expire at once, after which its claimer can neither renew it nor complete it.
func testCallExpiry(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w1 := attachAs(t, db, "O"), attachAs(t, db, "W1")
	w2 := db.Open(t)
	if err := w2.Attach(ctx, store.EngineInfo{ID: "W2", Lease: 10 * suiteLease}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range 4 {
		ids = append(ids, enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: fmt.Sprint(i), Attempt: 1, Tool: "export"}))
	}
	renewed, lost := claim(t, w1, []string{"export"}, nil), claim(t, w1, []string{"export"}, nil)
	other := claim(t, w2, []string{"export"}, nil)
	if held, err := w1.RenewCalls(ctx, nil); err != nil || len(held) != 0 {
		t.Fatalf("RenewCalls(none) = %v, %v; want none", held, err)
	}
	db.Advance(t, 40*time.Second)
	held, err := w1.RenewCalls(ctx, []int64{other.ID, renewed.ID, ids[3], 1 << 40})
	if err != nil || !slices.Equal(held, []int64{renewed.ID}) {
		t.Fatalf("W1's RenewCalls(W2's, its own, a queued one, an unknown one) = %v, %v; want its own %d", held, err, renewed.ID)
	}
	if exp, err := o.ExpireCalls(ctx); err != nil || len(exp) != 0 {
		t.Fatalf("ExpireCalls within the leases = %v, %v; want none", exp, err)
	}
	db.Advance(t, 40*time.Second) // 80 s: lost's claim (60 s) expired, renewed's (100 s) and W2's (600 s) not
	var mu sync.Mutex
	var expired []int64
	var wg sync.WaitGroup
	for _, s := range []QueueStore{o, w2, o, w1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.ExpireCalls(ctx)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			expired = append(expired, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if !slices.Equal(expired, []int64{lost.ID}) {
		t.Fatalf("4 concurrent ExpireCalls failed %v; want %d once", expired, lost.ID)
	}
	st, out := callStatus(t, o, lost.ID)
	if st != "done" || out.ErrorKind != "worker_lost" || !strings.Contains(out.ErrorMessage, "engine W1") || out.Worker != "W1" || out.Output != nil {
		t.Fatalf("expired call = %s, %+v; want done, worker_lost naming engine W1", st, out)
	}
	if complete(t, w1, lost.ID, store.CallOutcome{Output: json.RawMessage(`2`)}) {
		t.Fatal("a late outcome of an expired claim was recorded")
	}
	if held, err := w1.RenewCalls(ctx, []int64{lost.ID}); err != nil || len(held) != 0 {
		t.Fatalf("RenewCalls of an expired claim = %v, %v; want none", held, err)
	}
	for _, id := range []int64{renewed.ID, other.ID} {
		if st, _ := callStatus(t, o, id); st != "claimed" {
			t.Fatalf("call %d is %s; want still claimed", id, st)
		}
	}
	if !complete(t, w1, renewed.ID, store.CallOutcome{Output: json.RawMessage(`3`)}) {
		t.Fatal("W1 could not complete the claim it renewed")
	}
}

// testCancelCall: a cancelled queued call is never claimed; a cancelled claim drops out of its
// claimer's renewals and takes no outcome; a done call stays done; an unknown id is no error.
func testCancelCall(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
	q := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "a", Attempt: 1, Tool: "export"})
	c := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "b", Attempt: 1, Tool: "export"})
	d := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "c", Attempt: 1, Tool: "export"})
	if err := o.CancelCall(ctx, q); err != nil {
		t.Fatal(err)
	}
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != c {
		t.Fatalf("claim after a cancel = %+v; want %d (the cancelled %d is never claimed)", cl, c, q)
	}
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != d {
		t.Fatalf("claim = %+v; want %d", cl, d)
	}
	if !complete(t, w, d, store.CallOutcome{Output: json.RawMessage(`1`)}) {
		t.Fatal("W could not complete its call")
	}
	for _, id := range []int64{c, d, 1 << 40} {
		if err := o.CancelCall(ctx, id); err != nil {
			t.Fatalf("CancelCall(%d): %v", id, err)
		}
	}
	if held, err := w.RenewCalls(ctx, []int64{c}); err != nil || len(held) != 0 {
		t.Fatalf("RenewCalls of a cancelled claim = %v, %v; want none", held, err)
	}
	if complete(t, w, c, store.CallOutcome{ErrorKind: "cancelled"}) {
		t.Fatal("a cancelled call took an outcome")
	}
	for id, want := range map[int64]string{q: "cancelled", c: "cancelled", d: "done"} {
		if st, _ := callStatus(t, o, id); st != want {
			t.Errorf("call %d is %s; want %s", id, st, want)
		}
	}
	if _, out := callStatus(t, o, d); string(out.Output) != "1" {
		t.Errorf("the done call's output after a cancel = %s; want 1", out.Output)
	}
}

// testEndedRunCalls: a Write that ends a run cancels the run's calls still queued or claimed;
// the calls of other runs and the run's done calls stay; a claim of a run (ClaimRun) is no end.
func testEndedRunCalls(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
	write(t, o, &store.Batch{CreateRuns: []store.Run{newRun("r", t0), newRun("r2", t0), newRun("r3", t0)}})
	q := func(r, key string) int64 {
		return enqueue(t, o, store.QueuedCall{RunID: r, StepKey: key, Attempt: 1, Tool: "export", Args: json.RawMessage(`{}`)})
	}
	done := q("r", "a")
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != done {
		t.Fatalf("claim = %+v; want %d", cl, done)
	}
	complete(t, w, done, store.CallOutcome{Output: json.RawMessage(`1`)})
	claimed := q("r", "b")
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != claimed {
		t.Fatalf("claim = %+v; want %d", cl, claimed)
	}
	queued, other, taken := q("r", "c"), q("r2", "a"), q("r3", "a")
	write(t, o, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r2", Status: run.StatusPaused, UpdatedAt: t0}}})
	write(t, o, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusCompleted, UpdatedAt: t0, FinishedAt: t0}}})
	db.Advance(t, suiteLease+time.Second)
	if ok, err := w.ClaimRun(ctx, "r3", t0, store.Interruption{}); !ok || err != nil {
		t.Fatalf("ClaimRun(r3) = %v, %v; want true", ok, err)
	}
	for id, want := range map[int64]string{done: "done", claimed: "cancelled", queued: "cancelled", other: "queued", taken: "queued"} {
		if st, _ := callStatus(t, o, id); st != want {
			t.Errorf("call %d is %s; want %s", id, st, want)
		}
	}
	if held, err := w.RenewCalls(ctx, []int64{claimed}); err != nil || len(held) != 0 {
		t.Errorf("the cancelled call's claim is still held: %v, %v", held, err)
	}
}

// testCallReports: only the engine holding the claim writes reports (not another engine, not
// after a cancel, an outcome or an expiry); they are read past a Seq, in order, with their
// progress, lines and drop counts; CallStatus gives the newest Seq.
func testCallReports(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w1, w2 := attachAs(t, db, "O"), attachAs(t, db, "W1"), attachAs(t, db, "W2")
	enqueueClaim := func(w QueueStore) int64 {
		t.Helper()
		enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "s", Attempt: 1, Tool: "cache"})
		c := claim(t, w, []string{"cache"}, nil)
		if c == nil {
			t.Fatal("nothing to claim")
		}
		return c.ID
	}
	total := 10.0
	report := func(w QueueStore, id int64, seq int) bool {
		t.Helper()
		ok, err := w.ReportCall(ctx, id, store.CallReport{Seq: seq, Progress: &run.StepProgress{Done: float64(seq), Total: &total, Message: "frames"},
			Lines: []run.LogLine{run.LogLineOf(fmt.Sprintf("line %d", seq), json.RawMessage(`{"frame":1}`))}, Dropped: seq - 1})
		if err != nil {
			t.Fatalf("ReportCall(%d, %d): %v", id, seq, err)
		}
		return ok
	}
	rows := func(id int64) int {
		t.Helper()
		rs, err := o.CallReports(ctx, id, 0)
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
	if ok, err := w1.ReportCall(ctx, id, store.CallReport{Seq: 4}); !ok || err != nil {
		t.Fatalf("a report without progress or lines = %v, %v; want recorded", ok, err)
	}
	if st, out := callStatus(t, o, id); st != "claimed" || out.LastReport != 4 {
		t.Fatalf("status = %s, last report %d; want claimed, 4", st, out.LastReport)
	}
	rs, err := o.CallReports(ctx, id, 1)
	if err != nil || len(rs) != 3 || rs[0].Seq != 2 || rs[1].Seq != 3 || rs[2].Seq != 4 {
		t.Fatalf("reports past 1 = %+v, %v; want 2, 3, 4", rs, err)
	}
	r := rs[1]
	if r.Progress == nil || r.Progress.Done != 3 || *r.Progress.Total != 10 || r.Progress.Message != "frames" || r.Dropped != 2 ||
		len(r.Lines) != 1 || r.Lines[0].Text != "line 3" || !jsonEqual(r.Lines[0].Fields, json.RawMessage(`{"frame":1}`)) || r.Lines[0].Stream != run.StreamLog {
		t.Fatalf("report 3 = %+v %+v; want its progress, line and drop count", r, r.Lines)
	}
	if rs[2].Progress != nil || len(rs[2].Lines) != 0 || rs[2].Dropped != 0 {
		t.Fatalf("report 4 = %+v; want no progress, no lines", rs[2])
	}
	if rs, err := o.CallReports(ctx, id, 4); err != nil || len(rs) != 0 {
		t.Fatalf("reports past the newest = %+v, %v; want none", rs, err)
	}
	if rs, err := o.CallReports(ctx, 1<<40, 0); err != nil || len(rs) != 0 {
		t.Fatalf("reports of an unknown call = %+v, %v; want none", rs, err)
	}
	if err := o.CancelCall(ctx, id); err != nil {
		t.Fatal(err)
	}
	if report(w1, id, 5) || rows(id) != 4 {
		t.Fatal("a report after the cancel was written")
	}
	done := enqueueClaim(w2)
	if !report(w2, done, 1) {
		t.Fatal("W2's report was refused")
	}
	complete(t, w2, done, store.CallOutcome{Output: json.RawMessage(`1`)})
	if report(w2, done, 2) || rows(done) != 1 {
		t.Fatal("a report after the outcome was written")
	}
	if _, out := callStatus(t, o, done); out.LastReport != 1 {
		t.Fatalf("done call's last report = %d; want 1", out.LastReport)
	}
	lost := enqueueClaim(w1)
	db.Advance(t, suiteLease+time.Second)
	if _, err := o.ExpireCalls(ctx); err != nil {
		t.Fatal(err)
	}
	if _, out := callStatus(t, o, lost); out.LastReport != 0 {
		t.Fatalf("a call without reports: last report %d; want 0", out.LastReport)
	}
	if report(w1, lost, 1) || rows(lost) != 0 {
		t.Fatal("an engine whose claim expired wrote a report")
	}
}

// testAdoptCall: AdoptCall finds the newest call of a run's step still queued or claimed with the
// same tool, remote and args; else, given the interrupted attempt, the step's newest call if it
// is done and of that attempt (or of the adopter's, an adoption made again); the adopted call
// takes the adopter's attempt. Nothing else is adopted.
func testAdoptCall(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
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
	old := enqueue(t, o, c)
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != old {
		t.Fatalf("claim = %+v", cl)
	}
	complete(t, w, old, store.CallOutcome{Output: json.RawMessage(`1`)})
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
	if id, ok := adopt(adopter); !ok || id != old {
		t.Fatalf("adopted %d (%v); want the done call %d of the interrupted attempt 2", id, ok, old)
	}
	if id, ok := adopt(next); !ok || id != old {
		t.Fatalf("second adoption (interrupted attempt 1, the first adopter's): %d (%v); want %d", id, ok, old)
	}
	if id, ok := adopt(adopter); !ok || id != old {
		t.Fatalf("the same adoption again: %d (%v); want %d", id, ok, old)
	}
	first, newest := enqueue(t, o, c), enqueue(t, o, c)
	c.Attempt = 1
	if id, ok := adopt(c); !ok || id != newest {
		t.Fatalf("adopted %d (%v); want the newest live call %d (older %d)", id, ok, newest, first)
	}
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != first {
		t.Fatalf("claim = %+v; want %d", cl, first)
	} else if cl.Attempt != 2 {
		t.Fatalf("claimed call's attempt = %d; want 2 (as queued: only the adopted call took attempt 1)", cl.Attempt)
	}
	if err := o.CancelCall(ctx, newest); err != nil {
		t.Fatal(err)
	}
	if id, ok := adopt(c); !ok || id != first {
		t.Fatalf("adopted %d (%v); want the claimed call %d", id, ok, first)
	}
	complete(t, w, first, store.CallOutcome{Output: json.RawMessage(`2`)})
	for _, a := range []int{1, 2} {
		c.Attempt, c.Interrupted = a, a
		if id, ok := adopt(c); ok {
			t.Fatalf("attempt %d: adopted %d, an older call than the step's newest (cancelled) one", a, id)
		}
	}
	for what, other := range map[string]store.QueuedCall{
		"other args":   {RunID: "r", StepKey: c.StepKey, Tool: "export", Args: json.RawMessage(`{"a":2,"b":"x"}`)},
		"args spaced":  {RunID: "r", StepKey: c.StepKey, Tool: "export", Args: json.RawMessage(`{"a": 1, "b": "x"}`)},
		"another step": {RunID: "r", StepKey: "per[2].s", Tool: "export", Args: c.Args},
		"another run":  {RunID: "r2", StepKey: c.StepKey, Tool: "export", Args: c.Args},
		"another tool": {RunID: "r", StepKey: c.StepKey, Tool: "render", Args: c.Args},
		"a remote":     {RunID: "r", StepKey: c.StepKey, Tool: "export", Remote: "maya", Args: c.Args},
	} {
		live := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: c.StepKey, Attempt: 1, Tool: "export", Args: c.Args})
		if id, ok := adopt(other); ok {
			t.Errorf("%s: adopted call %d", what, id)
		}
		if err := o.CancelCall(ctx, live); err != nil {
			t.Fatal(err)
		}
	}
}

// testCallHousekeeping: ExpireCalls deletes the calls finished (done or cancelled) more than a
// day ago, with their reports, and the reports written more than an hour ago; a nonce of a
// deleted call queues a new call. RenewCalls renews a claim whose lease ended as long as no
// ExpireCalls failed it: it is still the engine's.
func testCallHousekeeping(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
	old := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "a", Attempt: 1, Tool: "export", Nonce: "n-old"})
	claim(t, w, []string{"export"}, nil)
	if ok, err := w.ReportCall(ctx, old, store.CallReport{Seq: 1}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	complete(t, w, old, store.CallOutcome{Output: json.RawMessage(`1`)})
	cancelled := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "b", Attempt: 1, Tool: "export"})
	if err := o.CancelCall(ctx, cancelled); err != nil {
		t.Fatal(err)
	}
	db.Advance(t, 23*time.Hour)
	running := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "c", Attempt: 1, Tool: "export"})
	if cl := claim(t, w, []string{"export"}, nil); cl == nil || cl.ID != running {
		t.Fatalf("claim = %+v; want %d", cl, running)
	}
	if ok, err := w.ReportCall(ctx, running, store.CallReport{Seq: 1}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	db.Advance(t, 50*time.Minute)
	if held, err := w.RenewCalls(ctx, []int64{running}); err != nil || len(held) != 1 {
		t.Fatal(held, err)
	}
	if ok, err := w.ReportCall(ctx, running, store.CallReport{Seq: 2}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, err := o.ExpireCalls(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(mustReports(t, o, old)); n != 0 {
		t.Fatalf("a report written 23 h 50 min ago is kept (%d); want it deleted (older than an hour)", n)
	}
	if rs := mustReports(t, o, running); len(rs) != 2 {
		t.Fatalf("reports of the running call = %+v; want both (50 min and 0 old)", rs)
	}
	if st, _ := callStatus(t, o, old); st != "done" {
		t.Fatalf("a call done 23 h 50 min ago is %s; want it kept", st)
	}
	db.Advance(t, 20*time.Minute) // 24 h 10 min
	if held, err := w.RenewCalls(ctx, []int64{running}); err != nil || len(held) != 1 {
		t.Fatal(held, err)
	}
	if exp, err := o.ExpireCalls(ctx); err != nil || len(exp) != 0 {
		t.Fatalf("ExpireCalls = %v, %v; want none failed", exp, err)
	}
	for _, id := range []int64{old, cancelled} {
		if _, _, err := o.CallStatus(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("call %d finished more than a day ago: %v; want deleted (ErrNotFound)", id, err)
		}
	}
	if rs := mustReports(t, o, running); len(rs) != 1 || rs[0].Seq != 2 {
		t.Fatalf("reports of the running call = %+v; want report 2 only (1 is 70 min old)", rs)
	}
	if st, out := callStatus(t, o, running); st != "claimed" || out.LastReport != 2 {
		t.Fatalf("running call = %s, last report %d; want claimed, 2", st, out.LastReport)
	}
	if again := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "a", Attempt: 1, Tool: "export", Nonce: "n-old"}); again == old {
		t.Fatalf("the nonce of a deleted call returned its id %d; want a new call", old)
	}
}

func mustReports(t *testing.T, q store.CallQueue, id int64) []store.CallReport {
	t.Helper()
	rs, err := q.CallReports(context.Background(), id, 0)
	if err != nil {
		t.Fatalf("CallReports(%d): %v", id, err)
	}
	return rs
}

// testWakeUps: ListenCalls is woken by each change of a call's status and each report: "q:TOOL",
// "r:REMOTE", "p:ID", "d:ID" (an outcome, an expiry), "c:ID" (a cancel, a run's end), and by an
// engine's Detach ("h:ENGINE"); it returns ctx's error once ctx ends.
func testWakeUps(t *testing.T, db Shared[QueueStore]) {
	ctx := context.Background()
	o, w := attachAs(t, db, "O"), attachAs(t, db, "W")
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	// ready is called once the listener listens: the first change made after it wakes it (the
	// engine's queue relies on it to look again for what the wake-ups sent before said).
	rctx, rstop := context.WithCancel(ctx)
	ready, rwoken := make(chan struct{}), make(chan string, 16)
	go func() { _ = o.ListenCalls(rctx, func() { close(ready) }, func(p string) { rwoken <- p }) }()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("ListenCalls did not call ready within 10 s")
	}
	enqueue(t, o, store.QueuedCall{RunID: "ready", StepKey: "ready", Tool: "ready"})
	select {
	case p := <-rwoken:
		if p != "q:ready" {
			t.Fatalf("woken by %q after ready; want q:ready", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up of a call queued after ready was called")
	}
	rstop()
	woken := make(chan string, 256)
	ended := make(chan error, 1)
	go func() { ended <- o.ListenCalls(lctx, nil, func(p string) { woken <- p }) }()
	// A listener may start listening after ListenCalls is called (PostgreSQL's LISTEN):
	// queue probes until one wakes it.
	for listening := false; !listening; {
		enqueue(t, o, store.QueuedCall{RunID: "probe", StepKey: "probe", Tool: "probe"})
		select {
		case p := <-woken:
			listening = p == "q:probe"
		case err := <-ended:
			t.Fatalf("ListenCalls ended before a wake-up: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	wait := func(want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case p := <-woken:
				if p == want {
					return
				}
				if p != "q:probe" && !strings.HasPrefix(want, "h:") {
					t.Fatalf("woken by %q; want %q next", p, want)
				}
			case <-deadline:
				t.Fatalf("no wake-up %q", want)
			}
		}
	}
	id := fmt.Sprint
	host := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "a", Attempt: 1, Tool: "export"})
	wait("q:export")
	remote := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "b", Attempt: 1, Tool: "export", Remote: "maya"})
	wait("r:maya")
	claim(t, w, []string{"export"}, []string{"maya"}) // a claim wakes nobody
	if ok, err := w.ReportCall(ctx, host, store.CallReport{Seq: 1}); !ok || err != nil {
		t.Fatal(ok, err)
	}
	wait("p:" + id(host))
	complete(t, w, host, store.CallOutcome{Output: json.RawMessage(`1`)})
	wait("d:" + id(host))
	if err := o.CancelCall(ctx, remote); err != nil {
		t.Fatal(err)
	}
	wait("c:" + id(remote))
	write(t, o, &store.Batch{CreateRuns: []store.Run{newRun("ended", t0)}})
	ofRun := enqueue(t, o, store.QueuedCall{RunID: "ended", StepKey: "a", Attempt: 1, Tool: "export"})
	wait("q:export")
	write(t, o, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "ended", Status: run.StatusCancelled, UpdatedAt: t0, FinishedAt: t0}}})
	wait("c:" + id(ofRun))
	lost := enqueue(t, o, store.QueuedCall{RunID: "r", StepKey: "c", Attempt: 1, Tool: "export"})
	wait("q:export")
	claim(t, w, []string{"export"}, nil)
	db.Advance(t, suiteLease+time.Second)
	if exp, err := o.ExpireCalls(ctx); err != nil || !slices.Equal(exp, []int64{lost}) {
		t.Fatalf("ExpireCalls = %v, %v; want %d", exp, err, lost)
	}
	wait("d:" + id(lost))
	if err := w.Detach(ctx); err != nil {
		t.Fatal(err)
	}
	wait("h:W")
	stop()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ListenCalls ended with %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ListenCalls did not return once its context ended")
	}
}
