package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Cross-process control. One process owns a file database (it runs the runs); others open it
// read-only (Config.ReadOnly) to look at runs, and approve, cancel, pause or unpause one by filing a control
// request the owner polls for, applies and answers. It is how `dcc-flow approve RUN STEP` in
// one terminal reaches the `dcc-flow serve` (or `dcc-flow run`) running the run in another.

const (
	// controlPollEvery is how often the owner looks for requests (one indexed read).
	controlPollEvery = 200 * time.Millisecond
	// controlAnswerWait bounds how long a read-only engine waits for the owner's answer.
	controlAnswerWait = 10 * time.Second
)

// startControl starts the owner's poller when the store carries control requests between
// processes (store.Controller: the SQLite store).
func (e *Engine) startControl() {
	cs, ok := e.store.(store.Controller)
	if !ok {
		return
	}
	e.ctlStop, e.ctlDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(e.ctlDone)
		t := time.NewTicker(controlPollEvery)
		defer t.Stop()
		for {
			select {
			case <-e.ctlStop:
				return
			case <-t.C:
				e.applyControl(cs)
			}
		}
	}()
}

// stopControl stops the poller (before the store closes).
func (e *Engine) stopControl() {
	if e.ctlStop != nil {
		close(e.ctlStop)
		<-e.ctlDone
	}
}

func (e *Engine) applyControl(cs store.Controller) {
	ctx := context.Background()
	reqs, err := cs.PendingControl(ctx)
	if err != nil {
		return // the next tick tries again; a closed store ends with the poller
	}
	for _, r := range reqs {
		var err error
		switch r.Action {
		case "approve":
			err = e.Approve(ctx, r.RunID, r.StepKey, r.Approved, r.Reason, r.By)
		case "cancel":
			err = e.Cancel(ctx, r.RunID, r.Reason)
		case "pause":
			err = e.Pause(ctx, r.RunID, r.Reason, r.By)
		case "unpause":
			err = e.Unpause(ctx, r.RunID, r.Reason, r.By)
		default:
			err = run.Errorf(run.CodeInvalidRequest, "unknown control action %q", r.Action)
		}
		code, msg := "", ""
		if err != nil {
			code, msg = run.CodeInternal, err.Error()
			var re *run.Error
			if errors.As(err, &re) {
				code, msg = re.Code, re.Message
			}
		}
		_ = cs.AnswerControl(ctx, r.ID, e.clock.Now(), code, msg)
	}
}

// requestControl files r with the owner of the database and waits for its answer.
func (e *Engine) requestControl(ctx context.Context, r store.ControlRequest) error {
	cs, ok := e.store.(store.Controller)
	if !ok {
		return run.Errorf(run.CodeInvalidState, "run %s is owned by another process and this store cannot reach it", r.RunID)
	}
	r.CreatedAt = e.clock.Now()
	id, err := cs.RequestControl(ctx, r)
	if err != nil {
		return &run.Error{Code: run.CodeInternal, Message: fmt.Sprintf("asking the owner of %s to %s run %s: %v", storeopen.Redact(e.cfg.DB), r.Action, r.RunID, err), Err: err}
	}
	deadline := time.Now().Add(controlAnswerWait)
	for {
		a, err := cs.ControlAnswer(ctx, id)
		if err != nil {
			return &run.Error{Code: run.CodeInternal, Message: fmt.Sprintf("reading the answer to the %s request: %v", r.Action, err), Err: err}
		}
		if a.Handled {
			if a.ErrorCode != "" {
				return &run.Error{Code: a.ErrorCode, StepID: r.StepKey, Message: a.Error}
			}
			return nil
		}
		if time.Now().After(deadline) {
			return &run.Error{Code: run.CodeTimeout, Message: fmt.Sprintf(
				"the process that owns %s did not answer the %s request for run %s within %s; is it still running? "+
					"(the request stays filed and is applied when it next looks)", storeopen.Redact(e.cfg.DB), r.Action, r.RunID, controlAnswerWait)}
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// errReadOnly is the error of the operations a read-only engine cannot do.
func (e *Engine) errReadOnly(what string) error {
	return run.Errorf(run.CodeReadOnly, "cannot %s: this engine opened %s read-only (another process owns it); "+
		"do it in the owning process, or stop that process and open the database normally", what, storeopen.Redact(e.cfg.DB))
}
