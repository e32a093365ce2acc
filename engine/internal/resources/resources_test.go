package resources_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/resources"
)

var t0 = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)

// harness runs requests against a Scheduler on a stub clock: each Acquire in its own goroutine,
// started only once the previous one is in the queue (so arrival order is the call order), its
// grant delivered on one channel.
type harness struct {
	t      *testing.T
	clock  *clock.Stub
	s      *resources.Scheduler
	grants chan *resources.Grant
	errs   chan error
}

func newHarness(t *testing.T, limits map[string]int, opts resources.Options) *harness {
	c := clock.NewStub(t0)
	return &harness{t: t, clock: c, s: resources.New(c, limits, opts), grants: make(chan *resources.Grant, 1000), errs: make(chan error, 1000)}
}

// waiting is the number of requests in the queue of resource name, by Snapshot.
func (h *harness) waiting(name string) int {
	for _, r := range h.s.Snapshot().Resources {
		if r.Name == name {
			return len(r.Queue)
		}
	}
	return 0
}

// holding is the number of grants holding units of name.
func (h *harness) holding(name string) int {
	for _, r := range h.s.Snapshot().Resources {
		if r.Name == name {
			return len(r.Holders)
		}
	}
	return 0
}

// until yields until cond holds (another goroutine's Acquire reaching the queue); it fails the
// test after 10 s, which only a bug reaches.
func (h *harness) until(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// ask starts an Acquire of req under ctx and returns once it holds its grant or waits in the
// queue of each of its resources.
func (h *harness) ask(ctx context.Context, req resources.Request) {
	h.t.Helper()
	before := map[string]int{}
	for name := range req.Amounts {
		before[name] = h.waiting(name) + h.holding(name)
	}
	go func() {
		g, err := h.s.Acquire(ctx, req)
		if err != nil {
			h.errs <- err
			return
		}
		h.grants <- g
	}()
	h.until("request "+req.Label+" to arrive", func() bool {
		for name := range req.Amounts {
			if h.waiting(name)+h.holding(name) <= before[name] {
				return len(h.errs) > 0
			}
		}
		return true
	})
}

// next returns the next grant.
func (h *harness) next() *resources.Grant {
	h.t.Helper()
	select {
	case g := <-h.grants:
		return g
	case err := <-h.errs:
		h.t.Fatalf("Acquire: %v", err)
	case <-time.After(10 * time.Second):
		h.t.Fatal("no grant within 10 s")
	}
	return nil
}

// none checks that no grant is pending.
func (h *harness) none() {
	h.t.Helper()
	select {
	case g := <-h.grants:
		h.t.Fatalf("unexpected grant to %s", g.Waiter.Label)
	default:
	}
}

func req(label string, amounts map[string]int, priority int, key string) resources.Request {
	return resources.Request{Label: label, Amounts: amounts, Priority: priority, Key: key}
}

func one(name string) map[string]int { return map[string]int{name: 1} }

// A request that fits is granted at once; with the limit reached the next waits, and is
// granted when a holder releases. Releasing twice gives the units back once.
func TestAcquireWaitsForAFreeUnit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"houdini": 1}, resources.Options{})
	ctx := context.Background()
	h.ask(ctx, req("a", one("houdini"), 0, ""))
	a := h.next()
	h.ask(ctx, req("b", one("houdini"), 0, ""))
	h.none()
	h.clock.Advance(3 * time.Second)
	a.Release()
	a.Release()
	b := h.next()
	if b.Waiter.Label != "b" || b.At.Sub(b.Waiter.Since) != 3*time.Second {
		t.Fatalf("grant %s after %v, want b after 3s", b.Waiter.Label, b.At.Sub(b.Waiter.Since))
	}
	st := h.s.Snapshot().Resources[0]
	if st.InUse != 1 || len(st.Holders) != 1 || st.Holders[0].Label != "b" {
		t.Fatalf("state after a double release: %+v", st)
	}
	b.Release()
	if st := h.s.Snapshot().Resources[0]; st.InUse != 0 || len(st.Holders) != 0 {
		t.Fatalf("state after every release: %+v", st)
	}
}

// A request for an undeclared resource, or for more than a limit, or for less than 1, is
// refused at once: it could never be granted.
func TestAcquireRefusesWhatCouldNeverBeGranted(t *testing.T) {
	t.Parallel()
	s := resources.New(clock.NewStub(t0), map[string]int{"gpu": 2}, resources.Options{})
	for _, tc := range []struct {
		amounts map[string]int
		want    string
	}{
		{map[string]int{"gpuu": 1}, `resource "gpuu" is not declared`},
		{map[string]int{"gpu": 3}, `resource "gpu": asks for 3; must be 1 to its limit 2`},
		{map[string]int{"gpu": 0}, `resource "gpu": asks for 0; must be 1 to its limit 2`},
	} {
		if _, err := s.Acquire(context.Background(), resources.Request{Amounts: tc.amounts}); err == nil || err.Error() != tc.want {
			t.Errorf("Acquire(%v) = %v, want %s", tc.amounts, err, tc.want)
		}
	}
	// Nothing asked: granted at once.
	g, err := s.Acquire(context.Background(), resources.Request{})
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
}

// A request of higher priority jumps the queue: behind 50 waiting priority-0 requests, a
// priority-10 request is served next.
func TestPriorityJumpsTheQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"houdini": 1}, resources.Options{})
	ctx := context.Background()
	h.ask(ctx, req("holder", one("houdini"), 0, ""))
	holder := h.next()
	for i := range 50 {
		h.ask(ctx, req(fmt.Sprintf("low%d", i), one("houdini"), 0, "low"))
	}
	h.ask(ctx, req("urgent", one("houdini"), 10, "high"))
	if q := h.s.Snapshot().Resources[0].Queue; q[0].Label != "urgent" || q[0].Position != 1 || q[1].Label != "low0" || len(q) != 51 {
		t.Fatalf("queue head %+v %+v (%d waiting)", q[0], q[1], len(q))
	}
	holder.Release()
	if g := h.next(); g.Waiter.Label != "urgent" {
		t.Fatalf("served %s first, want urgent", g.Waiter.Label)
	}
}

// Fair share: run A queues 100 items and then run B 10 items on a limit of 2; the items are
// served round-robin across the two keys, so B's last item is served within about twice the
// time B would take alone (10 items on 2 units: 5 rounds alone; 10 rounds here), not after A's
// 100.
func TestFairShareDoesNotStarveTheSmallRun(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"nuke": 2}, resources.Options{})
	ctx := context.Background()
	for i := range 100 {
		h.ask(ctx, req(fmt.Sprintf("A%d", i), one("nuke"), 0, "A"))
	}
	for i := range 10 {
		h.ask(ctx, req(fmt.Sprintf("B%d", i), one("nuke"), 0, "B"))
	}
	// Every item takes one time unit; two run at once.
	var order []string
	held := []*resources.Grant{h.next(), h.next()}
	for len(held) > 0 {
		g := held[0]
		held = held[1:]
		order = append(order, g.Waiter.Label)
		h.clock.Advance(time.Second)
		g.Release()
		if len(order)+len(held) < 110 {
			held = append(held, h.next())
		}
	}
	lastB := slices.Index(order, "B9")
	if lastB < 0 || lastB >= 22 {
		t.Fatalf("B's last item finished %d-th (order %s); want within the first 22", lastB+1, strings.Join(order[:30], " "))
	}
	for i := range 10 {
		if a, b := slices.Index(order, fmt.Sprintf("A%d", i)), slices.Index(order, fmt.Sprintf("A%d", i+1)); a > b {
			t.Fatalf("A%d finished after A%d: not first come, first served within a key", i, i+1)
		}
	}
}

// Aging: a low-priority waiter gains a point per AgingEvery waited, so a stream of
// higher-priority requests does not starve it.
func TestAgingServesTheLongWaiter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"gpu": 1}, resources.Options{AgingEvery: time.Minute})
	ctx := context.Background()
	h.ask(ctx, req("holder", one("gpu"), 0, ""))
	holder := h.next()
	h.ask(ctx, req("old", one("gpu"), 0, "old"))
	h.clock.Advance(4 * time.Minute) // old: 0 + 4 = 4
	h.ask(ctx, req("new5", one("gpu"), 5, "new"))
	h.ask(ctx, req("new3", one("gpu"), 3, "new"))
	q := h.s.Snapshot().Resources[0].Queue
	if got := []string{q[0].Label, q[1].Label, q[2].Label}; !slices.Equal(got, []string{"new5", "old", "new3"}) || q[1].Effective != 4 || q[1].Priority != 0 {
		t.Fatalf("queue %+v", q)
	}
	h.clock.Advance(2 * time.Minute) // old: 6, new5: 5 + 2 = 7
	h.clock.Advance(3 * time.Minute) // old: 9, new5: 10 — still behind
	h.ask(ctx, req("new8", one("gpu"), 8, "new"))
	holder.Release()
	g := h.next()
	if g.Waiter.Label != "new5" {
		t.Fatalf("first %s, want new5 (effective 10 > old's 9)", g.Waiter.Label)
	}
	g.Release() // old 9 vs new8 8 (just arrived): old goes
	if g := h.next(); g.Waiter.Label != "old" {
		t.Fatalf("second %s, want old (aged to 9, over new8's 8)", g.Waiter.Label)
	}
}

// A waiter whose context ends leaves the queue: a request for 2 units that blocked a request
// for 1 behind it (no unit is given to a later, smaller request) frees its place, and the one
// behind is granted at once.
func TestCancelledWaiterReleasesItsPlace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"gpu": 2}, resources.Options{})
	ctx := context.Background()
	h.ask(ctx, req("holder", one("gpu"), 0, ""))
	holder := h.next()
	big, cancel := context.WithCancelCause(ctx)
	h.ask(big, req("big", map[string]int{"gpu": 2}, 0, "k"))
	h.ask(ctx, req("small", one("gpu"), 0, "k"))
	h.none() // one unit is free, but big goes first and needs two
	cancel(errors.New("run cancelled"))
	select {
	case err := <-h.errs:
		if err.Error() != "run cancelled" {
			t.Fatalf("cancelled Acquire returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled Acquire did not return")
	}
	if g := h.next(); g.Waiter.Label != "small" {
		t.Fatalf("granted %s, want small", g.Waiter.Label)
	}
	if st := h.s.Snapshot().Resources[0]; len(st.Queue) != 0 || st.InUse != 2 {
		t.Fatalf("state %+v", st)
	}
	holder.Release()
}

// Amounts above 1: a request for 3 of 4 units waits for 3 free units while those behind it wait
// too (it is not starved by requests for 1), then they share what is left; a request for another
// resource is not held back by it.
func TestAmountsAboveOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"gpu": 4, "houdini": 1}, resources.Options{})
	ctx := context.Background()
	h.ask(ctx, req("two", map[string]int{"gpu": 2}, 0, "a"))
	two := h.next()
	h.ask(ctx, req("three", map[string]int{"gpu": 3, "houdini": 1}, 0, "b"))
	h.ask(ctx, req("one", map[string]int{"gpu": 1}, 0, "c"))
	h.none()
	h.ask(ctx, req("elsewhere", map[string]int{"houdini": 1}, 0, "d"))
	h.none() // houdini is held back for three, which asks for it too
	two.Release()
	// Both are granted by that release (in either order on the channel): three first, then one
	// on the unit left (4 − 3).
	g1, g2 := h.next(), h.next()
	three := g1
	if g2.Waiter.Label == "three" {
		three, g2 = g2, g1
	}
	if three.Waiter.Label != "three" || g2.Waiter.Label != "one" {
		t.Fatalf("granted %s and %s, want three and one", g1.Waiter.Label, g2.Waiter.Label)
	}
	st := h.s.Snapshot().Resources
	if st[0].Name != "gpu" || st[0].InUse != 4 || st[1].InUse != 1 || len(st[1].Queue) != 1 || st[1].Queue[0].Label != "elsewhere" {
		t.Fatalf("state %+v", st)
	}
	three.Release()
	if g := h.next(); g.Waiter.Label != "elsewhere" {
		t.Fatalf("granted %s, want elsewhere", g.Waiter.Label)
	}
}

// A waiter for a resource another waiter blocks is not held back when it asks for a different
// resource: the queue of one licence does not stop another.
func TestOtherResourcesAreNotHeldBack(t *testing.T) {
	t.Parallel()
	ordered := []*resources.Waiter{
		{Label: "big", Amounts: map[string]int{"gpu": 2}, Seq: 1},
		{Label: "nuke", Amounts: map[string]int{"nuke": 1}, Seq: 2},
		{Label: "gpu1", Amounts: map[string]int{"gpu": 1}, Seq: 3},
	}
	got := resources.Pick(ordered, map[string]int{"gpu": 1, "nuke": 1})
	if len(got) != 1 || got[0].Label != "nuke" {
		t.Fatalf("Pick = %v, want [nuke]", got)
	}
}

// SetLimit lowers or raises a limit: raised, waiters that now fit are granted; lowered below
// what is held, nothing new is granted until enough is released.
func TestSetLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"houdini": 1}, resources.Options{})
	ctx := context.Background()
	h.ask(ctx, req("a", one("houdini"), 0, ""))
	a := h.next()
	h.ask(ctx, req("b", one("houdini"), 0, ""))
	h.s.SetLimit("houdini", 2)
	b := h.next()
	h.s.SetLimit("houdini", 1)
	h.ask(ctx, req("c", one("houdini"), 0, ""))
	a.Release()
	h.none() // b still holds the one unit
	b.Release()
	if g := h.next(); g.Waiter.Label != "c" {
		t.Fatalf("granted %s", g.Waiter.Label)
	}
}

// Order is deterministic for equal arrivals and keys never served go before served ones.
func TestOrderRoundRobinAndTies(t *testing.T) {
	t.Parallel()
	w := func(label, key string, seq uint64, prio int) *resources.Waiter {
		return &resources.Waiter{Label: label, Key: key, Seq: seq, Priority: prio, Since: t0}
	}
	ws := []*resources.Waiter{w("a1", "a", 1, 0), w("a2", "a", 2, 0), w("a3", "a", 3, 0), w("b1", "b", 4, 0), w("c1", "c", 5, 0), w("b2", "b", 6, 0), w("p", "z", 7, 1)}
	labels := func(ws []*resources.Waiter) string {
		var out []string
		for _, w := range ws {
			out = append(out, w.Label)
		}
		return strings.Join(out, " ")
	}
	if got := labels(resources.Order(ws, t0, 0, nil)); got != "p a1 b1 c1 a2 b2 a3" {
		t.Fatalf("order %s", got)
	}
	// a was served most recently, b before it, c never: c, b, a at each rank.
	if got := labels(resources.Order(ws, t0, 0, map[string]uint64{"a": 9, "b": 3})); got != "p c1 b1 a1 b2 a2 a3" {
		t.Fatalf("order %s", got)
	}
}

// OnWait tells a request that is not granted at once its place among the waiters of its
// resources (the worst of them) and their number; a request granted at once is not told.
func TestOnWaitTellsThePlace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, map[string]int{"houdini": 1, "gpu": 1}, resources.Options{})
	ctx := context.Background()
	// Each request's own place (OnWait is called after the scheduler's lock is let go, so the
	// calls of requests asked one after the other may come in another order).
	type told struct {
		label    string
		place, n int
	}
	got := make(chan told, 10)
	withWait := func(r resources.Request) resources.Request {
		r.OnWait = func(place, n int) { got <- told{r.Label, place, n} }
		return r
	}
	h.ask(ctx, withWait(req("holder", map[string]int{"houdini": 1, "gpu": 1}, 0, "")))
	holder := h.next()
	h.ask(ctx, withWait(req("a", one("houdini"), 0, "a")))
	h.ask(ctx, withWait(req("b", one("gpu"), 0, "b")))
	h.ask(ctx, withWait(req("c", map[string]int{"houdini": 1, "gpu": 1}, 9, "c")))
	h.ask(ctx, withWait(req("d", map[string]int{"houdini": 1, "gpu": 1}, 0, "d")))
	// c jumps both queues; d is 3rd for houdini (c, a, d) and gpu (c, b, d)
	want := map[string]told{"a": {"a", 1, 1}, "b": {"b", 1, 1}, "c": {"c", 1, 2}, "d": {"d", 3, 3}}
	for range len(want) {
		select {
		case g := <-got:
			if w, ok := want[g.label]; !ok || g != w {
				t.Fatalf("request %s told %+v, want %+v", g.label, g, w)
			}
			delete(want, g.label)
		case <-time.After(10 * time.Second):
			t.Fatalf("not told their place: %v", want)
		}
	}
	select {
	case g := <-got:
		t.Fatalf("told a place twice, or the holder, granted at once, was told one: %+v", g)
	case <-time.After(50 * time.Millisecond):
	}
	holder.Release()
}
