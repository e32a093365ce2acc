package schedule

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestTrackerCountsLiveRunsAndForgetsEndedOnes(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	ended := map[string]bool{}
	n := 0
	tr := NewTracker(func(_ context.Context, req StartRequest) (string, error) {
		if req.Workflow == "broken" {
			return "", errors.New("no workflow")
		}
		n++
		return fmt.Sprintf("r%d", n), nil
	}, func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return ended[id]
	})
	for range 3 {
		if _, err := tr.Start(ctx, StartRequest{ScheduleID: "s", Workflow: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Start(ctx, StartRequest{ScheduleID: "s", Workflow: "broken"}); err == nil {
		t.Fatal("a failed start returned no error")
	}
	if a, _ := tr.Active(ctx, "s"); a != 3 {
		t.Fatalf("Active = %d; want 3 (a failed start is not counted)", a)
	}
	mu.Lock()
	ended["r1"], ended["r2"] = true, true
	mu.Unlock()
	if a, _ := tr.Active(ctx, "s"); a != 1 || tr.Held("s") != 1 {
		t.Fatalf("after two ended: Active %d, held %d; want 1, 1", a, tr.Held("s"))
	}
	mu.Lock()
	ended["r3"] = true
	mu.Unlock()
	if _, err := tr.Start(ctx, StartRequest{ScheduleID: "s", Workflow: "w"}); err != nil { // prunes r3
		t.Fatal(err)
	}
	if tr.Held("s") != 1 {
		t.Fatalf("held %d after a start; want only the new run", tr.Held("s"))
	}
	if a, _ := tr.Active(ctx, "other"); a != 0 || tr.Held("other") != 0 {
		t.Fatalf("an unknown schedule: Active %d", a)
	}
}
