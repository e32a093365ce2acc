package engine_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// The next fire an engine reports for an interval schedule is its last fire + every, as its
// scheduler fires it: also on an engine that does not run the scheduler, beside the one that did
// (what `dcc-flow schedules` shows), not now + every.
func TestSchedulesNextFireIsLastFirePlusEvery(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "flow.db")
	t0 := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
	sched := flowtype.ScheduleSpec{ID: "every15", Workflow: "tick", Enabled: true,
		Trigger: flowtype.ScheduleTrigger{Kind: "interval", Every: "15m"}}
	open := func(clk *engine.StubClock, readOnly bool) *engine.Engine {
		t.Helper()
		e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1, DB: db, ReadOnly: readOnly}, engine.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(mustSpec(t, "name: tick\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")); err != nil && !readOnly {
			t.Fatal(err)
		}
		if err := e.Schedule(sched); err != nil {
			t.Fatal(err)
		}
		return e
	}

	// The serving engine fires at t0 + 15m.
	clk := engine.NewStubClock(t0)
	server := open(clk, false)
	defer server.Close(ctx)
	if err := server.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	// Two timers wait on the stub clock once the schedule's loop waits: its own and the control
	// poller's (engine/internal/cluster: an owned file database polls for control requests on
	// the engine clock, and its timer stays pending until the clock moves).
	waitFor(t, "the schedule's loop to wait on the clock", func() bool { return clk.Pending() >= 2 })
	clk.Set(t0.Add(15 * time.Minute))
	waitFor(t, "the fire at t0 + 15m", func() bool {
		fires, err := server.ScheduleFires(ctx, "every15", 0)
		return err == nil && len(fires) == 1
	})
	waitFor(t, "the loop to plan the next fire", func() bool { return clk.Pending() >= 2 }) // and the poller's
	if next, _ := server.NextFire("every15"); !next.Equal(t0.Add(30 * time.Minute)) {
		t.Fatalf("the server's next fire %s; want %s", next, t0.Add(30*time.Minute))
	}

	// Five minutes later, an engine beside it that does not run the scheduler.
	beside := open(engine.NewStubClock(t0.Add(20*time.Minute)), true)
	defer beside.Close(ctx)
	infos := beside.Schedules()
	if len(infos) != 1 || !infos[0].NextFire.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("beside the server: %+v; want next fire %s (the last fire + 15m)", infos, t0.Add(30*time.Minute))
	}
	if next, ok := beside.NextFire("every15"); !ok || !next.Equal(t0.Add(30*time.Minute)) {
		t.Fatalf("NextFire beside the server: %s %v; want %s", next, ok, t0.Add(30*time.Minute))
	}
}

// waitFor polls cond until it holds (the scheduler's loop runs on its own goroutine); what
// names it in the failure.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}
