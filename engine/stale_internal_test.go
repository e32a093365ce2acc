package engine

import (
	"context"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// An engine on a shared database that went a whole lease without a renewal (a SIGSTOP: the
// process and its host threads wake together) hands out no call, not even one its host queued
// before the stop: another engine may have taken the run over and completed the step since
// (soak-cluster-short seed 2 found a woken engine calling a step 3.7 s after the new owner had
// completed it). Its heartbeat abandons the runs first; then the host hands out calls again.
func TestStaleEngineHandsOutNoCallUntilItsHeartbeat(t *testing.T) {
	ctx := context.Background()
	url, err := pgtest.StartT(t).NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A long lease: the lease loop beats every 10 s, so only this test moves the engine's state.
	e, err := Open(ctx, Config{DB: url, LeaseSecs: 30, StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.RegisterTool(ToolInfo{Name: "t", Lane: LaneMain}); err != nil {
		t.Fatal(err)
	}
	h := e.router.Host()
	queued := func() {
		t.Helper()
		if _, err := e.Submit(ctx, StartRequest{Spec: mustParse(t, `steps: [{id: a, tool: t}]`)}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for h.Pending() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the call never reached the host")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pull := func() []tools.PendingCall {
		t.Helper()
		cs, err := h.Pull(ctx, tools.PullRequest{Lanes: []string{LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}

	queued()
	// The suspension: the last renewal is two leases old.
	ls := &e.lease
	ls.mu.Lock()
	ls.lastRenew = ls.lastRenew.Add(-2 * ls.info.Lease)
	ls.mu.Unlock()
	ls.renewed.Add(-int64(2 * ls.info.Lease))
	if cs := pull(); len(cs) != 0 {
		t.Fatalf("a stale engine handed out %d calls (run %s)", len(cs), cs[0].RunID)
	}
	e.heartbeat() // abandons the runs (their calls are withdrawn), then renews
	if cs := pull(); len(cs) != 0 {
		t.Fatalf("the call of an abandoned run was handed out after the heartbeat (run %s)", cs[0].RunID)
	}
	if st := e.LeaseStats(); st.Abandoned != 1 {
		t.Errorf("runs abandoned: %d, want 1", st.Abandoned)
	}
	queued()
	if cs := pull(); len(cs) != 1 {
		t.Fatalf("after the renewal the host handed out %d calls, want 1", len(cs))
	}
}
