// Package unsaved keeps the terminal states the store would not take. A run whose terminal
// record the store refused (a full disk: the write failed, and so did its retries) has ended
// all the same: the engine keeps its terminal state here, with an error of kind storage, and
// shows it in Status, Wait and Runs instead of the stored "running", so that waiters and pull
// loops end. The engine writes the kept records when the store takes writes again (Write: the
// next run that starts, and Close); those it never writes, the next engine to open the database
// marks interrupted.
package unsaved

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Writer is the store's write of one batch (a store.Store is one).
type Writer interface {
	Write(ctx context.Context, b *store.Batch) error
}

// Runs is the kept terminal states, by run id. Its methods are safe for concurrent use; the
// zero value is ready.
type Runs struct {
	mu sync.Mutex
	m  map[string]kept
}

// kept is one run's unsaved end: its run record and the step rows its end wrote (the steps it
// ended as cancelled, failed or interrupted), written together.
type kept struct {
	run   *store.RunUpdate
	steps []store.Step
}

// Keep remembers u, the unsaved terminal state of the run id that has ended, and steps, the
// step rows written with it; a nil u does nothing.
func (r *Runs) Keep(id string, u *store.RunUpdate, steps []store.Step) {
	if u == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]kept{}
	}
	r.m[id] = kept{run: u, steps: steps}
}

// Get returns the kept terminal state of run id, or nil.
func (r *Runs) Get(id string) *store.RunUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id].run
}

// Write writes the kept terminal records, each with its workflow_terminal event and its step
// rows, in one batch, and forgets them once written; it reports whether it wrote any. A failure
// keeps them for the next try.
func (r *Runs) Write(ctx context.Context, w Writer) bool {
	r.mu.Lock()
	if len(r.m) == 0 {
		r.mu.Unlock()
		return false
	}
	b := &store.Batch{}
	for id, k := range r.m {
		u := k.run
		b.RunUpdates = append(b.RunUpdates, *u)
		b.Steps = append(b.Steps, k.steps...)
		detail, _ := json.Marshal(map[string]any{"status": u.Status, "error": u.Error})
		b.Events = append(b.Events, run.Event{Time: u.FinishedAt, RunID: id, Type: run.EventWorkflowTerminal,
			Status: string(u.Status), Progress: u.Progress, Detail: detail})
	}
	r.mu.Unlock()
	if err := w.Write(ctx, b); err != nil {
		return false
	}
	r.mu.Lock()
	for _, u := range b.RunUpdates {
		delete(r.m, u.ID)
	}
	r.mu.Unlock()
	return true
}
