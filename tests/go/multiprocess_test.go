package gotest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// One process owns a database; a second one (here a second engine: flock locks are per open
// file, so two engines of one process conflict like two processes) is refused with db_locked,
// opens it read-only, sees the owner's runs and events, and approves and cancels through it.
func TestSecondEngineOnADatabaseIsReadOnlyAndControlsRunsThroughTheOwner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "flow.db")
	owner, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	s, err := spec.ParseString(`
name: gated
steps:
  - {id: gate, kind: approve, prompt: "ship it?"}
  - {id: after, tool: flow__echo, args: {value: shipped}, depends_on: [gate]}
`)
	if err != nil {
		t.Fatal(err)
	}
	first, err := owner.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	second, err := owner.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, owner, first, run.StatusWaiting)
	waitStatus(t, owner, second, run.StatusWaiting)

	_, err = engine.Open(ctx, engine.Config{DB: db})
	var re *run.Error
	if !errors.As(err, &re) || re.Code != run.CodeDBLocked || !strings.Contains(re.Message, fmt.Sprintf("pid %d", os.Getpid())) ||
		!strings.Contains(re.Message, "read-only") {
		t.Fatalf("second writer: %v", err)
	}

	ro, err := engine.Open(ctx, engine.Config{DB: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(ctx)
	// Opening read-only recovered nothing: the owner's runs still wait.
	if info, err := ro.Status(ctx, first); err != nil || info.Status != run.StatusWaiting {
		t.Fatalf("read-only status: %v %+v", err, info)
	}
	if runs, err := ro.Runs(ctx, engine.RunFilter{Name: "gated"}); err != nil || len(runs) != 2 {
		t.Fatalf("read-only runs: %v %+v", err, runs)
	}
	if _, err := ro.Submit(ctx, engine.StartRequest{Spec: s}); !hasCode(err, run.CodeReadOnly) {
		t.Fatalf("read-only submit: %v", err)
	}
	if _, err := ro.Resume(ctx, first, engine.ResumeOptions{}); !hasCode(err, run.CodeReadOnly) {
		t.Fatalf("read-only resume: %v", err)
	}
	if _, err := ro.Prune(ctx, time.Now()); !hasCode(err, run.CodeReadOnly) {
		t.Fatalf("read-only prune: %v", err)
	}

	// The owner's answer comes back, errors included.
	err = ro.Approve(ctx, first, "nope", true, "", "td")
	if !hasCode(err, run.CodeInvalidState) || !strings.Contains(err.Error(), "gate") {
		t.Fatalf("approving an unknown step through the owner: %v", err)
	}
	last, _ := ro.LastSeq(ctx)
	if err := ro.Approve(ctx, first, "gate", true, "looks good", "td"); err != nil {
		t.Fatal(err)
	}
	info, err := ro.Wait(ctx, first, 10*time.Second)
	if err != nil || info.Status != run.StatusCompleted || fmt.Sprint(info.Outputs["after"]) != "map[value:shipped]" {
		t.Fatalf("after approval: %v %+v", err, info)
	}
	// The read-only engine sees the owner's events as they are committed.
	evs, err := ro.PollEvents(ctx, engine.EventQuery{FromSeq: last + 1, RunID: first}, 5*time.Second)
	if err != nil || len(evs) == 0 {
		t.Fatalf("events seen read-only: %v %v", err, evs)
	}
	if err := ro.Cancel(ctx, second, "not today"); err != nil {
		t.Fatal(err)
	}
	if info, err := ro.Wait(ctx, second, 10*time.Second); err != nil || info.Status != run.StatusCancelled {
		t.Fatalf("after cancel: %v %+v", err, info)
	}

	// Once the owner closes, the database can be owned again.
	if err := owner.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := engine.Open(ctx, engine.Config{DB: db})
	if err != nil {
		t.Fatalf("reopening after the owner closed: %v", err)
	}
	again.Close(ctx)
}

func TestReadOnlyNeedsAnExistingDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := engine.Open(ctx, engine.Config{ReadOnly: true}); !hasCode(err, run.CodeInvalidRequest) {
		t.Fatalf("read-only in memory: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.db")
	if _, err := engine.Open(ctx, engine.Config{DB: missing, ReadOnly: true}); err == nil || !strings.Contains(err.Error(), "missing.db") {
		t.Fatalf("read-only on a missing file: %v", err)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("a read-only open created the database: %v", err)
	}
}

func waitStatus(t *testing.T, e *engine.Engine, id string, want run.Status) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if info, err := e.Status(context.Background(), id); err == nil && info.Status == want {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("run %s never became %s", id, want)
}

func hasCode(err error, code string) bool {
	var re *run.Error
	return errors.As(err, &re) && re.Code == code
}

// A read-only engine (dcc-flow status from another terminal) reads a run's progress as its
// steps commit: completed is the number of step instances the owner has committed in a
// finished status, total the instances planned so far (a foreach adds its iterations).
func TestReadOnlyEngineSeesProgressAsStepsCommit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	db := filepath.Join(t.TempDir(), "flow.db")
	owner, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(context.Background())
	if err := owner.RegisterTool(flowtype.ToolInfo{Name: "work", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	items := make([]any, 20)
	for i := range items {
		items[i] = i
	}
	s, err := spec.ParseString(`
name: progress
steps:
  - {id: list, tool: flow__echo, args: {value: 1}}
  - id: per_item
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 3
    steps: [{id: work, tool: work, args: {i: "{{item}}"}}]
`)
	if err != nil {
		t.Fatal(err)
	}
	id, err := owner.Submit(ctx, engine.StartRequest{Spec: s, Inputs: map[string]any{"items": items}})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := engine.Open(ctx, engine.Config{DB: db, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close(context.Background())

	next := func() flowtype.PendingCall {
		t.Helper()
		calls, err := owner.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: waitLimit})
		if err != nil || len(calls) != 1 {
			t.Fatalf("waiting for a tool call: %v %v", calls, err)
		}
		return calls[0]
	}
	var held []flowtype.PendingCall // pulled, not answered: three iterations in flight
	for len(held) < 3 {
		held = append(held, next())
	}
	for k := 1; k <= 12; k++ {
		if err := owner.Host().Complete(held[0].ID, flowtype.ToolResult{Output: k}); err != nil {
			t.Fatal(err)
		}
		// The iteration's next call is handed out only once the answered step's exit is
		// committed; the calls still held keep their steps running.
		held = append(held[1:], next())

		info, err := ro.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		steps, err := ro.Steps(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		finished := 0
		for _, st := range steps {
			if st.Status.Terminal() {
				finished++
			}
		}
		want := run.Progress{Completed: 1 + k, Total: 2 + len(items)} // list + k works; list, per_item and 20 works
		if finished != want.Completed || info.Progress != want {
			t.Fatalf("after %d answers the read-only engine shows progress %+v with %d finished steps committed; want %+v",
				k, info.Progress, finished, want)
		}
		runs, err := ro.Runs(ctx, engine.RunFilter{Name: "progress"})
		if err != nil || len(runs) != 1 || runs[0].Progress != want {
			t.Fatalf("after %d answers the read-only run list shows %+v (%v); want progress %+v", k, runs, err, want)
		}
		if live, err := owner.Status(ctx, id); err != nil || live.Progress != want {
			t.Fatalf("after %d answers the owner shows %+v (%v); want progress %+v", k, live, err, want)
		}
	}
}
