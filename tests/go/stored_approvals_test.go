package gotest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The open approvals of a run another process runs are in its status, as its records show
// them (the prompt and expiry of the approve_requested event): from a read-only engine on the
// owner's SQLite file and from another engine on a shared PostgreSQL database. Before, only the
// engine running the run listed them.
func TestStatusListsApprovalsOfARunAnotherProcessRuns(t *testing.T) {
	t.Parallel()
	const flow = `
name: gated
steps:
  - {id: a, tool: flow__echo, args: {value: 1}}
  - {id: gate, kind: approve, prompt: "publish {{a.value}}?", timeout_secs: 3600}
`
	check := func(t *testing.T, owner, viewer *engine.Engine) {
		t.Helper()
		ctx := context.Background()
		id, err := owner.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, flow)})
		if err != nil {
			t.Fatal(err)
		}
		var info *engine.RunInfo
		deadline := time.Now().Add(10 * time.Second)
		for {
			if info, err = owner.Status(ctx, id); err == nil && len(info.Approvals) == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the owner never listed the approval: %+v %v", info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		want := info.Approvals[0]
		// The viewer reads the records as the owner commits them: the owner lists the approval
		// from its live state a moment before its commit can be read (seen under Wine).
		var seen *engine.RunInfo
		for deadline := time.Now().Add(10 * time.Second); ; {
			seen, err = viewer.Status(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if len(seen.Approvals) == 1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(seen.Approvals) != 1 {
			t.Fatalf("the viewer lists %d approvals (%+v); want the owner's %+v", len(seen.Approvals), seen.Approvals, want)
		}
		got := seen.Approvals[0]
		if got.StepKey != "gate" || got.Prompt != "publish 1?" || got.ExpiresAt.IsZero() ||
			!got.ExpiresAt.Equal(want.ExpiresAt) || got.RequestedAt.Sub(want.RequestedAt).Abs() > time.Second {
			t.Fatalf("viewer's approval %+v; the owner's %+v", got, want)
		}
		if err := owner.Approve(ctx, id, "gate", true, "", "test"); err != nil {
			t.Fatal(err)
		}
		if info, err := owner.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run: %+v %v", info, err)
		}
		if seen, err := viewer.Status(ctx, id); err != nil || len(seen.Approvals) != 0 {
			t.Fatalf("after the approval the viewer lists %+v (%v)", seen.Approvals, err)
		}
	}
	t.Run("sqlite read-only", func(t *testing.T) {
		t.Parallel()
		db := filepath.Join(t.TempDir(), "runs.db")
		ctx := context.Background()
		owner, err := engine.Open(ctx, engine.Config{DB: db})
		if err != nil {
			t.Fatal(err)
		}
		defer owner.Close(ctx)
		ro, err := engine.Open(ctx, engine.Config{DB: db, ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer ro.Close(ctx)
		check(t, owner, ro)
	})
	t.Run("postgresql engines", func(t *testing.T) {
		t.Parallel()
		db := pgtest.DB(t)
		check(t, openQueueEngine(t, db, "", nil, nil), openQueueEngine(t, db, "", nil, nil))
	})
}
