package gotest

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// SIGKILL of the orchestrator while its call runs on another engine through the tool-call queue
// (docs/operations/cluster.md, "The tool-call queue"): the engine that takes the run over adopts the call
// still in flight — it waits for that call's outcome instead of calling the tool again — so the
// tool is called once, there is one queued call, and the run completes with its output.
// Engines A and B host no tool, W hosts `work`; either B or W takes the run over (W would call
// the tool in-process were it not for the adoption).
func TestClusterTakeoverAdoptsTheCallInFlight(t *testing.T) {
	// Not parallel: three engine processes each, on a 1 s lease, want the machine to themselves.
	db, calls, nodes, id := submitMidCall(t)
	a, w := nodes[0], nodes[2]
	if err := a.cmd.Process.Kill(); err != nil { // SIGKILL, mid-call
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	killedAt := time.Now()
	v := viewer(t, db)
	waitFor(t, v, id, run.StatusCompleted, 20*time.Second)
	took := time.Since(killedAt)

	if got := readCalls(t, calls); len(got) != 1 {
		t.Fatalf("the tool was called %d times: %+v; want once (the call in flight adopted)", len(got), got)
	}
	if rows := queueRows(t, db); strings.Join(rows, ",") != "work 1 done " {
		t.Fatalf("queue rows: %q; want the one call, done", rows)
	}
	steps, err := v.Steps(context.Background(), id)
	if err != nil || len(steps) != 1 || steps[0].Status != run.StepCompleted || !strings.Contains(toJSON(steps[0].Output), `"done":"a"`) {
		t.Fatalf("steps: %+v %v", steps, err)
	}
	takenBy := takenOverBy(t, v, id)
	if takenBy == "" || takenBy == a.id {
		t.Fatalf("taken over by %q", takenBy)
	}
	t.Logf("orchestrator killed mid-call; taken over by %s (W is %s), the run completed %s after the kill with the call adopted",
		takenBy, w.id, took.Round(time.Millisecond))
	for _, nd := range nodes[1:] {
		nd.do("quit", "closed")
	}
}

// submitMidCall starts engines A and B, hosting no tool, and W, hosting `work`, on a new
// database; submits the `adopt` workflow (one 3 s call) on A; and returns once the call runs on
// W, through the tool-call queue.
func submitMidCall(t *testing.T) (db, calls string, nodes []*clusterNode, runID string) {
	t.Helper()
	db = pgtest.DB(t)
	calls = filepath.Join(t.TempDir(), "calls")
	noTools := []string{"DCC_FLOW_CLUSTER_NOTOOLS=1"}
	nodes = startNodes(t, db, calls, [][]string{noTools, noTools, nil})
	runID = strings.TrimPrefix(nodes[0].do("submit adopt", "run "), "run ")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := readCalls(t, calls); len(got) > 0 {
			if got[0].engine != nodes[2].id {
				t.Fatalf("the call ran on %s, not on the engine that hosts the tool (%s)", got[0].engine, nodes[2].id)
			}
			return db, calls, nodes, runID
		}
		if time.Now().After(deadline) {
			t.Fatal("the work call never reached the worker engine")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// takenOverBy returns the engine that took run id over (its interrupted event's
// taken_over_by), "" when none did.
func takenOverBy(t *testing.T, v *engine.Engine, id string) string {
	t.Helper()
	evs, err := v.EventsSince(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	by := ""
	for _, ev := range evs {
		if ev.RunID == id && ev.Type == run.EventInterrupted {
			var d struct {
				By string `json:"taken_over_by"`
			}
			_ = json.Unmarshal(ev.Detail, &d)
			by = d.By
		}
	}
	return by
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }
