package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// fakeStarter is a Starter for tests: it records requests and hands out run ids.
type fakeStarter struct {
	mu          sync.Mutex
	reqs        []StartRequest
	active      map[string]int
	activeCalls int
	startErr    error
	activeErr   error
	// block, when set, makes Start wait until it is closed or ctx ends; causes receives
	// context.Cause of a cancelled Start.
	block   chan struct{}
	entered chan struct{}
	causes  chan error
}

func newFakeStarter() *fakeStarter { return &fakeStarter{active: map[string]int{}} }

func (f *fakeStarter) Start(ctx context.Context, req StartRequest) (string, error) {
	f.mu.Lock()
	block, causes, entered := f.block, f.causes, f.entered
	f.mu.Unlock()
	if block != nil {
		if entered != nil {
			entered <- struct{}{}
		}
		select {
		case <-block:
		case <-ctx.Done():
			if causes != nil {
				causes <- context.Cause(ctx)
			}
			return "", context.Cause(ctx)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return "", f.startErr
	}
	f.reqs = append(f.reqs, req)
	return fmt.Sprintf("run-%d", len(f.reqs)), nil
}

func (f *fakeStarter) Active(_ context.Context, id string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.activeCalls++
	return f.active[id], f.activeErr
}

func (f *fakeStarter) setActive(id string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active[id] = n
}

func (f *fakeStarter) requests() []StartRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]StartRequest(nil), f.reqs...)
}

type testBundle struct {
	clock   *clock.Stub
	starter *fakeStarter
	fires   *MemFireLog
	sched   *Scheduler
}

var t0 = time.Date(2026, 1, 1, 0, 0, 3, 0, time.UTC)

func setup(t *testing.T, start time.Time, cfg Config, opts ...Option) *testBundle {
	t.Helper()
	b := &testBundle{clock: clock.NewStub(start), starter: newFakeStarter(), fires: NewMemFireLog(0)}
	opts = append([]Option{WithClock(b.clock)}, opts...)
	s, err := New(cfg, b.starter, b.fires, opts...)
	if err != nil {
		t.Fatal(err)
	}
	b.sched = s
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return b
}

// waitCtx bounds a wait for a goroutine handoff; it never elapses in a passing test.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv receives from ch, failing the test if nothing comes (a hang, not a timing assumption).
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-waitCtx(t).Done():
		t.Fatal("nothing received")
	}
	var zero T
	return zero
}

func (b *testBundle) start(t *testing.T) {
	t.Helper()
	if err := b.sched.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// waitArmed waits until n loops wait on the clock.
func (b *testBundle) waitArmed(t *testing.T, n int) {
	t.Helper()
	if err := b.clock.WaitForTimers(waitCtx(t), n); err != nil {
		t.Fatalf("waiting for %d armed timers (%d pending): %v", n, b.clock.Pending(), err)
	}
}

// fireNext moves the clock to the planned next fire of the only running schedule id and
// waits until its loop has handled the fire and armed again. It returns the planned time.
func (b *testBundle) fireNext(t *testing.T, id string) time.Time {
	t.Helper()
	b.waitArmed(t, 1)
	at, ok := b.sched.NextFire(id)
	if !ok {
		t.Fatalf("schedule %s has no next fire", id)
	}
	b.clock.Set(at)
	b.waitArmed(t, 1)
	return at
}

func (b *testBundle) history(t *testing.T, id string) []Fire {
	t.Helper()
	fs, err := b.fires.Fires(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Oldest first reads better in tests.
	for i, j := 0, len(fs)-1; i < j; i, j = i+1, j-1 {
		fs[i], fs[j] = fs[j], fs[i]
	}
	return fs
}

func TestSchedulerCronFiresWithSeconds(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("tick", "wf", Trigger{Kind: KindCron, Expression: "*/10 * * * * *"})
	sp.Inputs = map[string]any{"sid": "{{trigger.schedule_id}}", "at": "{{trigger.fired_at}}", "label": "tick {{trigger.workflow}}", "n": 3.0}
	b := setup(t, t0, Config{Schedules: []Spec{sp}})
	b.start(t)

	// The loop waits in steps of at most maxSleep; the first wake-up is 7 s later, the fire.
	b.waitArmed(t, 1)
	if due, _ := b.clock.Next(); !due.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("first timer due %s", due)
	}
	var got []time.Time
	for range 3 {
		got = append(got, b.fireNext(t, "tick"))
	}
	want := []time.Time{t0.Add(7 * time.Second), t0.Add(17 * time.Second), t0.Add(27 * time.Second)}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("fired at %v; want %v", got, want)
	}
	reqs := b.starter.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d runs started; want 3", len(reqs))
	}
	r := reqs[0]
	wantInputs := map[string]any{"sid": "tick", "at": "2026-01-01T00:00:10Z", "label": "tick wf", "n": 3.0}
	if !reflect.DeepEqual(r.Inputs, wantInputs) || r.Origin != OriginSchedule || r.Workflow != "wf" || r.ScheduleID != "tick" {
		t.Errorf("request %+v", r)
	}
	wantTrig := map[string]any{"kind": "cron", "schedule_id": "tick", "workflow": "wf", "fired_at": "2026-01-01T00:00:10Z",
		"scheduled_at": "2026-01-01T00:00:10Z", "catchup": false}
	if !reflect.DeepEqual(r.Trigger, wantTrig) {
		t.Errorf("trigger %v", r.Trigger)
	}
	h := b.history(t, "tick")
	if len(h) != 3 || h[2].Kind != FireFired || h[2].RunID != "run-3" || !h[2].ScheduledAt.Equal(want[2]) || !h[2].FiredAt.Equal(want[2]) {
		t.Errorf("history %+v", h)
	}
}

// TestSchedulerDSTDailyLoop runs daily 02:30 and 01:30 New York schedules through both 2026
// DST changes on the stub clock: each fires exactly once per local day.
func TestSchedulerDSTDailyLoop(t *testing.T) {
	t.Parallel()
	ny := mustLoc(t, "America/New_York")
	tests := []struct {
		name, expr string
		from       time.Time
		want       []string
	}{
		{"spring 02:30", "0 30 2 * * *", time.Date(2026, 3, 6, 12, 0, 0, 0, ny),
			[]string{"2026-03-07 02:30 EST", "2026-03-08 03:00 EDT", "2026-03-09 02:30 EDT", "2026-03-10 02:30 EDT"}},
		{"spring 01:30", "0 30 1 * * *", time.Date(2026, 3, 6, 12, 0, 0, 0, ny),
			[]string{"2026-03-07 01:30 EST", "2026-03-08 01:30 EST", "2026-03-09 01:30 EDT", "2026-03-10 01:30 EDT"}},
		{"autumn 01:30", "0 30 1 * * *", time.Date(2026, 10, 30, 12, 0, 0, 0, ny),
			[]string{"2026-10-31 01:30 EDT", "2026-11-01 01:30 EDT", "2026-11-02 01:30 EST", "2026-11-03 01:30 EST"}},
		{"autumn 02:30", "0 30 2 * * *", time.Date(2026, 10, 30, 12, 0, 0, 0, ny),
			[]string{"2026-10-31 02:30 EDT", "2026-11-01 02:30 EST", "2026-11-02 02:30 EST", "2026-11-03 02:30 EST"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sp := DefaultSpec("daily", "wf", Trigger{Kind: KindCron, Expression: tc.expr, Timezone: "America/New_York"})
			b := setup(t, tc.from, Config{Schedules: []Spec{sp}})
			b.start(t)
			var got []string
			for range tc.want {
				got = append(got, b.fireNext(t, "daily").In(ny).Format("2006-01-02 15:04 MST"))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("fired at %q\nwant      %q", got, tc.want)
			}
			if n := len(b.history(t, "daily")); n != len(tc.want) {
				t.Errorf("%d fires recorded", n)
			}
		})
	}
}

func TestSchedulerJitter(t *testing.T) {
	t.Parallel()
	t.Run("bounds", func(t *testing.T) {
		t.Parallel()
		for _, j := range []int{1, 120} {
			s := &Scheduler{rnd: rand.New(rand.NewPCG(1, 2))}
			e := &entry{spec: DefaultSpec("j", "w", Trigger{Kind: KindCron, Expression: "@daily", JitterSecs: j})}
			limit := time.Duration(j) * time.Second
			lo, hi := limit, time.Duration(0)
			for range 10000 {
				d := s.jitter(e)
				if d < 0 || d > limit {
					t.Fatalf("jitter %v outside [0, %v]", d, limit)
				}
				lo, hi = min(lo, d), max(hi, d)
			}
			if lo > limit/20 || hi < limit-limit/20 {
				t.Errorf("jitter_secs %d: samples span only [%v, %v]; want nearly [0, %v]", j, lo, hi, limit)
			}
		}
		none := &Scheduler{}
		if d := none.jitter(&entry{spec: DefaultSpec("i", "w", Trigger{Kind: KindInterval, Every: "1m"})}); d != 0 {
			t.Errorf("interval jitter %v", d)
		}
	})
	t.Run("loop", func(t *testing.T) {
		t.Parallel()
		sp := DefaultSpec("j", "wf", Trigger{Kind: KindCron, Expression: "0 * * * * *", JitterSecs: 30})
		b := setup(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Config{Schedules: []Spec{sp}}, WithRand(rand.New(rand.NewPCG(7, 7))))
		b.start(t)
		distinct := map[time.Duration]bool{}
		for range 20 {
			b.fireNext(t, "j")
		}
		for i, f := range b.history(t, "j") {
			nominal := time.Date(2026, 1, 1, 0, i, 0, 0, time.UTC) // the first is due at the start time itself
			d := f.FiredAt.Sub(f.ScheduledAt)
			if !f.ScheduledAt.Equal(nominal) || d < 0 || d > 30*time.Second {
				t.Errorf("fire %d: scheduled %s, fired %s; want scheduled %s and a delay in [0, 30s]", i, f.ScheduledAt, f.FiredAt, nominal)
			}
			distinct[d] = true
		}
		if len(distinct) < 10 {
			t.Errorf("only %d distinct delays in 20 fires", len(distinct))
		}
	})
}

func TestSchedulerInterval(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("every", "wf", Trigger{Kind: KindInterval, Every: "15m"})
	b := setup(t, t0, Config{Schedules: []Spec{sp}})
	b.start(t)
	for i := 1; i <= 3; i++ {
		if at := b.fireNext(t, "every"); !at.Equal(t0.Add(time.Duration(i) * 15 * time.Minute)) {
			t.Fatalf("fire %d at %s", i, at)
		}
	}
	if err := b.sched.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Restarted 10 minutes later, the interval keeps its phase from the last fire.
	b.clock.Advance(10 * time.Minute)
	b.start(t)
	if at := b.fireNext(t, "every"); !at.Equal(t0.Add(60 * time.Minute)) {
		t.Errorf("after restart fired at %s; want %s", at, t0.Add(60*time.Minute))
	}
	// A fire handled late drops the fires that fell due meanwhile, on the same phase.
	b.waitArmed(t, 1)
	b.clock.Set(t0.Add(75*time.Minute + 40*time.Minute))
	b.waitArmed(t, 1)
	if at, _ := b.sched.NextFire("every"); !at.Equal(t0.Add(120 * time.Minute)) {
		t.Errorf("next after a late fire %s; want %s", at, t0.Add(120*time.Minute))
	}
}

func TestSchedulerOverlapSkipped(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		max       int
		active    []int // Active's answer at each fire
		wantKinds []FireKind
		wantCalls int // Active calls
	}{
		{"max 1", 1, []int{0, 1, 1, 0}, []FireKind{FireFired, FireSkipped, FireSkipped, FireFired}, 4},
		{"max 2", 2, []int{1, 2, 5, 1}, []FireKind{FireFired, FireSkipped, FireSkipped, FireFired}, 4},
		{"unlimited", 0, []int{9, 9, 9, 9}, []FireKind{FireFired, FireFired, FireFired, FireFired}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sp := DefaultSpec("ov", "wf", Trigger{Kind: KindCron, Expression: "0 * * * * *"})
			sp.MaxConcurrent = tc.max
			var obsMu sync.Mutex
			var observed []FireKind // WithFireObserver sees every fire, skipped ones too
			b := setup(t, t0, Config{Schedules: []Spec{sp}}, WithFireObserver(func(f Fire) {
				obsMu.Lock()
				observed = append(observed, f.Kind)
				obsMu.Unlock()
			}))
			b.start(t)
			for _, n := range tc.active {
				b.starter.setActive("ov", n)
				b.fireNext(t, "ov")
			}
			var kinds []FireKind
			for _, f := range b.history(t, "ov") {
				kinds = append(kinds, f.Kind)
				if f.Kind == FireSkipped && (f.Reason != ReasonMaxConcurrent || f.RunID != "") {
					t.Errorf("skipped fire %+v", f)
				}
			}
			if !reflect.DeepEqual(kinds, tc.wantKinds) {
				t.Errorf("kinds %v; want %v", kinds, tc.wantKinds)
			}
			obsMu.Lock()
			if !reflect.DeepEqual(observed, tc.wantKinds) {
				t.Errorf("observed kinds %v; want %v", observed, tc.wantKinds)
			}
			obsMu.Unlock()
			started := 0
			for _, k := range tc.wantKinds {
				if k == FireFired {
					started++
				}
			}
			if n := len(b.starter.requests()); n != started {
				t.Errorf("%d runs started; want %d", n, started)
			}
			b.starter.mu.Lock()
			calls := b.starter.activeCalls
			b.starter.mu.Unlock()
			if calls != tc.wantCalls {
				t.Errorf("%d Active calls; want %d", calls, tc.wantCalls)
			}
		})
	}
}

func TestSchedulerFailuresRecorded(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("f", "wf", Trigger{Kind: KindInterval, Every: "1m"})
	b := setup(t, t0, Config{Schedules: []Spec{sp}})
	b.starter.startErr = errors.New("engine closed")
	b.start(t)
	b.fireNext(t, "f")
	b.starter.mu.Lock()
	b.starter.startErr, b.starter.activeErr = nil, errors.New("store down")
	b.starter.mu.Unlock()
	b.fireNext(t, "f")
	h := b.history(t, "f")
	if len(h) != 2 || h[0].Kind != FireFailed || h[0].Reason != ReasonStartFailed || h[0].Message != "engine closed" ||
		h[1].Kind != FireFailed || h[1].Reason != ReasonStatusFailed {
		t.Errorf("history %+v", h)
	}
}

func TestSchedulerCatchup(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 10, 12, 0, 0, 0, time.UTC)
	daily := Trigger{Kind: KindCron, Expression: "0 0 3 * * *"}
	tests := []struct {
		name        string
		trig        Trigger
		catchup     bool
		last        time.Time // zero: no history
		wantMissed  time.Time // zero: no catch-up fire
		wantNextRun time.Time
	}{
		{"missed two days", daily, true, time.Date(2026, 5, 8, 3, 0, 0, 0, time.UTC),
			time.Date(2026, 5, 10, 3, 0, 0, 0, time.UTC), time.Date(2026, 5, 11, 3, 0, 0, 0, time.UTC)},
		{"nothing missed", daily, true, time.Date(2026, 5, 10, 3, 0, 0, 0, time.UTC),
			time.Time{}, time.Date(2026, 5, 11, 3, 0, 0, 0, time.UTC)},
		{"catchup off", daily, false, time.Date(2026, 5, 8, 3, 0, 0, 0, time.UTC),
			time.Time{}, time.Date(2026, 5, 11, 3, 0, 0, 0, time.UTC)},
		{"no history", daily, true, time.Time{},
			time.Time{}, time.Date(2026, 5, 11, 3, 0, 0, 0, time.UTC)},
		{"interval", Trigger{Kind: KindInterval, Every: "1h"}, true, now.Add(-3*time.Hour - 10*time.Minute),
			now.Add(-10 * time.Minute), now.Add(50 * time.Minute)},
		{"interval nothing missed", Trigger{Kind: KindInterval, Every: "1h"}, true, now.Add(-10 * time.Minute),
			time.Time{}, now.Add(50 * time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sp := DefaultSpec("c", "wf", tc.trig)
			sp.Catchup = tc.catchup
			sp.Inputs = map[string]any{"late": "{{trigger.catchup}}"}
			b := setup(t, now, Config{Schedules: []Spec{sp}})
			if !tc.last.IsZero() {
				_ = b.fires.RecordFire(context.Background(), Fire{ScheduleID: "c", Kind: FireFired, RunID: "old", Origin: OriginSchedule, ScheduledAt: tc.last, FiredAt: tc.last})
			}
			b.start(t)
			b.waitArmed(t, 1) // the catch-up fire, if any, happens before the loop arms
			h := b.history(t, "c")
			reqs := b.starter.requests()
			if tc.wantMissed.IsZero() {
				if len(reqs) != 0 {
					t.Errorf("unexpected catch-up fire: %+v", reqs)
				}
			} else {
				last := h[len(h)-1]
				if len(reqs) != 1 || last.Reason != ReasonCatchup || !last.ScheduledAt.Equal(tc.wantMissed) || !last.FiredAt.Equal(now) {
					t.Fatalf("catch-up: requests %+v, last fire %+v; want one fire for %s", reqs, last, tc.wantMissed)
				}
				if reqs[0].Inputs["late"] != true || reqs[0].Trigger["catchup"] != true {
					t.Errorf("catch-up trigger %v", reqs[0].Trigger)
				}
			}
			if next, _ := b.sched.NextFire("c"); !next.Equal(tc.wantNextRun) {
				t.Errorf("next fire %s; want %s", next, tc.wantNextRun)
			}
		})
	}
}

func TestSchedulerStopNoLeak(t *testing.T) {
	t.Parallel()
	var specs []Spec
	for i := range 20 {
		specs = append(specs, DefaultSpec(fmt.Sprintf("s%d", i), "wf", Trigger{Kind: KindInterval, Every: "1m"}))
	}
	specs = append(specs, DefaultSpec("hook", "wf", Trigger{Kind: KindWebhook, Path: "/h"}))
	b := setup(t, t0, Config{Schedules: specs})
	for range 3 { // start and stop repeatedly
		b.start(t)
		b.waitArmed(t, 20)
		if n := b.sched.loops.Load(); n != 20 {
			t.Fatalf("%d loops running; want 20", n)
		}
		if err := b.sched.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := b.clock.Pending(); n != 0 {
			t.Fatalf("%d timers still pending after Stop", n)
		}
		for _, in := range b.sched.Schedules() {
			if !in.NextFire.IsZero() && in.Spec.Trigger.Kind == KindWebhook {
				t.Errorf("webhook %s has a next fire", in.Spec.ID)
			}
		}
	}
	if err := b.sched.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	// Stop returned after every loop goroutine finished.
	if n := b.sched.loops.Load(); n != 0 {
		t.Errorf("%d loop goroutines still running after Stop", n)
	}
}

func TestSchedulerStopCancelsStart(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("slow", "wf", Trigger{Kind: KindInterval, Every: "1m"})
	b := setup(t, t0, Config{Schedules: []Spec{sp}})
	b.starter.block, b.starter.causes, b.starter.entered = make(chan struct{}), make(chan error, 1), make(chan struct{}, 1)
	b.start(t)
	b.waitArmed(t, 1)
	at, _ := b.sched.NextFire("slow")
	b.clock.Set(at)
	recv(t, b.starter.entered) // the loop now blocks in Start
	if err := b.sched.Stop(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if cause := recv(t, b.starter.causes); !errors.Is(cause, ErrStopped) {
		t.Errorf("Start saw cause %v; want ErrStopped", cause)
	}
	if h := b.history(t, "slow"); len(h) != 1 || h[0].Kind != FireFailed {
		t.Errorf("history %+v", h)
	}
}

// claimEvery is a SlotClaimer on which this engine wins every slot.
type claimEvery struct{}

func (claimEvery) ClaimSlot(context.Context, string, time.Time) (bool, error) { return true, nil }

// On a shared database a fire that claimed its slot is that slot's only fire on every engine:
// Stop does not cancel its start but waits for it (Engine.Close stops the scheduler so; the
// start cancelled by it failed and the slot had no run anywhere).
func TestSchedulerStopLetsAClaimedFireStart(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("slow", "wf", Trigger{Kind: KindInterval, Every: "1m"})
	b := setup(t, t0, Config{Schedules: []Spec{sp}}, WithSlotClaimer(claimEvery{}))
	b.starter.block, b.starter.causes, b.starter.entered = make(chan struct{}), make(chan error, 1), make(chan struct{}, 1)
	b.start(t)
	b.waitArmed(t, 1)
	at, _ := b.sched.NextFire("slow")
	b.clock.Set(at)
	recv(t, b.starter.entered) // the loop now blocks in Start, its slot claimed
	stopped := make(chan error, 1)
	go func() { stopped <- b.sched.Stop(waitCtx(t)) }()
	for b.sched.Started() { // Stop has cancelled what it cancels once this is false
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while the claimed fire's start was under way: it was cancelled", err)
	case cause := <-b.starter.causes:
		t.Fatalf("the claimed fire's start was cancelled: %v", cause)
	case <-time.After(50 * time.Millisecond): // a cancelled start would have told by now; not a pass condition alone
	}
	close(b.starter.block)
	if err := recv(t, stopped); err != nil {
		t.Fatal(err)
	}
	if h := b.history(t, "slow"); len(h) != 1 || h[0].Kind != FireFired || h[0].RunID == "" {
		t.Errorf("history %+v; want the slot's fire fired", h)
	}
}

func TestSchedulerStopTimeout(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("stuck", "wf", Trigger{Kind: KindInterval, Every: "1m"})
	clk := clock.NewStub(t0)
	release := make(chan struct{})
	st := &stuckStarter{release: release, entered: make(chan struct{})}
	s, err := New(Config{Schedules: []Spec{sp}}, st, nil, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := clk.WaitForTimers(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	recv(t, st.entered)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Stop(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Stop with a starter ignoring cancellation = %v; want context.Canceled", err)
	}
	close(release)
	if err := s.Stop(waitCtx(t)); err != nil { // already stopped: nothing to wait for
		t.Error(err)
	}
}

// stuckStarter ignores cancellation until released.
type stuckStarter struct {
	release, entered chan struct{}
	once             sync.Once
}

func (s *stuckStarter) Start(context.Context, StartRequest) (string, error) {
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return "r", nil
}
func (s *stuckStarter) Active(context.Context, string) (int, error) { return 0, nil }

func TestSchedulerStartContextEnds(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("c", "wf", Trigger{Kind: KindInterval, Every: "1m"})
	b := setup(t, t0, Config{Schedules: []Spec{sp}})
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.sched.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.sched.Start(ctx); run.CodeOf(err) != run.CodeInvalidState {
		t.Errorf("second Start = %v; want invalid_state", err)
	}
	b.waitArmed(t, 1)
	cancel()
	if err := b.sched.Stop(waitCtx(t)); err != nil {
		t.Fatal(err)
	}
	if b.clock.Pending() != 0 {
		t.Error("loop still armed")
	}
}

func TestSchedulerScheduleUnschedule(t *testing.T) {
	t.Parallel()
	workflows := func(n string) bool { return n == "wf" }
	b := setup(t, t0, Config{Workflows: workflows, Schedules: []Spec{DefaultSpec("hook", "wf", Trigger{Kind: KindWebhook, Path: "/h"})}})
	b.start(t)

	if err := b.sched.Schedule(DefaultSpec("a", "wf", Trigger{Kind: KindInterval, Every: "1m"})); err != nil {
		t.Fatal(err)
	}
	b.waitArmed(t, 1)
	if at, ok := b.sched.NextFire("a"); !ok || !at.Equal(t0.Add(time.Minute)) {
		t.Errorf("NextFire(a) = %s, %v", at, ok)
	}
	// Replacing a running schedule stops its loop and starts the new one.
	if err := b.sched.Schedule(DefaultSpec("a", "wf", Trigger{Kind: KindInterval, Every: "5m"})); err != nil {
		t.Fatal(err)
	}
	b.waitArmed(t, 1)
	if n := b.clock.Pending(); n != 1 {
		t.Errorf("%d timers; want 1", n)
	}
	if at, _ := b.sched.NextFire("a"); !at.Equal(t0.Add(5 * time.Minute)) {
		t.Errorf("NextFire(a) after replace = %s", at)
	}
	disabled := DefaultSpec("off", "wf", Trigger{Kind: KindCron, Expression: "@daily"})
	disabled.Enabled = false
	if err := b.sched.Schedule(disabled); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.sched.NextFire("off"); ok {
		t.Error("a disabled schedule has a next fire")
	}
	if _, ok := b.sched.NextFire("hook"); ok {
		t.Error("a webhook has a next fire")
	}
	if _, ok := b.sched.NextFire("nope"); ok {
		t.Error("an unknown schedule has a next fire")
	}

	var ids []string
	for _, in := range b.sched.Schedules() {
		ids = append(ids, in.Spec.ID)
	}
	if !reflect.DeepEqual(ids, []string{"a", "hook", "off"}) {
		t.Errorf("Schedules() ids %v", ids)
	}

	// Invalid specs are refused with every problem.
	err := b.sched.Schedule(DefaultSpec("b", "other", Trigger{Kind: KindWebhook, Path: "/h"}))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 2 || ve.Problems[0].Code != CodeUnknownWorkflow || ve.Problems[1].Code != CodeDuplicateWebhookPath {
		t.Errorf("Schedule(bad) = %v", err)
	}
	// The same path on the same id is a replacement, not a duplicate.
	if err := b.sched.Schedule(DefaultSpec("hook", "wf", Trigger{Kind: KindWebhook, Path: "/h"})); err != nil {
		t.Errorf("replacing a webhook: %v", err)
	}

	if err := b.sched.Unschedule("a"); err != nil {
		t.Fatal(err)
	}
	if n := b.clock.Pending(); n != 0 {
		t.Errorf("%d timers after Unschedule", n)
	}
	if err := b.sched.Unschedule("a"); run.CodeOf(err) != run.CodeNotFound {
		t.Errorf("Unschedule twice = %v; want not_found", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	st := newFakeStarter()
	tests := []struct {
		name string
		cfg  Config
		st   Starter
		code string
	}{
		{"nil starter", Config{}, nil, run.CodeInvalidRequest},
		{"negative body limit", Config{MaxBodyBytes: -1}, st, run.CodeInvalidRequest},
		{"negative dedup size", Config{DedupSize: -1}, st, run.CodeInvalidRequest},
		{"negative dedup ttl", Config{DedupTTL: -time.Second}, st, run.CodeInvalidRequest},
		{"invalid schedules", Config{Schedules: []Spec{
			DefaultSpec("a", "w", Trigger{Kind: KindWebhook, Path: "/x"}),
			DefaultSpec("a", "w", Trigger{Kind: KindWebhook, Path: "/x"}),
		}}, st, CodeValidationFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := New(tc.cfg, tc.st, nil); run.CodeOf(err) != tc.code {
				t.Errorf("New = %v; want code %s", err, tc.code)
			}
		})
	}
}

// Registering n webhook schedules one by one costs the same per schedule at 100, 1,000 and
// 10,000 (each call rebuilt every route and compared every path: quadratic).
func BenchmarkScheduleWebhooks(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				s, err := New(Config{}, newFakeStarter(), nil)
				if err != nil {
					b.Fatal(err)
				}
				for i := range n {
					sp := DefaultSpec(fmt.Sprintf("hook%d", i), "wf", Trigger{Kind: KindWebhook, Path: fmt.Sprintf("/webhooks/h%d", i)})
					if err := s.Schedule(sp); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1000, "µs/schedule")
		})
	}
}

// Replacing and removing webhook schedules moves their routes and frees their paths.
func TestWebhookRoutesFollowScheduleChanges(t *testing.T) {
	t.Parallel()
	b := setup(t, t0, Config{})
	s := b.sched
	routed := func(path string) string {
		v, _ := s.routes.Load(path)
		if e, _ := v.(*entry); e != nil {
			return e.spec.ID
		}
		return ""
	}
	hook := func(id, path string, enabled bool) Spec {
		sp := DefaultSpec(id, "wf", Trigger{Kind: KindWebhook, Path: path})
		sp.Enabled = enabled
		return sp
	}
	if err := s.Schedule(hook("a", "/a", true)); err != nil {
		t.Fatal(err)
	}
	if err := s.Schedule(hook("b", "/a", true)); err == nil {
		t.Fatal("a second schedule took a used path")
	}
	if err := s.Schedule(hook("a", "/a2", true)); err != nil { // a moves
		t.Fatal(err)
	}
	if routed("/a") != "" || routed("/a2") != "a" {
		t.Fatalf("after the move: /a → %q, /a2 → %q", routed("/a"), routed("/a2"))
	}
	if err := s.Schedule(hook("b", "/a", false)); err != nil { // the freed path, disabled
		t.Fatal(err)
	}
	if routed("/a") != "" {
		t.Fatal("a disabled schedule is routed")
	}
	if err := s.Schedule(hook("c", "/a", true)); err == nil {
		t.Fatal("a disabled schedule's path was given to another")
	}
	if err := s.Unschedule("a"); err != nil {
		t.Fatal(err)
	}
	if routed("/a2") != "" {
		t.Fatal("a removed schedule is still routed")
	}
	if err := s.Schedule(hook("c", "/a2", true)); err != nil || routed("/a2") != "c" {
		t.Fatalf("the removed schedule's path: %v, routed to %q", err, routed("/a2"))
	}
}

// SetEnabled turns a schedule off (listed, no next fire, no fire) and on again (it fires on its
// interval from then); an unknown id is not_found.
func TestSchedulerSetEnabled(t *testing.T) {
	t.Parallel()
	sp := DefaultSpec("every", "wf", Trigger{Kind: KindInterval, Every: "15m"})
	b := setup(t, t0, Config{Schedules: []Spec{sp}})
	b.start(t)
	b.waitArmed(t, 1)
	if err := b.sched.SetEnabled("every", false); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.sched.NextFire("every"); ok {
		t.Error("a disabled schedule has a next fire")
	}
	if got := b.sched.Schedules(); len(got) != 1 || got[0].Spec.Enabled {
		t.Fatalf("schedules after disable: %+v", got)
	}
	b.clock.Advance(time.Hour)
	if n := len(b.starter.requests()); n != 0 {
		t.Fatalf("a disabled schedule started %d runs", n)
	}
	if err := b.sched.SetEnabled("every", false); err != nil {
		t.Errorf("disabling again: %v", err)
	}
	if err := b.sched.SetEnabled("every", true); err != nil {
		t.Fatal(err)
	}
	if at := b.fireNext(t, "every"); at.IsZero() {
		t.Error("the enabled schedule did not fire")
	}
	if err := b.sched.SetEnabled("nope", true); run.CodeOf(err) != run.CodeNotFound {
		t.Errorf("unknown id: %v, want not_found", err)
	}
}

// TestNextFireFromLastFire: an interval's next fire is its last fire + every, whether the
// scheduler runs or not, and a stopped scheduler reports the time its loop then plans.
func TestNextFireFromLastFire(t *testing.T) {
	t.Parallel()
	every := Trigger{Kind: KindInterval, Every: "15m"}
	tests := []struct {
		name    string
		catchup bool
		last    time.Duration // before t0; 0: no fire recorded
		want    time.Time     // NextFire while stopped
		wantRun time.Time     // NextFire once the loop has planned
	}{
		{"no fire yet", false, 0, t0.Add(15 * time.Minute), t0.Add(15 * time.Minute)},
		{"fired 5m ago", false, 5 * time.Minute, t0.Add(10 * time.Minute), t0.Add(10 * time.Minute)},
		{"fired 40m ago, no catch-up", false, 40 * time.Minute, t0.Add(5 * time.Minute), t0.Add(5 * time.Minute)},
		// The loop fires the missed fire (t0-10m) at once, then plans on its phase.
		{"fired 40m ago, catch-up", true, 40 * time.Minute, t0, t0.Add(5 * time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sp := DefaultSpec("every", "wf", every)
			sp.Catchup = tc.catchup
			b := setup(t, t0, Config{Schedules: []Spec{sp}})
			if tc.last > 0 {
				at := t0.Add(-tc.last)
				if err := b.fires.RecordFire(context.Background(), Fire{ScheduleID: "every", Kind: FireFired, RunID: "old", Origin: OriginSchedule, ScheduledAt: at, FiredAt: at}); err != nil {
					t.Fatal(err)
				}
			}
			if got, ok := b.sched.NextFire("every"); !ok || !got.Equal(tc.want) {
				t.Errorf("stopped: NextFire %s, %v; want %s", got, ok, tc.want)
			}
			if infos := b.sched.Schedules(); len(infos) != 1 || !infos[0].NextFire.Equal(tc.want) {
				t.Errorf("stopped: Schedules %+v; want next fire %s", infos, tc.want)
			}
			b.start(t)
			b.waitArmed(t, 1)
			if got, _ := b.sched.NextFire("every"); !got.Equal(tc.wantRun) {
				t.Errorf("started: NextFire %s; want %s", got, tc.wantRun)
			}
			// And it fires then.
			if at := b.fireNext(t, "every"); !at.Equal(tc.wantRun) {
				t.Errorf("fired at %s; want %s", at, tc.wantRun)
			}
			h := b.history(t, "every")
			if got := h[len(h)-1].ScheduledAt; !got.Equal(tc.wantRun) {
				t.Errorf("recorded fire scheduled at %s; want %s", got, tc.wantRun)
			}
		})
	}
}
