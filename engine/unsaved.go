package engine

import (
	"context"
	"encoding/json"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A run whose terminal record the store would not take (a full disk: the write failed, and so
// did its retries) has ended all the same: the engine keeps its terminal state, with an error of
// kind storage, and shows it in Status, Wait and Runs instead of the stored "running", so that
// waiters and pull loops end. The engine writes the kept records when the store takes writes
// again (the next run that starts, and Close); those it never writes, the next engine to open
// the database marks interrupted.

// unsavedFor returns the terminal state of run id the store does not have, or nil.
func (e *Engine) unsavedFor(id string) *store.RunUpdate {
	if h := e.live(id); h != nil {
		if u := h.Unsaved(); u != nil {
			return u
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unsaved[id]
}

// keepUnsaved remembers the unsaved terminal state of a run that has ended.
func (e *Engine) keepUnsaved(h *exec.Run) {
	if u := h.Unsaved(); u != nil {
		if e.unsaved == nil {
			e.unsaved = map[string]*store.RunUpdate{}
		}
		e.unsaved[h.ID()] = u
	}
}

// withUnsaved shows the kept terminal state of a run whose record says it is not finished.
func (e *Engine) withUnsaved(info *RunInfo) {
	if info.Terminal {
		return
	}
	if u := e.unsavedFor(info.ID); u != nil {
		info.Status, info.Terminal, info.Error = u.Status, true, u.Error
		info.Progress, info.UpdatedAt, info.FinishedAt = u.Progress, u.UpdatedAt, u.FinishedAt
		info.Approvals = nil
	}
}

// writeUnsaved writes the kept terminal records (each with its workflow_terminal event) in one
// batch, and forgets them once written. A failure keeps them for the next try.
func (e *Engine) writeUnsaved(ctx context.Context) {
	e.mu.Lock()
	if len(e.unsaved) == 0 {
		e.mu.Unlock()
		return
	}
	b := &store.Batch{}
	for id, u := range e.unsaved {
		b.RunUpdates = append(b.RunUpdates, *u)
		detail, _ := json.Marshal(map[string]any{"status": u.Status, "error": u.Error})
		b.Events = append(b.Events, run.Event{Time: u.FinishedAt, RunID: id, Type: run.EventWorkflowTerminal,
			Status: string(u.Status), Progress: u.Progress, Detail: detail})
	}
	e.mu.Unlock()
	if err := e.store.Write(ctx, b); err != nil {
		return
	}
	e.mu.Lock()
	for _, u := range b.RunUpdates {
		delete(e.unsaved, u.ID)
	}
	e.mu.Unlock()
	e.hub.Notify()
}
