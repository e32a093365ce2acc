package unsaved

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

type writer struct {
	err     error
	batches []*store.Batch
}

func (w *writer) Write(_ context.Context, b *store.Batch) error {
	if w.err != nil {
		return w.err
	}
	w.batches = append(w.batches, b)
	return nil
}

func TestKeepWriteAndForget(t *testing.T) {
	var r Runs
	w := &writer{}
	if r.Write(context.Background(), w) || len(w.batches) != 0 {
		t.Fatal("an empty Runs wrote")
	}
	r.Keep("r1", nil, nil)
	if r.Get("r1") != nil {
		t.Fatal("a nil state was kept")
	}
	end := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	u := &store.RunUpdate{ID: "r1", Status: run.StatusFailed, FinishedAt: end, Error: &store.RunError{Kind: "storage", Message: "disk full"}}
	steps := []store.Step{{RunID: "r1", Key: "a", Status: run.StepFailed}}
	r.Keep("r1", u, steps)
	if r.Get("r1") != u {
		t.Fatal("Get does not return the kept state")
	}
	w.err = errors.New("disk full")
	if r.Write(context.Background(), w) || r.Get("r1") != u {
		t.Fatal("a failed write forgot the state")
	}
	w.err = nil
	if !r.Write(context.Background(), w) || r.Get("r1") != nil {
		t.Fatal("a write that went through kept the state")
	}
	b := w.batches[0]
	if len(b.RunUpdates) != 1 || len(b.Events) != 1 || len(b.Steps) != 1 || b.Steps[0].Key != "a" {
		t.Fatalf("batch %+v; want one update, one event and the step row kept with them", b)
	}
	ev := b.Events[0]
	if ev.RunID != "r1" || ev.Type != run.EventWorkflowTerminal || ev.Status != string(run.StatusFailed) || !ev.Time.Equal(end) ||
		string(ev.Detail) != `{"error":{"kind":"storage","message":"disk full"},"status":"failed"}` {
		t.Fatalf("event %+v (detail %s)", ev, ev.Detail)
	}
}
