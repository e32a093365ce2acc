package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// SharedQueueStore is a store that engines share, with the ResourceQueue feature.
type SharedQueueStore interface {
	LeaserStore
	store.ResourceQueue
}

// ExerciseSharedQueue runs the suite of store.ResourceQueue: one wait queue of scarce resources
// across the engines of one database. Each test attaches engines "A" and "B" (and more) to db;
// Advance ages waiters too (aging) and the engines' heartbeats (each test beats again).
func ExerciseSharedQueue(t *testing.T, newDB func(t *testing.T) Shared[SharedQueueStore]) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, db Shared[SharedQueueStore])
	}{
		{"PriorityAcrossEngines", testQueuePriorityAcrossEngines},
		{"FirstComeWithinAKey", testQueueFIFO},
		{"FairShareAcrossEngines", testQueueFairShare},
		{"AgingAcrossEngines", testQueueAging},
		{"DeadEngineWaitersDoNotBlock", testQueueDeadWaiters},
		{"LeaveMovesTheQueueUp", testQueueLeave},
		{"WaiterThatDoesNotFitHoldsBack", testQueueHoldBack},
		{"ProbeCapPassesOver", testQueueCap},
		{"LongFairShareKeys", testQueueLongKeys},
		{"WaitersListed", testQueueWaiters},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

// queueAging is the aging of the suite's waiters: a point per 10 s waited.
const queueAging = 10 * time.Second

// ask is AcquireQueued of holder id for amounts of houdini (limit lim), failing on an error.
func ask(t *testing.T, s store.ResourceQueue, id string, n, lim, priority int, key string) (bool, int) {
	t.Helper()
	held, place, err := s.AcquireQueued(context.Background(), store.SlotRequest{ID: id, Amounts: map[string]int{"houdini": n},
		Limits: map[string]int{"houdini": lim}, RunID: "r-" + id, Label: id}, store.QueueEntry{Priority: priority, Key: key, AgingEvery: queueAging})
	if err != nil {
		t.Fatalf("AcquireQueued(%s): %v", id, err)
	}
	if held == (place != 0) {
		t.Fatalf("AcquireQueued(%s) = held %v, place %d: a place is for a waiter only", id, held, place)
	}
	return held, place
}

// holders returns the holders of houdini, by Slots.
func holders(t *testing.T, s store.ResourceSlots) []string {
	t.Helper()
	slots, err := s.Slots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sl := range slots {
		out = append(out, sl.Holder)
	}
	slices.Sort(out)
	return out
}

// serveAll releases holder first of engine s, then, while waiters remain, the holder the
// queue granted, and returns the order holders were granted in (each release grants the next).
func serveAll(t *testing.T, stores map[string]SharedQueueStore, first string, owner map[string]string, n int) []string {
	t.Helper()
	var order []string
	cur := first
	for range n {
		if !release(t, stores[owner[cur]], cur) {
			t.Fatalf("ReleaseSlots(%s) = false", cur)
		}
		hs := holders(t, stores["A"])
		if len(hs) != 1 {
			t.Fatalf("after releasing %s the holders are %v; want the next waiter alone", cur, hs)
		}
		cur = hs[0]
		order = append(order, cur)
	}
	return order
}

// testQueuePriorityAcrossEngines: a high-priority waiter of engine B goes before the
// low-priority waiters engine A registered earlier; the places say so.
func testQueuePriorityAcrossEngines(t *testing.T, db Shared[SharedQueueStore]) {
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	if held, _ := ask(t, a, "a0", 1, 1, 0, "ka"); !held {
		t.Fatal("the free unit not granted")
	}
	for i, id := range []string{"a1", "a2", "a3"} {
		if _, place := ask(t, a, id, 1, 1, 0, "ka"); place != i+1 {
			t.Fatalf("%s's place %d; want %d", id, place, i+1)
		}
	}
	if _, place := ask(t, b, "b1", 1, 1, 10, "kb"); place != 1 {
		t.Fatalf("the high-priority waiter's place %d; want 1", place)
	}
	if _, place := ask(t, a, "a1", 1, 1, 0, "ka"); place != 2 {
		t.Fatalf("a1 asked again: place %d; want 2 behind B's", place)
	}
	// Asked again (Again) while every unit is held: at once, place not read.
	held, place, err := a.AcquireQueued(context.Background(), store.SlotRequest{ID: "a2", Amounts: map[string]int{"houdini": 1},
		Limits: map[string]int{"houdini": 1}}, store.QueueEntry{Key: "ka", AgingEvery: queueAging, Again: true})
	if err != nil || held || place != 0 {
		t.Fatalf("a2 asked again with every unit held = %v, %d, %v; want waiting, place 0", held, place, err)
	}
	order := serveAll(t, map[string]SharedQueueStore{"A": a, "B": b}, "a0",
		map[string]string{"a0": "A", "a1": "A", "a2": "A", "a3": "A", "b1": "B"}, 4)
	if want := []string{"b1", "a1", "a2", "a3"}; !slices.Equal(order, want) {
		t.Fatalf("granted in the order %v; want %v", order, want)
	}
}

// testQueueFIFO: within one key and priority, first come first served across engines.
func testQueueFIFO(t *testing.T, db Shared[SharedQueueStore]) {
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	ask(t, a, "h", 1, 1, 0, "k")
	ask(t, b, "b1", 1, 1, 0, "k")
	ask(t, a, "a1", 1, 1, 0, "k")
	ask(t, b, "b2", 1, 1, 0, "k")
	order := serveAll(t, map[string]SharedQueueStore{"A": a, "B": b}, "h",
		map[string]string{"h": "A", "a1": "A", "b1": "B", "b2": "B"}, 3)
	if want := []string{"b1", "a1", "b2"}; !slices.Equal(order, want) {
		t.Fatalf("granted in the order %v; want %v", order, want)
	}
}

// testQueueFairShare: key X (engine A) registers three waiters before key Y (engine B)
// registers two: they are served round-robin, X, Y, X, Y, X.
func testQueueFairShare(t *testing.T, db Shared[SharedQueueStore]) {
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	ask(t, a, "h", 1, 1, 0, "X")
	for _, id := range []string{"x1", "x2", "x3"} {
		ask(t, a, id, 1, 1, 0, "X")
	}
	for _, id := range []string{"y1", "y2"} {
		ask(t, b, id, 1, 1, 0, "Y")
	}
	order := serveAll(t, map[string]SharedQueueStore{"A": a, "B": b}, "h",
		map[string]string{"h": "A", "x1": "A", "x2": "A", "x3": "A", "y1": "B", "y2": "B"}, 5)
	if want := []string{"x1", "y1", "x2", "y2", "x3"}; !slices.Equal(order, want) {
		t.Fatalf("granted in the order %v; want %v", order, want)
	}
}

// testQueueAging: a priority-0 waiter of engine A that has waited 1,000 s (100 points) goes
// before a priority-50 waiter engine B registers then.
func testQueueAging(t *testing.T, db Shared[SharedQueueStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	ask(t, a, "h", 1, 1, 0, "k")
	ask(t, a, "old", 1, 1, 0, "k")
	db.Advance(t, 1000*time.Second)
	for id, s := range map[string]SharedQueueStore{"A": a, "B": b} {
		if _, err := s.Heartbeat(ctx, store.EngineInfo{ID: id}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, place := ask(t, b, "new", 1, 1, 50, "k2"); place != 2 {
		t.Fatalf("the new priority-50 waiter's place %d; want 2, behind the aged one", place)
	}
	order := serveAll(t, map[string]SharedQueueStore{"A": a, "B": b}, "h", map[string]string{"h": "A", "old": "A", "new": "B"}, 2)
	if want := []string{"old", "new"}; !slices.Equal(order, want) {
		t.Fatalf("granted in the order %v; want %v", order, want)
	}
}

// testQueueDeadWaiters: the waiters of an engine past its lease do not hold back the others,
// and are gone for good (its heartbeat afterwards does not bring them back).
func testQueueDeadWaiters(t *testing.T, db Shared[SharedQueueStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	ask(t, b, "h", 1, 1, 0, "kb")
	ask(t, a, "a1", 1, 1, 100, "ka")
	ask(t, b, "b1", 1, 1, 0, "kb")
	db.Advance(t, suiteLease+time.Second)
	if _, err := b.Heartbeat(ctx, store.EngineInfo{ID: "B"}, nil); err != nil {
		t.Fatal(err)
	}
	if !release(t, b, "h") {
		t.Fatal("ReleaseSlots(h) = false")
	}
	if hs := holders(t, b); !slices.Equal(hs, []string{"b1"}) {
		t.Fatalf("holders %v after B's release; want b1 (A's waiter is dead)", hs)
	}
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, nil); err != nil {
		t.Fatal(err)
	}
	ask(t, b, "b2", 1, 1, 0, "kb")
	release(t, b, "b1")
	if hs := holders(t, b); !slices.Equal(hs, []string{"b2"}) {
		t.Fatalf("holders %v; want b2: A's dead waiter came back", hs)
	}
}

// testQueueLeave: a waiter that leaves frees its place; one granted meanwhile gives its units
// back to the next.
func testQueueLeave(t *testing.T, db Shared[SharedQueueStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	ask(t, a, "h", 1, 1, 0, "k")
	ask(t, a, "a1", 1, 1, 0, "k")
	ask(t, b, "b1", 1, 1, 0, "k")
	ask(t, b, "b2", 1, 1, 0, "k")
	if held, err := a.LeaveQueue(ctx, "a1"); err != nil || held {
		t.Fatalf("LeaveQueue(a1) = %v, %v; want false (it held nothing)", held, err)
	}
	if _, place := ask(t, b, "b1", 1, 1, 0, "k"); place != 1 {
		t.Fatalf("b1's place %d after a1 left; want 1", place)
	}
	release(t, a, "h") // grants b1
	if held, _ := ask(t, b, "b1", 1, 1, 0, "k"); !held {
		t.Fatal("b1, granted by A's release, does not hold when it asks again")
	}
	if held, err := b.LeaveQueue(ctx, "b1"); err != nil || !held {
		t.Fatalf("LeaveQueue(b1), granted meanwhile = %v, %v; want true", held, err)
	}
	if hs := holders(t, a); !slices.Equal(hs, []string{"b2"}) {
		t.Fatalf("holders %v; want b2, given b1's units as it left", hs)
	}
}

// testQueueHoldBack: a waiter asking for 2 units, with 1 free, holds back a later waiter of 1 on
// another engine; the units go to it once 2 are free.
func testQueueHoldBack(t *testing.T, db Shared[SharedQueueStore]) {
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	ask(t, a, "h1", 1, 2, 0, "k")
	ask(t, a, "h2", 1, 2, 0, "k")
	ask(t, a, "big", 2, 2, 0, "k")
	release(t, a, "h1")
	if held, place := ask(t, b, "small", 1, 2, 0, "k2"); held || place != 2 {
		t.Fatalf("the 1-unit waiter behind a 2-unit one = held %v, place %d; want waiting second", held, place)
	}
	release(t, a, "h2")
	if hs := holders(t, a); !slices.Equal(hs, []string{"big"}) {
		t.Fatalf("holders %v; want big", hs)
	}
}

// testQueueCap: a waiter whose engine's probe caps that engine's holders (at 1, one held) is
// passed over; the next, on another engine, gets the unit.
func testQueueCap(t *testing.T, db Shared[SharedQueueStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	ask(t, a, "h", 1, 3, 0, "k")
	req := store.SlotRequest{ID: "capped", Amounts: map[string]int{"houdini": 1}, Limits: map[string]int{"houdini": 3}}
	held, place, err := a.AcquireQueued(ctx, req, store.QueueEntry{Key: "k", Caps: map[string]int{"houdini": 1}})
	if err != nil || held || place != 1 {
		t.Fatalf("the capped waiter = %v, %d, %v; want waiting first", held, place, err)
	}
	if held, _ := ask(t, b, "b1", 1, 3, 0, "k2"); !held {
		t.Fatal("B's waiter held back by A's capped one")
	}
	release(t, a, "h")
	if hs := holders(t, a); !slices.Equal(hs, []string{"b1", "capped"}) {
		t.Fatalf("holders %v; want b1 and capped (A holds none now)", hs)
	}
}

// testQueueLongKeys: fair-share keys of 100 KB (a key rendered from a large input) work, and
// two that differ only at their end are two keys (served in turns).
func testQueueLongKeys(t *testing.T, db Shared[SharedQueueStore]) {
	a := attachAs(t, db, "A")
	var sb strings.Builder // incompressible: PostgreSQL compresses a repeated one to fit an index
	for i := 0; sb.Len() < 100_000; i++ {
		sum := sha256.Sum256([]byte(strconv.Itoa(i)))
		sb.WriteString(hex.EncodeToString(sum[:]))
	}
	long := sb.String()
	ask(t, a, "h", 1, 1, 0, long+"X")
	ask(t, a, "x1", 1, 1, 0, long+"X")
	ask(t, a, "x2", 1, 1, 0, long+"X")
	ask(t, a, "y1", 1, 1, 0, long+"Y")
	order := serveAll(t, map[string]SharedQueueStore{"A": a}, "h", map[string]string{"h": "A", "x1": "A", "x2": "A", "y1": "A"}, 3)
	if want := []string{"x1", "y1", "x2"}; !slices.Equal(order, want) {
		t.Fatalf("granted in the order %v; want %v (two keys in turns)", order, want)
	}
}

// testQueueWaiters: Waiters lists the live waiters of every engine in the order they are
// served, each with its engine, run, label, amounts, priority (own and with aging) and key; a
// dead engine's waiters are not listed; none is an empty list.
func testQueueWaiters(t *testing.T, db Shared[SharedQueueStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	if ws, err := a.Waiters(ctx); err != nil || ws == nil || len(ws) != 0 {
		t.Fatalf("Waiters with none waiting = %v, %v; want an empty list", ws, err)
	}
	ask(t, a, "h", 1, 1, 0, "ka")
	ask(t, a, "a1", 1, 1, 0, "ka")
	ask(t, b, "b1", 1, 1, 10, "kb")
	ws, err := a.Waiters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].Holder != "b1" || ws[1].Holder != "a1" {
		t.Fatalf("Waiters = %+v; want b1 (priority 10, engine B) before a1", ws)
	}
	w := ws[0]
	if w.Engine != "B" || w.RunID != "r-b1" || w.Label != "b1" || w.Amounts["houdini"] != 1 || len(w.Amounts) != 1 ||
		w.Priority != 10 || w.Effective != 10 || w.Key != "kb" || w.Since.IsZero() {
		t.Fatalf("b1 listed as %+v", w)
	}
	db.Advance(t, 30*time.Second) // a1 gains 3 points by waiting (queueAging 10 s)
	if ws, err = b.Waiters(ctx); err != nil || len(ws) != 2 || ws[1].Effective != 3 || ws[1].Priority != 0 {
		t.Fatalf("Waiters after 30 s = %+v, %v; want a1 at effective priority 3", ws, err)
	}
	db.Advance(t, suiteLease+time.Second)
	if _, err := b.Heartbeat(ctx, store.EngineInfo{ID: "B"}, nil); err != nil {
		t.Fatal(err)
	}
	if ws, err = b.Waiters(ctx); err != nil || len(ws) != 1 || ws[0].Holder != "b1" {
		t.Fatalf("Waiters once A is past its lease = %+v, %v; want b1 alone", ws, err)
	}
}
