package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Unit tests of the membership on a stub clock: no database, no sleeps. The behaviour end to
// end, on PostgreSQL, is tests/go/cluster*_test.go's.

var t0 = time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)

// fakeLeaser is a store.Leaser whose answers the test sets; it records what it was asked.
type fakeLeaser struct {
	store.Leaser // methods a test does not expect panic (nil interface)

	mu        sync.Mutex
	beats     int
	beatErr   error
	onBeat    func(n int)                 // called by Heartbeat, outside mu, with the beat's number
	owned     func(ids []string) []string // nil: owns every id sent
	holders   map[string]string
	expired   []store.Run
	sweeps    int
	claimable map[string]bool
	claimed   []string
	engines   []store.EngineInfo
	detached  int
	closing   int
}

func (f *fakeLeaser) Attach(context.Context, store.EngineInfo) error { return nil }

func (f *fakeLeaser) Heartbeat(_ context.Context, _ store.EngineInfo, ids []string) ([]string, error) {
	f.mu.Lock()
	f.beats++
	if f.onBeat != nil {
		n, fn := f.beats, f.onBeat
		f.mu.Unlock()
		fn(n)
		f.mu.Lock()
	}
	defer f.mu.Unlock()
	if f.beatErr != nil {
		return nil, f.beatErr
	}
	if f.owned != nil {
		return f.owned(ids), nil
	}
	return ids, nil
}

func (f *fakeLeaser) Holder(_ context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holders[id], nil
}

func (f *fakeLeaser) Expired(context.Context, int) ([]store.Run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweeps++
	return slices.Clone(f.expired), nil
}

func (f *fakeLeaser) ClaimRun(_ context.Context, id string, _ time.Time, _ store.Interruption) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.claimable[id] {
		return false, nil
	}
	delete(f.claimable, id)
	f.claimed = append(f.claimed, id)
	return true, nil
}

func (f *fakeLeaser) Engines(context.Context) ([]store.EngineInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.engines), nil
}

func (f *fakeLeaser) Closing(context.Context) error {
	f.mu.Lock()
	f.closing++
	f.mu.Unlock()
	return nil
}

func (f *fakeLeaser) Detach(context.Context) error {
	f.mu.Lock()
	f.detached++
	f.mu.Unlock()
	return nil
}

func (f *fakeLeaser) counts() (beats, sweeps int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.beats, f.sweeps
}

// fakeRun is a Run the test controls.
type fakeRun struct {
	id        string
	ancestors []string
	done      chan struct{}

	mu        sync.Mutex
	abandoned bool
	paused    bool
	busy      bool
	held      bool
}

func newRun(id string, ancestors ...string) *fakeRun {
	return &fakeRun{id: id, ancestors: ancestors, done: make(chan struct{})}
}

func (r *fakeRun) ID() string            { return r.id }
func (r *fakeRun) Done() <-chan struct{} { return r.done }
func (r *fakeRun) Ancestors() []string   { return r.ancestors }

func (r *fakeRun) Abandon() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.abandoned {
		r.abandoned = true
		close(r.done)
	}
}

func (r *fakeRun) Paused() bool   { r.mu.Lock(); defer r.mu.Unlock(); return r.paused }
func (r *fakeRun) Hold()          { r.mu.Lock(); r.held = true; r.mu.Unlock() }
func (r *fakeRun) HostBusy() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.busy }
func (r *fakeRun) isAbandoned() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.abandoned
}

// fakeLocal is the engine side.
type fakeLocal struct {
	mu       sync.Mutex
	runs     map[string]Run
	closed   bool
	canTake  map[string]bool
	resumed  []string
	canRunOn map[string]bool
	notified int
}

func (l *fakeLocal) Executing() map[string]Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]Run{}
	for id, r := range l.runs {
		select {
		case <-r.Done():
		default:
			out[id] = r
		}
	}
	return out
}
func (l *fakeLocal) HostedTools() (tools, lanes []string) {
	return []string{"export"}, []string{"main"}
}
func (l *fakeLocal) Closed() bool                 { l.mu.Lock(); defer l.mu.Unlock(); return l.closed }
func (l *fakeLocal) CanTakeOver(r store.Run) bool { return l.canTake[r.ID] }
func (l *fakeLocal) Resume(_ context.Context, id, _ string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resumed = append(l.resumed, id)
	return nil
}
func (l *fakeLocal) CanRunOn(_ context.Context, id string, tools, _ map[string]bool) bool {
	return l.canRunOn[id] && tools["export"]
}
func (l *fakeLocal) Notify() { l.mu.Lock(); l.notified++; l.mu.Unlock() }

type fakeHost struct {
	mu       sync.Mutex
	reopened int
	held     bool
	letGo    map[string]bool
	freeCh   chan struct{}
}

func (h *fakeHost) Hold()   { h.mu.Lock(); h.held = true; h.mu.Unlock() }
func (h *fakeHost) Reopen() { h.mu.Lock(); h.reopened++; h.mu.Unlock() }
func (h *fakeHost) LetGoOf(runs map[string]bool) []<-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.letGo = runs
	return []<-chan struct{}{h.freeCh}
}

func join(t *testing.T, l *fakeLeaser, local *fakeLocal, clk *clock.Stub) *Membership {
	t.Helper()
	m, err := Join(context.Background(), Config{Leaser: l, Clock: clk, Host: &fakeHost{freeCh: make(chan struct{})},
		Info:       store.EngineInfo{ID: "me", Lease: 3 * time.Second},
		CloseGrace: 10 * time.Second, InterruptGrace: 5 * time.Second}, local)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func waitTimers(t *testing.T, clk *clock.Stub, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clk.WaitForTimers(ctx, n); err != nil {
		t.Fatalf("waiting for %d timers on the stub clock: %v", n, err)
	}
}

// The heartbeat beats every lease/3 on the engine clock, each beat followed by a sweep; a
// Kick sweeps at once and does not push the next beat back (repeated kicks, such as many tool
// registrations, must not starve the heartbeat).
func TestMembershipBeatsOnTheClockAndKicksKeepThePace(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{}
	m := join(t, l, &fakeLocal{}, clk)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	waitTimers(t, clk, 1)
	if b, s := l.counts(); b != 0 || s != 0 {
		t.Fatalf("before the first period: %d beats, %d sweeps; want none", b, s)
	}
	clk.Advance(500 * time.Millisecond)
	m.Kick()
	waitUntil(t, "the kicked sweep", func() bool { _, s := l.counts(); return s == 1 })
	waitTimers(t, clk, 1)
	clk.Advance(500 * time.Millisecond) // t0 + 1 s: the first beat is due, kick or not
	waitUntil(t, "the first beat", func() bool { b, s := l.counts(); return b == 1 && s == 2 })
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	waitUntil(t, "the second beat", func() bool { b, s := l.counts(); return b == 2 && s == 3 })
	m.Stop()
	m.Stop() // twice: nothing more
	if l.detached != 1 {
		t.Fatalf("Stop detached %d times; want once", l.detached)
	}
}

// A beat that ran late past the next one's time (a slow database) is followed by the next at
// once, as a ticker's waiting tick is: the leases and claims it renews are due.
func TestMembershipLateBeatIsFollowedAtOnce(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{}
	l.onBeat = func(n int) {
		if n == 1 {
			clk.Advance(1500 * time.Millisecond) // the first beat takes a period and a half
		}
	}
	m := join(t, l, &fakeLocal{}, clk)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	waitTimers(t, clk, 1)
	clk.Advance(time.Second)
	waitUntil(t, "the second beat, at once after the late first", func() bool { b, _ := l.counts(); return b >= 2 })
	waitTimers(t, clk, 1)
	if b, _ := l.counts(); b != 2 {
		t.Fatalf("%d beats; want 2 before the clock moves again", b)
	}
	if next, _ := clk.Next(); !next.Equal(t0.Add(3500 * time.Millisecond)) {
		t.Fatalf("the third beat is due at %s; want a period after the second (t0 + 3.5 s)", next.Sub(t0))
	}
}

// A heartbeat that did not go through for a whole lease (the process was suspended, the
// database away) abandons every run: other engines may have taken them over.
func TestMembershipAbandonsEverythingAfterAWholeLeaseUnrenewed(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{beatErr: errors.New("the database is away")}
	a, b := newRun("a"), newRun("b")
	local := &fakeLocal{runs: map[string]Run{"a": a, "b": b}}
	m := join(t, l, local, clk)
	m.Heartbeat()
	clk.Advance(3 * time.Second) // exactly a lease: not yet past it
	m.Heartbeat()
	if a.isAbandoned() || b.isAbandoned() {
		t.Fatal("a run was abandoned within its lease")
	}
	clk.Advance(time.Millisecond)
	m.Heartbeat()
	if !a.isAbandoned() || !b.isAbandoned() {
		t.Fatalf("after a lease without a renewal: abandoned a=%v b=%v; want both", a.isAbandoned(), b.isAbandoned())
	}
	if st := m.Stats(); st.Abandoned != 2 {
		t.Fatalf("Stats %+v; want Abandoned 2", st)
	}
}

// The leases are fresh up to a lease after the last renewal that went through; past it the
// engine's host hands out nothing (Fresh is its gate) until a renewal goes through, which
// reopens it.
func TestMembershipFreshUntilALeasePassesUnrenewed(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{}
	host := &fakeHost{}
	m, err := Join(context.Background(), Config{Leaser: l, Clock: clk, Host: host, Info: store.EngineInfo{ID: "me", Lease: 3 * time.Second}}, &fakeLocal{})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second)
	if !m.Fresh() {
		t.Fatal("not fresh at exactly a lease after joining")
	}
	m.Heartbeat() // renews: fresh for another lease, nothing to reopen
	clk.Advance(3*time.Second + time.Millisecond)
	if m.Fresh() {
		t.Fatal("fresh past a lease without a renewal")
	}
	if host.reopened != 0 {
		t.Fatalf("reopened %d times before a stale renewal", host.reopened)
	}
	l.beatErr = errors.New("the database is away")
	m.Heartbeat()
	if m.Fresh() || host.reopened != 0 {
		t.Fatal("a failed heartbeat made the leases fresh, or reopened the host")
	}
	l.beatErr = nil
	m.Heartbeat()
	if !m.Fresh() || host.reopened != 1 {
		t.Fatalf("after a renewal that went through: fresh %v, reopened %d; want fresh, reopened once", m.Fresh(), host.reopened)
	}
}

// A run the heartbeat did not renew is abandoned only when another engine holds it now.
func TestMembershipAbandonsRunsAnotherEngineHolds(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{owned: func([]string) []string { return []string{"mine"} }, holders: map[string]string{"taken": "other-engine"}}
	mine, taken, ended := newRun("mine"), newRun("taken"), newRun("ended")
	local := &fakeLocal{runs: map[string]Run{"mine": mine, "taken": taken, "ended": ended}}
	m := join(t, l, local, clk)
	m.Heartbeat()
	if mine.isAbandoned() || ended.isAbandoned() || !taken.isAbandoned() {
		t.Fatalf("abandoned mine=%v taken=%v ended=%v; want only taken", mine.isAbandoned(), taken.isAbandoned(), ended.isAbandoned())
	}
}

// The sweep claims the expired runs this engine can run and resumes them; a paused run is
// claimed (to interrupt its steps in flight) but not resumed; a run another engine claimed
// first is left; nothing is swept once the engine closes.
func TestMembershipSweepTakesOverWhatItCanRun(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{
		expired: []store.Run{
			{ID: "cannot", Status: run.StatusRunning},
			{ID: "can", Status: run.StatusRunning},
			{ID: "paused", Status: run.StatusPaused},
			{ID: "raced", Status: run.StatusRunning},
		},
		claimable: map[string]bool{"cannot": true, "can": true, "paused": true},
	}
	local := &fakeLocal{canTake: map[string]bool{"can": true, "raced": true}}
	m := join(t, l, local, clk)
	m.Sweep(context.Background())
	if want := []string{"can", "paused"}; !slices.Equal(l.claimed, want) {
		t.Fatalf("claimed %v; want %v", l.claimed, want)
	}
	if want := []string{"can"}; !slices.Equal(local.resumed, want) {
		t.Fatalf("resumed %v; want %v", local.resumed, want)
	}
	if st := m.Stats(); st.TakenOver != 2 || st.LastSweepErr != nil {
		t.Fatalf("Stats %+v; want TakenOver 2 and no error", st)
	}
	local.closed = true
	l.claimable["cannot"] = true
	local.canTake["cannot"] = true
	m.Sweep(context.Background())
	if len(l.claimed) != 2 {
		t.Fatalf("a closing engine swept: claimed %v", l.claimed)
	}
}

// A hand-over waits up to the close grace, on the engine clock, for host calls to be answered,
// then abandons the candidates (cancelling the call still running) and waits for the host to let
// go; a child run goes with its parent, and a paused run is not handed over.
func TestMembershipHandOverWaitsTheCloseGraceThenCuts(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{engines: []store.EngineInfo{{ID: "me", Live: true}, {ID: "other", Live: true, Tools: []string{"export"}}}}
	top, child, paused, quiet := newRun("top"), newRun("child", "top"), newRun("paused"), newRun("quiet")
	child.busy = true // the top run's host call is its child's
	paused.paused = true
	local := &fakeLocal{canRunOn: map[string]bool{"top": true, "paused": true, "quiet": true}}
	host := &fakeHost{freeCh: make(chan struct{})}
	m, err := Join(context.Background(), Config{Leaser: l, Clock: clk, Host: host,
		Info: store.EngineInfo{ID: "me", Lease: 3 * time.Second}, CloseGrace: 10 * time.Second, InterruptGrace: 5 * time.Second}, local)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan map[string]bool, 1)
	go func() { got <- m.HandOver(context.Background(), []Run{top, child, paused, quiet}) }()
	waitTimers(t, clk, 1) // settling: a poll of the host calls
	if !top.held || !child.held || !paused.held || !host.held {
		t.Fatal("the hand-over did not hold the host and every run first")
	}
	clk.Advance(9 * time.Second) // within the grace: still waiting for the busy call
	select {
	case h := <-got:
		t.Fatalf("the hand-over returned %v within the close grace", h)
	default:
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		select {
		case h := <-got:
			if !h["top"] || !h["quiet"] || len(h) != 2 {
				t.Fatalf("handed %v; want top and quiet", h)
			}
			if !top.isAbandoned() || !quiet.isAbandoned() || paused.isAbandoned() {
				t.Fatal("abandoned the wrong runs")
			}
			if !host.letGo["top"] || len(host.letGo) != 1 {
				t.Fatalf("cancelled the host calls of %v; want top's", host.letGo)
			}
			if st := m.Stats(); st.HandedOver != 2 || st.HandedOverCancelled != 1 {
				t.Fatalf("Stats %+v; want HandedOver 2, HandedOverCancelled 1", st)
			}
			return
		case <-time.After(time.Millisecond):
		}
		clk.Advance(500 * time.Millisecond) // the settle polls, then the interrupt grace (the host never lets go)
	}
	t.Fatal("the hand-over did not return within the close grace and the interrupt grace")
}

// With no other live engine that is not closing, nothing is handed over (the caller stops the
// runs: interrupted, as on a database of one's own).
func TestMembershipHandOverNeedsAnotherLiveEngine(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &fakeLeaser{engines: []store.EngineInfo{{ID: "me", Live: true}, {ID: "dead", Tools: []string{"export"}},
		{ID: "closing", Live: true, Closing: true, Tools: []string{"export"}}}}
	r := newRun("r")
	m := join(t, l, &fakeLocal{canRunOn: map[string]bool{"r": true}}, clk)
	if h := m.HandOver(context.Background(), []Run{r}); h != nil || r.isAbandoned() {
		t.Fatalf("handed %v to no live engine", h)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}
