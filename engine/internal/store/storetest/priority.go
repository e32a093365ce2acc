package storetest

import (
	"context"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// testRunPriority: a run's own priority (store.Run.Priority) is kept as written — a value,
// zero and a negative one included — and read back by GetRun and ListRuns; a run without one
// reads back nil; a RunUpdate (a resume, an end) leaves it.
func testRunPriority(t *testing.T, s store.Store) {
	ctx := context.Background()
	prio := func(p int) *int { return &p }
	runs := map[string]*int{"high": prio(50), "zero": prio(0), "low": prio(-1000), "spec": nil}
	var b store.Batch
	for id, p := range runs {
		r := newRun(id, t0)
		r.Priority = p
		b.CreateRuns = append(b.CreateRuns, r)
	}
	write(t, s, &b)
	for _, r := range b.CreateRuns { // the store keeps its own copy: the caller's is not read again
		if r.ID == "high" {
			*r.Priority = 7
		}
	}
	runs["high"] = prio(50)
	write(t, s, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "high", Status: run.StatusFailed, UpdatedAt: t0, FinishedAt: t0}}})
	same := func(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }
	for id, want := range runs {
		r, err := s.GetRun(ctx, id)
		if err != nil || !same(r.Priority, want) {
			t.Errorf("GetRun(%s).Priority = %v, %v; want %v", id, r.Priority, err, want)
		}
	}
	listed, err := s.ListRuns(ctx, store.RunFilter{})
	if err != nil || len(listed) != len(runs) {
		t.Fatalf("ListRuns: %d runs, %v", len(listed), err)
	}
	for _, r := range listed {
		if !same(r.Priority, runs[r.ID]) {
			t.Errorf("ListRuns: %s has priority %v; want %v", r.ID, r.Priority, runs[r.ID])
		}
	}
}
