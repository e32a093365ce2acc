package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// testParentRuns: a child run keeps its parent run id and step key, and ListRuns selects the
// children of a run (newest first), leaving runs started on their own with "" in both.
func testParentRuns(t *testing.T, s store.Store) {
	ctx := context.Background()
	parent := newRun("p1", t0)
	c1 := newRun("c1", t0.Add(time.Second))
	c1.ParentRunID, c1.ParentStepKey = "p1", "publish"
	c2 := newRun("c2", t0.Add(2*time.Second))
	c2.ParentRunID, c2.ParentStepKey = "p1", "per_shot[1].render"
	other := newRun("o1", t0.Add(3*time.Second))
	write(t, s, &store.Batch{CreateRuns: []store.Run{parent, c1, c2, other}})

	got, err := s.GetRun(ctx, "c2")
	if err != nil {
		t.Fatal(err)
	}
	if got.ParentRunID != "p1" || got.ParentStepKey != "per_shot[1].render" {
		t.Fatalf("child run: parent %q step %q, want p1 per_shot[1].render", got.ParentRunID, got.ParentStepKey)
	}
	if got, err = s.GetRun(ctx, "p1"); err != nil || got.ParentRunID != "" || got.ParentStepKey != "" {
		t.Fatalf("a run started on its own: parent %q step %q (%v), want both empty", got.ParentRunID, got.ParentStepKey, err)
	}
	kids, err := s.ListRuns(ctx, store.RunFilter{ParentRunID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(kids) != 2 || kids[0].ID != "c2" || kids[1].ID != "c1" || kids[1].ParentStepKey != "publish" {
		t.Fatalf("children of p1: %+v, want c2 then c1", kids)
	}
	if kids, err = s.ListRuns(ctx, store.RunFilter{ParentRunID: "c1"}); err != nil || len(kids) != 0 {
		t.Fatalf("children of a run without any: %v %v", kids, err)
	}
	if all, err := s.ListRuns(ctx, store.RunFilter{}); err != nil || len(all) != 4 {
		t.Fatalf("every run: %d %v, want 4", len(all), err)
	}
}
