package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Pause (docs/reference/state-machine.md, "Pause"). A paused run starts no step instance — no step of a
// list or DAG, no foreach iteration's step, no next attempt of a step whose retry delay ends
// while paused — until it is unpaused; the instances in flight when it paused (a tool call, an
// open approval, a foreach or parallel step waiting for its children) go on and record their
// results. A run whose steps in flight end with nothing left that may start ends as usual
// (completed or failed). Cancel ends a paused run at once; an engine stop leaves it paused in
// the store, its steps in flight interrupted, and the engine's Unpause resumes it.
//
// The gate is runner.pauseMu: a step instance is registered as in flight (or its step_enter
// written) under the read lock, after checking that the run is not paused; Pause takes the write
// lock to close the gate. So once Pause returns, every step instance either was in flight
// before it or waits at the gate.

// PauseInfo says who paused or unpaused a run and why; both may be "".
type PauseInfo struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
}

// Detail returns the detail of a run_paused or run_unpaused event: {"reason", "by"}.
func (p PauseInfo) Detail() json.RawMessage { return jsonDetail(p) }

// Pause stops the run from starting step instances until Unpause; the instances in flight
// finish. The run becomes paused with a run_paused event. Pausing a paused run does nothing
// (no event). A finished run is code invalid_state.
func (h *Run) Pause(p PauseInfo) error { return h.r.setPaused(true, p) }

// Unpause lets a paused run start step instances again: it becomes running (or waiting, when an
// approval is open and no tool step is in flight) with a run_unpaused event. Unpausing a run
// that is not paused does nothing (no event). A finished run is code invalid_state.
func (h *Run) Unpause(p PauseInfo) error { return h.r.setPaused(false, p) }

// Hold stops the run from starting step instances (retries included) for good, without a
// record: no event, its status unchanged. A closing engine holds a run it is about to hand over
// (Engine.Close) while the host calls in flight finish; the run is then abandoned or stopped,
// which ends the wait of the instances at the gate. Once Hold returns, every instance either
// was in flight before it or waits at the gate.
func (h *Run) Hold() {
	h.r.pauseMu.Lock()
	h.r.held.Store(true)
	h.r.pauseMu.Unlock()
}

// HostBusy reports whether a step instance of the run (not of its child runs) has a host tool
// call that a host thread took and whose outcome is not settled yet: the host has not answered
// it, or its step has not written the answer yet (a failed attempt that will be retried
// counts as settled). Engine.Close waits for it before it hands the run over.
func (h *Run) HostBusy() bool { return h.r.hosting.Load() > 0 }

// Paused reports whether the run is paused.
func (h *Run) Paused() bool { return h.r.isPaused() }

func (r *runner) isPaused() bool {
	r.pauseMu.RLock()
	defer r.pauseMu.RUnlock()
	return r.pauseCh != nil
}

func (r *runner) setPaused(pause bool, p PauseInfo) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return r.finishedError(pause)
	}
	r.pauseMu.Lock()
	if (r.pauseCh != nil) == pause {
		r.pauseMu.Unlock()
		return nil
	}
	typ := run.EventRunUnpaused
	if pause {
		typ = run.EventRunPaused
		r.pauseCh = make(chan struct{}) // the gate closes before the write: nothing starts after it
	}
	r.pauseMu.Unlock()
	want := r.statusWanted(pause)
	now := r.now()
	err := r.write(&store.Batch{
		RunUpdates: []store.RunUpdate{{ID: r.id, Status: want, Progress: r.progress(), UpdatedAt: now}},
		Events:     []run.Event{r.event(now, typ, "", string(want), 0, p.Detail())},
	})
	if !pause {
		// Written first, opened after: no step_enter comes before the run_unpaused event.
		r.pauseMu.Lock()
		if r.pauseCh != nil {
			close(r.pauseCh)
			r.pauseCh = nil
		}
		r.pauseMu.Unlock()
	}
	switch {
	case errors.Is(err, errSealed):
		return r.finishedError(pause)
	case err != nil:
		return &run.Error{Code: run.CodeStorage, Err: err, Message: fmt.Sprintf(
			"run %s: writing its %s failed: %v; the run fails with that error", r.id, typ, err)}
	}
	r.status = want
	return nil
}

// statusWanted is the run status for the pause state given: paused, else running or waiting
// (an approval is open and no tool step is in flight). The caller holds r.mu.
func (r *runner) statusWanted(paused bool) run.Status {
	switch {
	case paused:
		return run.StatusPaused
	case r.open.Load() > 0 && r.leaf.Load() == 0:
		return run.StatusWaiting
	}
	return run.StatusRunning
}

func (r *runner) finishedError(pause bool) error {
	what := "unpause"
	if pause {
		what = "pause"
	}
	return &run.Error{Code: run.CodeInvalidState, Message: fmt.Sprintf("cannot %s run %s: it has finished", what, r.id)}
}

// enterGate waits until the run is not paused and returns with r.pauseMu read-locked: the
// caller registers its step instance, then calls r.pauseMu.RUnlock. It returns an error,
// unlocked, when ctx ends first.
func (r *runner) enterGate(ctx context.Context) error {
	for {
		r.pauseMu.RLock()
		ch := r.pauseCh
		if ch == nil && !r.held.Load() {
			return nil
		}
		r.pauseMu.RUnlock()
		if ch == nil { // held (Hold): nothing starts until the run is abandoned or stopped
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// sealPaused is seal for an engine stop of a paused run: its steps in flight (in b) become
// interrupted, and the run stays paused — no workflow_terminal, no finished time — so that it
// is still paused when an engine opens the database again, and Unpause resumes it. The caller
// holds r.mu and r.sealMu.
func (r *runner) sealPaused(b *store.Batch) {
	now := r.now()
	b.RunUpdates = append(b.RunUpdates, store.RunUpdate{ID: r.id, Status: run.StatusPaused, Progress: r.progress(), UpdatedAt: now})
	_ = r.writeRetrying(b) // a write that fails leaves steps running: the next owner interrupts them
	r.x.notify()
	r.sealed, r.finished, r.status = true, true, run.StatusPaused
	if r.stallTimer != nil {
		r.stallTimer.Stop()
	}
}

// CancelledError is the run error a cancel records, with reason ("" is fine): kind cancelled,
// message "cancelled: <reason>" — for the cancel of a paused run no engine is running.
func CancelledError(reason string) *store.RunError {
	sc := userCancel(reason)
	return &store.RunError{Kind: sc.kind, Message: sc.msg}
}
