package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// slotHoldStore is a memcluster store with a fire log (as PostgreSQL's, which claims slots)
// whose first ClaimSlot, once it claimed the slot, tells claimed and waits for release before
// it returns: a fire held between its claim and its run.
type slotHoldStore struct {
	*memcluster.Store
	*schedule.MemFireLog
	once             sync.Once
	claimed, release chan struct{}
}

func (s *slotHoldStore) ClaimSlot(ctx context.Context, scheduleID string, slot time.Time) (bool, error) {
	ok, err := s.Store.ClaimSlot(ctx, scheduleID, slot)
	if ok && err == nil {
		s.once.Do(func() {
			close(s.claimed)
			<-s.release
		})
	}
	return ok, err
}

// A fire that claimed its slot on a shared database as the engine closed starts its run: Close
// stops the scheduler (waiting for that fire) before the engine refuses starts. It refused them
// first, so the fire failed with code closed ("the engine is closed") and the slot, claimed
// across engines, had no run on any engine (tests/go's TestClusterScheduleFiresOncePerSlot
// failed so in a cold make test). Here Close begins while the fire is held after its claim.
func TestCloseLetsAFireThatClaimedItsSlotStartItsRun(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	clk := clock.NewStub(t0)
	db := memcluster.NewMem(clk)
	held := &slotHoldStore{Store: db.Open(), MemFireLog: schedule.NewMemFireLog(0), claimed: make(chan struct{}), release: make(chan struct{})}
	e, err := Open(ctx, Config{LeaseSecs: 30, StallAfterSecs: -1}, WithStore(held), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString("name: tick\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(s); err != nil {
		t.Fatal(err)
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "every", Workflow: "tick", Enabled: true,
		Trigger: flowtype.ScheduleTrigger{Kind: "interval", Every: "1m"}}); err != nil {
		t.Fatal(err)
	}
	if err := e.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	// Move the clock a minute at a time until the schedule's loop fires and claims a slot.
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-held.claimed:
		case <-time.After(5 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no fire claimed a slot in 10 s")
			}
			clk.Set(clk.Now().Add(time.Minute))
			continue
		}
		break
	}

	closed := make(chan error, 1)
	go func() { closed <- e.Close(ctx) }()
	// Close has stopped the scheduler (and, before the fixes, refused starts and cancelled the
	// held fire's start) once Started is false; the fire's run must start all the same.
	for deadline := time.Now().Add(10 * time.Second); e.sched.s.Started(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Close did not stop the scheduler in 10 s")
		}
	}
	close(held.release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return in 30 s")
	}

	fires, err := held.Fires(ctx, "every", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fires) != 1 || fires[0].Kind != store.FireFired || fires[0].RunID == "" {
		t.Fatalf("fires %+v; want one fired with its run (a fire whose slot was claimed must not fail because the engine closed)", fires)
	}
	if _, err := db.Open().GetRun(ctx, fires[0].RunID); err != nil {
		t.Fatalf("the fire's run %s: %v", fires[0].RunID, err)
	}
}
