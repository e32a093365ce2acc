package resources_test

import (
	"context"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/resources"
)

// A request Track lists waits in the snapshot, in the order, but the scheduler never grants
// it, even with units free; Hold counts its units in use whatever the limit (the shared queue
// granted them) and Release gives them back; Leave takes it off the queue. A tracked request
// does not hold back the scheduler's own waiters.
func TestTrackListsWithoutGranting(t *testing.T) {
	c := clock.NewStub(t0)
	s := resources.New(c, map[string]int{"houdini": 1}, resources.Options{})
	low := s.Track(resources.Request{Amounts: map[string]int{"houdini": 1}, Label: "low"})
	high := s.Track(resources.Request{Amounts: map[string]int{"houdini": 1}, Priority: 5, Label: "high"})
	r := s.Snapshot().Resources[0]
	if r.InUse != 0 || len(r.Queue) != 2 || r.Queue[0].Label != "high" || r.Queue[1].Label != "low" {
		t.Fatalf("snapshot %+v; want high then low waiting, nothing in use", r)
	}
	if place, n := low.Place(); place != 2 || n != 2 {
		t.Fatalf("low's place %d of %d; want 2 of 2", place, n)
	}
	// The scheduler's own request goes through: tracked ones hold nothing back.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	own, err := s.Acquire(ctx, resources.Request{Amounts: map[string]int{"houdini": 1}, Label: "own"})
	if err != nil {
		t.Fatal(err)
	}
	g := high.Hold() // over the limit of 1: the shared queue's word counts
	r = s.Snapshot().Resources[0]
	if r.InUse != 2 || len(r.Queue) != 1 || r.Queue[0].Label != "low" || len(r.Holders) != 2 {
		t.Fatalf("snapshot %+v; want own and high holding 2, low waiting", r)
	}
	low.Leave()
	low.Leave()
	g.Release()
	own.Release()
	if r = s.Snapshot().Resources[0]; r.InUse != 0 || len(r.Queue) != 0 || len(r.Holders) != 0 {
		t.Fatalf("snapshot %+v; want nothing", r)
	}
	if n, ok := s.Limit("houdini"); !ok || n != 1 {
		t.Fatalf("Limit = %d, %v", n, ok)
	}
	s.SetLimit("houdini", 0)
	if n, _ := s.Limit("houdini"); n != 0 {
		t.Fatalf("Limit after SetLimit(0) = %d", n)
	}
}
