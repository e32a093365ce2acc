package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// ResourceStore is a store with the ResourceSlots feature.
type ResourceStore interface {
	store.Store
	store.ResourceSlots
}

// SharedResourceStore is a store that engines share, with the ResourceSlots feature.
type SharedResourceStore interface {
	LeaserStore
	store.ResourceSlots
}

// ExerciseResources runs the suite of store.ResourceSlots that every store passes: newStore
// returns a new, empty store ready to take slots (a shared store attached as one engine). It
// pins the checks of a request, all-or-none acquisition under the taker's limit, release,
// idempotence by holder id, the listing (Slots) and the limit under concurrent takers.
func ExerciseResources(t *testing.T, newStore func(t *testing.T) ResourceStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s ResourceStore)
	}{
		{"BadRequests", testSlotRequestChecks},
		{"AcquireRelease", testSlotsAcquireRelease},
		{"AllOrNone", testSlotsAllOrNone},
		{"DifferentLimits", testSlotsDifferentLimits},
		{"Listing", testSlotsListing},
		{"ConcurrentTakersNeverPassTheLimit", testSlotsConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// acquire is AcquireSlots of holder id, amounts and limits, failing the test on an error.
func acquire(t *testing.T, s store.ResourceSlots, id string, amounts, limits map[string]int) bool {
	t.Helper()
	ok, err := s.AcquireSlots(context.Background(), store.SlotRequest{ID: id, Amounts: amounts, Limits: limits, RunID: "r-" + id, Label: "label " + id})
	if err != nil {
		t.Fatalf("AcquireSlots(%s, %v): %v", id, amounts, err)
	}
	return ok
}

func release(t *testing.T, s store.ResourceSlots, id string) bool {
	t.Helper()
	ok, err := s.ReleaseSlots(context.Background(), id)
	if err != nil {
		t.Fatalf("ReleaseSlots(%s): %v", id, err)
	}
	return ok
}

// inUse sums the units held of each resource, by Slots.
func inUse(t *testing.T, s store.ResourceSlots) map[string]int {
	t.Helper()
	slots, err := s.Slots(context.Background())
	if err != nil {
		t.Fatalf("Slots: %v", err)
	}
	out := map[string]int{}
	for _, sl := range slots {
		out[sl.Resource] += sl.Amount
	}
	return out
}

// testSlotRequestChecks: a request that could never be granted is an error and takes nothing.
func testSlotRequestChecks(t *testing.T, s ResourceStore) {
	ctx := context.Background()
	for _, tc := range []struct {
		r    store.SlotRequest
		want string
	}{
		{store.SlotRequest{Amounts: map[string]int{"gpu": 1}, Limits: map[string]int{"gpu": 2}}, "needs a holder id"},
		{store.SlotRequest{ID: strings.Repeat("x", store.MaxSlotHolderID+1), Amounts: map[string]int{"gpu": 1}, Limits: map[string]int{"gpu": 2}}, "at most 200"},
		{store.SlotRequest{ID: "h", Amounts: map[string]int{"gpu": 0}, Limits: map[string]int{"gpu": 2}}, `resource "gpu": asks for 0; must be 1 to its limit 2`},
		{store.SlotRequest{ID: "h", Amounts: map[string]int{"gpu": -1}, Limits: map[string]int{"gpu": 2}}, "asks for -1"},
		{store.SlotRequest{ID: "h", Amounts: map[string]int{"gpu": 3}, Limits: map[string]int{"gpu": 2}}, "asks for 3; must be 1 to its limit 2"},
		{store.SlotRequest{ID: "h", Amounts: map[string]int{"gpu": 1}}, `resource "gpu" has no limit ≥ 1`},
		{store.SlotRequest{ID: "h", Amounts: map[string]int{"gpu": 1}, Limits: map[string]int{"gpu": 0}}, "no limit ≥ 1"},
	} {
		ok, err := s.AcquireSlots(ctx, tc.r)
		if err == nil || ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AcquireSlots(%+v) = %v, %v; want an error with %q", tc.r, ok, err, tc.want)
		}
	}
	if got := inUse(t, s); len(got) != 0 {
		t.Fatalf("refused requests took %v", got)
	}
	if ok := release(t, s, "never"); ok {
		t.Error("ReleaseSlots of a holder that never held reported true")
	}
}

// testSlotsAcquireRelease: units are taken up to the limit, the next is refused (false, no
// error) until a holder releases; a holder id that holds already gets true and nothing more;
// release twice reports false the second time.
func testSlotsAcquireRelease(t *testing.T, s ResourceStore) {
	lim := map[string]int{"houdini": 2}
	one := map[string]int{"houdini": 1}
	if !acquire(t, s, "a", one, lim) || !acquire(t, s, "b", one, lim) {
		t.Fatal("two units of a limit of 2 were not granted")
	}
	if acquire(t, s, "c", one, lim) {
		t.Fatal("a third unit of a limit of 2 was granted")
	}
	if !acquire(t, s, "a", one, lim) {
		t.Fatal("AcquireSlots again by a holder that holds: want true (idempotent)")
	}
	if got := inUse(t, s)["houdini"]; got != 2 {
		t.Fatalf("in use %d after a repeated acquire, want 2", got)
	}
	if !release(t, s, "a") {
		t.Fatal("ReleaseSlots(a) = false")
	}
	if release(t, s, "a") {
		t.Fatal("ReleaseSlots(a) again = true")
	}
	if !acquire(t, s, "c", one, lim) {
		t.Fatal("the unit a released was not granted to c")
	}
	if !release(t, s, "b") || !release(t, s, "c") {
		t.Fatal("release of b or c = false")
	}
	if got := inUse(t, s); len(got) != 0 {
		t.Fatalf("in use after every release: %v", got)
	}
	// Amounts above 1.
	if !acquire(t, s, "big", map[string]int{"gpu": 3}, map[string]int{"gpu": 4}) {
		t.Fatal("3 of 4 not granted")
	}
	if acquire(t, s, "two", map[string]int{"gpu": 2}, map[string]int{"gpu": 4}) {
		t.Fatal("2 more of 4 granted with 3 held")
	}
	if !acquire(t, s, "one", map[string]int{"gpu": 1}, map[string]int{"gpu": 4}) {
		t.Fatal("the last unit of 4 not granted")
	}
}

// testSlotsAllOrNone: a request for two resources, one of which is full, takes neither.
func testSlotsAllOrNone(t *testing.T, s ResourceStore) {
	lim := map[string]int{"houdini": 1, "gpu": 2}
	if !acquire(t, s, "h", map[string]int{"houdini": 1}, lim) {
		t.Fatal("houdini not granted")
	}
	if acquire(t, s, "both", map[string]int{"houdini": 1, "gpu": 2}, lim) {
		t.Fatal("a request with houdini full was granted")
	}
	if got := inUse(t, s); got["gpu"] != 0 || got["houdini"] != 1 {
		t.Fatalf("a refused request took units: %v", got)
	}
	release(t, s, "h")
	if !acquire(t, s, "both", map[string]int{"houdini": 1, "gpu": 2}, lim) {
		t.Fatal("both not granted once free")
	}
	if got := inUse(t, s); got["gpu"] != 2 || got["houdini"] != 1 {
		t.Fatalf("in use %v", got)
	}
	if !release(t, s, "both") {
		t.Fatal("release of both")
	}
	if got := inUse(t, s); len(got) != 0 {
		t.Fatalf("release of a two-resource holder left %v", got)
	}
}

// testSlotsDifferentLimits: each taker's own limit counts every holder's units: a taker with a
// smaller limit takes nothing while the total is at or above it.
func testSlotsDifferentLimits(t *testing.T, s ResourceStore) {
	one := map[string]int{"nuke": 1}
	for i := range 3 {
		if !acquire(t, s, fmt.Sprint("big", i), one, map[string]int{"nuke": 5}) {
			t.Fatalf("unit %d of 5 not granted", i+1)
		}
	}
	if acquire(t, s, "small", one, map[string]int{"nuke": 3}) {
		t.Fatal("a taker with limit 3 got a unit with 3 held")
	}
	if !acquire(t, s, "big3", one, map[string]int{"nuke": 5}) {
		t.Fatal("a taker with limit 5 did not get a 4th unit")
	}
}

// testSlotsListing: Slots lists one row per holder and resource, by resource, then
// acquisition, then holder, with the limit it was taken under, the run id and the label (cut to
// MaxSlotText bytes).
func testSlotsListing(t *testing.T, s ResourceStore) {
	ctx := context.Background()
	long := strings.Repeat("é", store.MaxSlotText) // 2 bytes each
	for _, r := range []store.SlotRequest{
		{ID: "x1", Amounts: map[string]int{"houdini": 1, "gpu": 2}, Limits: map[string]int{"houdini": 4, "gpu": 2}, RunID: "r1", Label: "cook"},
		{ID: "x2", Amounts: map[string]int{"houdini": 2}, Limits: map[string]int{"houdini": 4}, RunID: "r2", Label: long},
	} {
		if ok, err := s.AcquireSlots(ctx, r); err != nil || !ok {
			t.Fatalf("AcquireSlots(%s) = %v, %v", r.ID, ok, err)
		}
	}
	slots, err := s.Slots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		res, holder string
		n, limit    int
		run         string
	}
	var got []row
	for _, sl := range slots {
		got = append(got, row{sl.Resource, sl.Holder, sl.Amount, sl.Limit, sl.RunID})
		if sl.AcquiredAt.IsZero() {
			t.Errorf("slot %+v has no AcquiredAt", sl)
		}
	}
	want := []row{{"gpu", "x1", 2, 2, "r1"}, {"houdini", "x1", 1, 4, "r1"}, {"houdini", "x2", 2, 4, "r2"}}
	if !slices.Equal(got, want) {
		t.Fatalf("Slots = %+v, want %+v", got, want)
	}
	if slots[0].Label != "cook" || len(slots[2].Label) > store.MaxSlotText || !strings.HasPrefix(long, slots[2].Label) || len(slots[2].Label) < store.MaxSlotText-1 {
		t.Fatalf("labels %q, %d bytes", slots[0].Label, len(slots[2].Label))
	}
}

// testSlotsConcurrent: takers racing for a limit of 3 never hold more than 3 at once, and
// every one of them gets its turn.
func testSlotsConcurrent(t *testing.T, s ResourceStore) {
	const limit, takers, rounds = 3, 8, 25
	var held, peak atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, takers)
	deadline := time.Now().Add(30 * time.Second)
	for i := range takers {
		wg.Go(func() {
			ctx := context.Background()
			for r := range rounds {
				id := fmt.Sprintf("t%d-%d", i, r)
				for {
					ok, err := s.AcquireSlots(ctx, store.SlotRequest{ID: id, Amounts: map[string]int{"lic": 1}, Limits: map[string]int{"lic": limit}})
					if err != nil {
						errs <- err
						return
					}
					if ok {
						break
					}
					if time.Now().After(deadline) {
						errs <- errors.New("a taker starved for 30 s")
						return
					}
				}
				n := held.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				held.Add(-1)
				if ok, err := s.ReleaseSlots(ctx, id); err != nil || !ok {
					errs <- fmt.Errorf("ReleaseSlots(%s) = %v, %v", id, ok, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > limit || p < 1 {
		t.Fatalf("peak holders %d, limit %d", p, limit)
	}
	if got := inUse(t, s); len(got) != 0 {
		t.Fatalf("in use after every release: %v", got)
	}
}

// ExerciseSharedResources runs the suite of store.ResourceSlots on a database that engines
// share: slots held under the engine's lease (a stopped engine's slots stop counting when its
// lease ends, and are deleted by the next taker, so they never count again), an engine past its
// lease cannot take a slot (ErrLeaseLost), AcquireSlots needs Attach, an engine releases only
// its own holders, and Slots lists live holders of every engine.
func ExerciseSharedResources(t *testing.T, newDB func(t *testing.T) Shared[SharedResourceStore]) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, db Shared[SharedResourceStore])
	}{
		{"NeedsAttach", testSlotsNeedAttach},
		{"LimitAcrossEngines", testSlotsAcrossEngines},
		{"ExpiredEngineSlotsFree", testSlotsOfExpiredEngine},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newDB(t))
		})
	}
}

func testSlotsNeedAttach(t *testing.T, db Shared[SharedResourceStore]) {
	s := db.Open(t)
	ok, err := s.AcquireSlots(context.Background(), store.SlotRequest{ID: "h", Amounts: map[string]int{"gpu": 1}, Limits: map[string]int{"gpu": 1}})
	if err == nil || ok {
		t.Fatalf("AcquireSlots before Attach = %v, %v; want an error", ok, err)
	}
	if slots, err := s.Slots(context.Background()); err != nil || len(slots) != 0 {
		t.Fatalf("Slots of a store not attached = %v, %v; want none, no error", slots, err)
	}
}

// testSlotsAcrossEngines: the limit holds across engines; an engine cannot release another's
// holder; Slots lists each holder with its engine.
func testSlotsAcrossEngines(t *testing.T, db Shared[SharedResourceStore]) {
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	lim := map[string]int{"houdini": 2}
	one := map[string]int{"houdini": 1}
	if !acquire(t, a, "a1", one, lim) || !acquire(t, b, "b1", one, lim) {
		t.Fatal("one unit each of a limit of 2 not granted")
	}
	if acquire(t, a, "a2", one, lim) || acquire(t, b, "b2", one, lim) {
		t.Fatal("a third unit granted across two engines")
	}
	if release(t, a, "b1") {
		t.Fatal("engine A released B's holder")
	}
	slots, err := a.Slots(context.Background())
	if err != nil || len(slots) != 2 || slots[0].Engine != "A" || slots[1].Engine != "B" {
		t.Fatalf("Slots = %+v, %v", slots, err)
	}
	if !release(t, b, "b1") || !acquire(t, a, "a2", one, lim) {
		t.Fatal("B's released unit not granted to A")
	}
}

// testSlotsOfExpiredEngine: the slots of an engine whose heartbeat is past its lease stop
// counting (another engine takes them) and are gone for good: its heartbeat afterwards does not
// bring them back; its own acquire fails with ErrLeaseLost until it beats again; its release of
// a taken holder reports false.
func testSlotsOfExpiredEngine(t *testing.T, db Shared[SharedResourceStore]) {
	ctx := context.Background()
	a, b := attachAs(t, db, "A"), attachAs(t, db, "B")
	lim := map[string]int{"gpu": 2}
	if !acquire(t, a, "a1", map[string]int{"gpu": 2}, lim) {
		t.Fatal("2 of 2 not granted to A")
	}
	if acquire(t, b, "b1", map[string]int{"gpu": 1}, lim) {
		t.Fatal("B got a unit while A's lease is live")
	}
	db.Advance(t, suiteLease-time.Second) // a second before the lease's end (real time passes on a server)
	if _, err := b.Heartbeat(ctx, store.EngineInfo{ID: "B"}, nil); err != nil {
		t.Fatal(err)
	}
	if acquire(t, b, "b1", map[string]int{"gpu": 1}, lim) {
		t.Fatal("B got a unit before the end of A's lease")
	}
	db.Advance(t, 2*time.Second)
	if _, err := b.Heartbeat(ctx, store.EngineInfo{ID: "B"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, b); got["gpu"] != 0 {
		t.Fatalf("Slots lists the units of an expired engine: %v", got)
	}
	// A, past its lease, cannot take a slot.
	ok, err := a.AcquireSlots(ctx, store.SlotRequest{ID: "a2", Amounts: map[string]int{"other": 1}, Limits: map[string]int{"other": 1}})
	if !errors.Is(err, store.ErrLeaseLost) || ok {
		t.Fatalf("AcquireSlots of an engine past its lease = %v, %v; want ErrLeaseLost", ok, err)
	}
	if !acquire(t, b, "b1", map[string]int{"gpu": 2}, lim) {
		t.Fatal("B did not get A's units once A's lease ended")
	}
	// A beats again: its old slots do not come back.
	if _, err := a.Heartbeat(ctx, store.EngineInfo{ID: "A"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := inUse(t, a); got["gpu"] != 2 {
		t.Fatalf("in use %v after A beat again; want B's 2 only", got)
	}
	if release(t, a, "a1") {
		t.Fatal("A released a holder whose slots B took over")
	}
	if acquire(t, a, "a3", map[string]int{"gpu": 1}, lim) {
		t.Fatal("A got a unit with B holding the limit")
	}
	if !release(t, b, "b1") || !acquire(t, a, "a3", map[string]int{"gpu": 1}, lim) {
		t.Fatal("A, live again, did not get a released unit")
	}
}

// BenchmarkSlots measures one acquire plus its release of one unit of a resource with a limit
// of 4 (store.ResourceSlots: what a step with `resources:` pays around its call when its unit is
// free), one pair at a time, and reports the 50th and 99th percentile of the pair in µs. s is
// ready to take slots (a shared store attached).
func BenchmarkSlots(b *testing.B, s store.ResourceSlots) {
	benchSlots(b, s, func(ctx context.Context, r store.SlotRequest) (bool, error) { return s.AcquireSlots(ctx, r) })
}

// BenchmarkQueuedSlots is BenchmarkSlots with the acquire of the shared queue
// (store.ResourceQueue.AcquireQueued, what an engine on a shared database asks), nobody waiting.
func BenchmarkQueuedSlots(b *testing.B, s store.ResourceQueue) {
	q := store.QueueEntry{Key: "r01bench", AgingEvery: 10 * time.Second}
	benchSlots(b, s, func(ctx context.Context, r store.SlotRequest) (bool, error) {
		held, _, err := s.AcquireQueued(ctx, r, q)
		return held, err
	})
}

func benchSlots(b *testing.B, s store.ResourceSlots, acquire func(context.Context, store.SlotRequest) (bool, error)) {
	ctx := context.Background()
	durs := make([]time.Duration, 0, b.N)
	r := store.SlotRequest{Amounts: map[string]int{"houdini": 1}, Limits: map[string]int{"houdini": 4}, RunID: "r01bench", Label: "per_file[3].export"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.ID = fmt.Sprintf("h%d", i)
		t := time.Now()
		ok, err := acquire(ctx, r)
		if err != nil || !ok {
			b.Fatalf("acquire = %v, %v", ok, err)
		}
		if ok, err := s.ReleaseSlots(ctx, r.ID); err != nil || !ok {
			b.Fatalf("ReleaseSlots = %v, %v", ok, err)
		}
		durs = append(durs, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(durs)
	pct := func(p float64) float64 {
		return float64(durs[min(len(durs)-1, int(p*float64(len(durs))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
