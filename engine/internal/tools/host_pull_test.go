package tools

import (
	"context"
	"sync"
	"testing"
	"time"
)

func enqueue(t *testing.T, h *Host, lane, runID, tool string) <-chan Result {
	t.Helper()
	ch := make(chan Result, 1)
	go func() {
		res, err := h.Call(context.Background(), lane, Call{RunID: runID, StepKey: tool, Tool: tool})
		if err == nil {
			ch <- res
		}
		close(ch)
	}()
	return ch
}

func waitPending(t *testing.T, h *Host, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.Pending() < n {
		if time.Now().After(deadline) {
			t.Fatalf("pending %d, want %d", h.Pending(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestPullFiltersByRunAndLanes(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	a1 := enqueue(t, h, LaneMain, "a", "a1")
	waitPending(t, h, 1)
	b1 := enqueue(t, h, LaneMain, "b", "b1")
	waitPending(t, h, 2)
	a2 := enqueue(t, h, LaneWorker, "a", "a2")
	waitPending(t, h, 3)

	// Run b's call is taken from the middle of the main queue.
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, RunID: "b", Max: 5})
	if err != nil || len(got) != 1 || got[0].Tool != "b1" {
		t.Fatalf("pull b: %+v %v", got, err)
	}
	// Run a over both lanes gets both of its calls.
	got, err = h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain, LaneWorker}, RunID: "a", Max: 5})
	if err != nil || len(got) != 2 || got[0].Tool != "a1" || got[1].Tool != "a2" {
		t.Fatalf("pull a: %+v %v", got, err)
	}
	for _, c := range append(got, PendingCall{ID: 2}) {
		if err := h.Complete(c.ID, Result{Output: c.Tool}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []<-chan Result{a1, b1, a2} {
		if _, ok := <-ch; !ok {
			t.Fatal("a call was not answered")
		}
	}
	// Nothing left: the main lane's dead entry is skipped.
	if got, _ := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}}); len(got) != 0 {
		t.Fatalf("left over: %+v", got)
	}
}

func TestPullWakesOnEitherLaneAndStops(t *testing.T) {
	t.Parallel()
	h := NewHost()
	defer h.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	var got []PendingCall
	go func() {
		defer wg.Done()
		got, _ = h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain, LaneWorker}, Timeout: 10 * time.Second})
	}()
	done := enqueue(t, h, LaneWorker, "r", "w")
	wg.Wait()
	if len(got) != 1 || got[0].Tool != "w" {
		t.Fatalf("%+v", got)
	}
	_ = h.Complete(got[0].ID, Result{})
	<-done

	stop := make(chan struct{})
	start := time.Now()
	go func() { time.Sleep(20 * time.Millisecond); close(stop) }()
	got, err := h.Pull(context.Background(), PullRequest{Lanes: []string{LaneMain}, Timeout: 10 * time.Second, Stop: stop})
	if err != nil || len(got) != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("stop: %+v %v after %v", got, err, time.Since(start))
	}
	if _, err := h.Pull(context.Background(), PullRequest{Lanes: []string{"gpu"}}); err == nil {
		t.Fatal("unknown lane accepted")
	}
}
