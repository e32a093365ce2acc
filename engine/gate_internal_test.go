package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memcluster"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
)

// An engine on a shared database gates its host on the freshness of its leases: once a whole
// lease passes without a heartbeat that went through (a suspension, the database away), its host
// hands out no call — not even one that no run of its own holds (here a call put on the host
// directly, which no abandonment withdraws) — until a heartbeat goes through again. A puller
// that wakes from a SIGSTOP before the heartbeat does must not start a step that another engine
// completed meanwhile (the cluster soak found one). On memcluster and the stub clock: no
// PostgreSQL, no sleeps.
func TestSharedEngineHostHandsOutNothingWhileItsLeasesAreStale(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewStub(time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC))
	h := memcluster.NewMem(clk).Open()
	e, err := Open(ctx, Config{LeaseSecs: 30, StallAfterSecs: -1}, WithStore(h), WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if e.members == nil {
		t.Fatal("an engine on a store with leases did not join the cluster")
	}
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "export", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	host := e.router.Host()
	answered := make(chan error, 1)
	go func() {
		_, err := host.Call(ctx, flowtype.LaneMain, tools.Call{RunID: "r-elsewhere", StepKey: "export", Tool: "export", Args: map[string]any{}})
		answered <- err
	}()
	for host.Pending() == 0 {
		time.Sleep(time.Millisecond)
	}
	pull := func() []flowtype.PendingCall {
		t.Helper()
		got, err := host.Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	h.Fail(errors.New("the database is away"))
	clk.Advance(31 * time.Second) // a whole lease without a renewal: the heartbeats fail
	if got := pull(); len(got) != 0 {
		t.Fatalf("an engine past a lease without a renewal handed out %+v", got)
	}
	h.Fail(nil)
	clk.Advance(10 * time.Second) // the next beat goes through and reopens the host
	deadline := time.Now().Add(10 * time.Second)
	var got []flowtype.PendingCall
	for len(got) == 0 && time.Now().Before(deadline) {
		got = pull()
	}
	if len(got) != 1 || got[0].Tool != "export" {
		t.Fatalf("after a heartbeat went through: %+v; want the export call", got)
	}
	if err := host.Complete(got[0].ID, flowtype.ToolResult{Output: 1}); err != nil {
		t.Fatal(err)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
}
