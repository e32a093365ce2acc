package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Pause (docs/reference/state-machine.md, "Pause"): a paused run starts no step instance until it is
// unpaused, and its instances in flight finish and record their results.

// Pause pauses a run: no step instance starts (no step, no foreach iteration, no retry whose
// delay ends meanwhile) until Unpause; the ones in flight finish and record their results, and an
// open approval can still be answered. The run becomes paused with a run_paused event whose
// detail is {"reason", "by"}. Pausing a paused run does nothing and is not an error; a finished
// run is code invalid_state, an unknown id not_found. A read-only engine files the pause with the
// owning process (a control request) and waits for its answer. A paused run stays paused when
// its engine stops: the steps in flight become interrupted, and Unpause in the next engine
// resumes it without running its completed steps again.
func (e *Engine) Pause(ctx context.Context, runID, reason, by string) error {
	return e.setPaused(ctx, runID, true, exec.PauseInfo{Reason: reason, By: by})
}

// Unpause lets a paused run go on: it becomes running again (waiting when only an approval is
// open) with a run_unpaused event {"reason", "by"}, and the steps that were held start. A paused
// run that no engine runs (its engine stopped, or its process died) is resumed (a run_unpaused
// then a workflow_resumed event): its completed step instances are reused, the interrupted ones
// run again; its host tools must be registered (code unknown_tool otherwise). Unpausing a run
// that is not paused does nothing; a finished run is code invalid_state, an unknown id
// not_found. A read-only engine files the unpause with the owning process.
func (e *Engine) Unpause(ctx context.Context, runID, reason, by string) error {
	return e.setPaused(ctx, runID, false, exec.PauseInfo{Reason: reason, By: by})
}

func (e *Engine) setPaused(ctx context.Context, runID string, pause bool, p exec.PauseInfo) error {
	if e.isClosed() {
		return errClosed()
	}
	action := "unpause"
	if pause {
		action = "pause"
	}
	if h := e.live(runID); h != nil && !isDone(h.Done()) {
		if pause {
			return h.Pause(p)
		}
		return h.Unpause(p)
	}
	if e.unsavedFor(runID) != nil {
		return pauseFinished(action, runID, "") // it has ended; its end is not written yet
	}
	rec, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return notFound(runID, err)
	}
	switch {
	case rec.Status.Terminal():
		return pauseFinished(action, runID, rec.Status)
	case pause && rec.Status == run.StatusPaused, !pause && rec.Status != run.StatusPaused:
		return nil // already as asked
	case e.cfg.ReadOnly || e.heldElsewhere(ctx, runID):
		return e.requestControl(ctx, store.ControlRequest{RunID: runID, Action: action, Reason: p.Reason, By: p.By})
	case pause:
		// Not live here, not finished, not paused: another process runs it (this engine owns the
		// file, so that process has died and the next open marks the run interrupted).
		return &run.Error{Code: run.CodeInvalidState, Message: fmt.Sprintf("cannot pause run %s: it is %s but this engine is not running it; resume it if it was interrupted", runID, rec.Status)}
	}
	// Unpause of a paused run that no engine is running: resume it.
	storedPauseMu.Lock()
	defer storedPauseMu.Unlock()
	if h := e.live(runID); h != nil && !isDone(h.Done()) {
		return h.Unpause(p) // an unpause at the same time resumed it
	}
	_, err = e.resume(ctx, runID, ResumeOptions{}, &p)
	if err != nil && run.CodeOf(err) == run.CodeNotResumable && e.live(runID) != nil {
		return nil // an unpause at the same time resumed it
	}
	return err
}

func pauseFinished(action, runID string, status run.Status) error {
	msg := fmt.Sprintf("cannot %s run %s: it has finished", action, runID)
	if status != "" {
		msg = fmt.Sprintf("cannot %s run %s: it is %s (finished)", action, runID, status)
	}
	return &run.Error{Code: run.CodeInvalidState, Message: msg}
}

// storedPauseMu orders the unpause and the cancel of paused runs that no engine runs (which
// read the record, then write it or start the run): rare operations, one at a time.
var storedPauseMu sync.Mutex

// cancelPaused cancels a paused run that no engine is running (its steps in flight were
// interrupted when its engine stopped): the run becomes cancelled with its workflow_terminal
// event, in one write.
func (e *Engine) cancelPaused(ctx context.Context, rec store.Run, reason string) error {
	storedPauseMu.Lock()
	defer storedPauseMu.Unlock()
	id := rec.ID
	if h := e.live(id); h != nil { // unpaused meanwhile: it runs here now
		h.Cancel(reason)
		return nil
	}
	rec, err := e.store.GetRun(ctx, id)
	if err != nil {
		return notFound(id, err)
	}
	if rec.Status != run.StatusPaused {
		return nil // cancelled or resumed meanwhile
	}
	now := e.clock.Now()
	rerr := exec.CancelledError(reason)
	detail, _ := json.Marshal(map[string]any{"status": run.StatusCancelled, "error": rerr})
	b := &store.Batch{
		RunUpdates: []store.RunUpdate{{ID: rec.ID, Status: run.StatusCancelled, Error: rerr, Progress: rec.Progress, UpdatedAt: now, FinishedAt: now}},
		Events: []run.Event{{Time: now, RunID: rec.ID, Type: run.EventWorkflowTerminal, Status: string(run.StatusCancelled),
			Progress: rec.Progress, Detail: detail}},
	}
	if err := e.store.Write(ctx, b); err != nil {
		return notFound(rec.ID, err)
	}
	e.hub.Notify()
	return nil
}

// storedPaused reports whether the store shows runID paused: with no live handle, a paused run
// that no engine runs (its engine stopped), which only an Unpause or a Cancel changes. It reads
// under storedPauseMu, so it never sees an unpause half done (the record already running, the
// run not yet registered live): a run unpaused meanwhile is live or finished by then, and it
// returns false.
func (e *Engine) storedPaused(ctx context.Context, runID string) bool {
	storedPauseMu.Lock()
	defer storedPauseMu.Unlock()
	if e.live(runID) != nil {
		return false
	}
	rec, err := e.store.GetRun(ctx, runID)
	return err == nil && rec.Status == run.StatusPaused
}
