package engine

import (
	"context"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// The ends of runs the store would not take (a full disk) are kept in e.unsaved
// (engine/internal/unsaved) and shown instead of the stored "running".

// unsavedFor returns the terminal state of run id the store does not have, or nil.
func (e *Engine) unsavedFor(id string) *store.RunUpdate {
	if h := e.live(id); h != nil {
		if u := h.Unsaved(); u != nil {
			return u
		}
	}
	return e.unsaved.Get(id)
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

// writeUnsaved writes the kept terminal records, and wakes the event readers when it did.
func (e *Engine) writeUnsaved(ctx context.Context) {
	if e.unsaved.Write(ctx, e.store) {
		e.hub.Notify()
	}
}
