package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/startstop"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Cross-process control. One process owns a file database (it runs the runs); others open it
// read-only to look at runs, and approve, cancel, pause or unpause one by filing a control
// request the owner polls for, applies and answers. It is how `dcc-flow approve RUN STEP` in one
// terminal reaches the `dcc-flow serve` (or `dcc-flow run`) running the run in another. On a
// shared database the same requests reach the engine that holds a run's lease.

const (
	// ControlPollEvery is how often the owner looks for requests (one indexed read).
	ControlPollEvery = 200 * time.Millisecond
	// ControlAnswerWait bounds how long a requester waits for the owner's answer.
	ControlAnswerWait = 10 * time.Second
	// controlAnswerPoll is how often a requester reads whether its request was answered.
	controlAnswerPoll = 50 * time.Millisecond
)

// Applier applies control requests: the engine's own Approve, Cancel, Pause and Unpause.
type Applier interface {
	Approve(ctx context.Context, runID, stepKey string, approved bool, reason, by string) error
	Cancel(ctx context.Context, runID, reason string) error
	Pause(ctx context.Context, runID, reason, by string) error
	Unpause(ctx context.Context, runID, reason, by string) error
}

// ControlPoller is the owner's side: every ControlPollEvery it applies the pending requests and
// answers each. Start and Stop it as a startstop service (stop it before the store closes).
type ControlPoller struct {
	cs    store.Controller
	clock clock.Clock
	apply Applier
	loop  startstop.Periodic
}

// NewControlPoller returns the poller of the requests filed in cs, applied by apply.
func NewControlPoller(cs store.Controller, c clock.Clock, apply Applier) *ControlPoller {
	p := &ControlPoller{cs: cs, clock: c, apply: apply}
	p.loop = startstop.Periodic{Clock: c, Period: ControlPollEvery, Delay: true,
		Fn: func(ctx context.Context) { p.Poll(context.WithoutCancel(ctx)) }}
	return p
}

// Start starts polling.
func (p *ControlPoller) Start(ctx context.Context) error { return p.loop.Start(ctx) }

// Stop stops polling, after the pass in progress.
func (p *ControlPoller) Stop() { p.loop.Stop() }

// Poll applies and answers the pending requests once. A failed read is left to the next poll
// (a closed store ends with the poller).
func (p *ControlPoller) Poll(ctx context.Context) {
	reqs, err := p.cs.PendingControl(ctx)
	if err != nil {
		return
	}
	for _, r := range reqs {
		var err error
		switch r.Action {
		case "approve":
			err = p.apply.Approve(ctx, r.RunID, r.StepKey, r.Approved, r.Reason, r.By)
		case "cancel":
			err = p.apply.Cancel(ctx, r.RunID, r.Reason)
		case "pause":
			err = p.apply.Pause(ctx, r.RunID, r.Reason, r.By)
		case "unpause":
			err = p.apply.Unpause(ctx, r.RunID, r.Reason, r.By)
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
		_ = p.cs.AnswerControl(ctx, r.ID, p.clock.Now(), code, msg)
	}
}

// RequestControl files r with the owner of the database (db names it in messages) and waits,
// up to ControlAnswerWait on c, for its answer: nil when it was applied, else the owner's error
// (its code kept), code timeout when no answer came (the request stays filed), or the cause of
// ctx.
func RequestControl(ctx context.Context, cs store.Controller, c clock.Clock, db string, r store.ControlRequest) error {
	r.CreatedAt = c.Now()
	id, err := cs.RequestControl(ctx, r)
	if err != nil {
		return &run.Error{Code: run.CodeInternal, Message: fmt.Sprintf("asking the owner of %s to %s run %s: %v", db, r.Action, r.RunID, err), Err: err}
	}
	deadline := c.Now().Add(ControlAnswerWait)
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
		if c.Now().After(deadline) {
			return &run.Error{Code: run.CodeTimeout, Message: fmt.Sprintf(
				"the process that owns %s did not answer the %s request for run %s within %s; is it still running? "+
					"(the request stays filed and is applied when it next looks)", db, r.Action, r.RunID, ControlAnswerWait)}
		}
		if err := clock.Sleep(ctx, c, controlAnswerPoll); err != nil {
			return err
		}
	}
}
