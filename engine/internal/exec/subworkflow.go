package exec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Sub-workflows (docs/reference/spec.md, "workflow"): a `kind: workflow` step starts a child run of a
// catalog workflow, waits for it without polling (on the child's Done channel, closed once its
// terminal record is written) and outputs the child's outputs object. The executor does not
// know the catalog nor register runs: it asks Config.Children, which the engine facade
// implements.

// DefaultMaxDepth is how deep sub-workflows nest when Config.MaxDepth is 0: a run started on
// its own is at depth 0, its children at depth 1, and a child deeper than the limit is not
// started (its step fails with kind limit_exceeded).
const DefaultMaxDepth = 8

// MaxDepthCeiling is the largest max_depth the engine config accepts.
const MaxDepthCeiling = 64

// Children starts and finds the child runs of workflow steps. Every method is safe for
// concurrent use.
type Children interface {
	// Join returns the child run a workflow step instance waits for. With req.Resume it is the
	// newest child an earlier execution of the same parent run started for that instance, if
	// any: as it is when completed (its outputs are used, nothing runs again), resumed under its
	// own id when it failed, was cancelled or was interrupted (its completed steps are not run
	// again) or unpaused when it was left paused by an engine stop, joined while it still runs. Otherwise, and when there is none, it is a new run of
	// req.Workflow. An error that is a *ChildError fails the step with its kind; code closed
	// means the engine is stopping.
	Join(ctx context.Context, req ChildRequest) (Child, error)
	// Result reads how a child run ended: its status, its outputs object as JSON (the output
	// of every completed step outside foreach iterations, by step id) and its error.
	Result(ctx context.Context, runID string) (ChildResult, error)
}

// ChildRequest asks Children for the child run of one workflow step instance.
type ChildRequest struct {
	ParentRunID string
	StepKey     string // the parent's step instance key
	Workflow    string // the catalog name
	Inputs      map[string]any
	Origin      string    // the parent's origin: the child runs with the parent's rights
	Env         EnvPolicy // the parent's env policy
	// Resume asks for the instance's child of an earlier execution (see Children.Join).
	Resume bool
}

// Child is a child run being waited for.
type Child struct {
	RunID   string
	StepKey string // the parent's step instance key
	// Run is the live run; nil when the child had already ended (its Result is read at once).
	Run *Run
}

// ChildResult is how a child run ended.
type ChildResult struct {
	Status  run.Status
	Outputs json.RawMessage // a JSON object; "{}" when no step completed
	Error   *run.StepError  // Kind and Message of the run's error, when it did not complete
}

// ChildError is a child run that could not be started: the workflow step fails with Kind
// (not_found, invalid_input, limit_exceeded, …) and Message.
type ChildError struct {
	Kind    string
	Message string
}

func (e *ChildError) Error() string { return e.Message }

// childInterruptedGrace bounds how long a step whose child was interrupted by an engine stop
// waits for its own run to be stopped too (real time: Close stops every run at once).
const childInterruptedGrace = 5 * time.Second

// runWorkflow runs a workflow step: attempts, each a child run (with a per-attempt timeout),
// retried as the step's retry policy says, each retry a new child run.
func (r *runner) runWorkflow(ctx context.Context, in *inst) stepEnd {
	sp := in.sp
	r.leafStart() // a step waiting for its child counts as in flight: the run is running
	defer r.leafEnd()
	if r.x.cfg.Children == nil {
		return stepEnd{status: run.StepFailed, errKind: run.KindError,
			errMsg: fmt.Sprintf("step %s: this engine cannot run sub-workflows", in.row.Key)}
	}
	rp := sp.retry // the step's own: spec and engine defaults are for tool steps only
	maxAttempts := 1
	if rp != nil {
		maxAttempts = rp.MaxAttempts
	}
	// A step instance that ran before (resume) first looks for the child it started, unless the
	// resume forces it to run again.
	resume := r.priorKeys[in.row.Key] && !r.forced[in.row.Key] && !r.forced[sp.id]
	for attempt := 1; ; attempt++ {
		if attempt > 1 { // no new child run starts in a paused run (waitRetry's pause gate)
			if end, ok := r.waitRetry(ctx, in, rp, attempt, nil, nil, false); !ok {
				return end
			}
		}
		end, kind, msg, stop := r.childAttempt(ctx, in, attempt, resume)
		resume = false // a retry is a new child run
		if stop || end.status == run.StepCompleted {
			return end
		}
		in.row.ErrorKind, in.row.ErrorMessage, in.row.ErrorTrace = kind, msg, ""
		if attempt < maxAttempts && rp.IsRetryable(kind) {
			continue
		}
		return stepEnd{status: run.StepFailed, errKind: kind, errMsg: msg}
	}
}

// childAttempt runs one attempt: joins a child run and waits for it. stop is true when the
// step ends without a retry (the parent stopped; end says how); otherwise end is completed or
// the attempt failed with kind and msg.
func (r *runner) childAttempt(ctx context.Context, in *inst, attempt int, resume bool) (end stepEnd, kind, msg string, stop bool) {
	sp := in.sp
	actx := ctx
	var timeout *attemptTimeout
	if sp.timeout > 0 {
		timeout = &attemptTimeout{attempt: attempt, d: sp.timeout}
		var cancel context.CancelFunc
		actx, cancel = clock.WithTimeout(ctx, r.x.cfg.Clock, sp.timeout, timeout)
		defer cancel()
	}
	inputs, _ := sp.args.render(in.f.resolve).(map[string]any)
	r.joinBegin()
	child, err := r.x.cfg.Children.Join(actx, ChildRequest{ParentRunID: r.id, StepKey: in.row.Key, Workflow: sp.st.Workflow,
		Inputs: inputs, Origin: r.origin, Env: r.env, Resume: resume})
	child.StepKey = in.row.Key
	r.joinEnd(child, err == nil && child.Run != nil) // registered before a stop can miss it
	if err != nil {
		if ctx.Err() != nil {
			return r.stoppedEnd(ctx), "", "", true
		}
		var ce *ChildError
		switch {
		case errors.As(err, &ce):
			return stepEnd{}, ce.Kind, fmt.Sprintf("step %s: %s", in.row.Key, ce.Message), false
		case run.CodeOf(err) == run.CodeClosed:
			return r.parentStopping(ctx), "", "", true
		case run.CodeOf(err) == run.CodeStorage:
			return stepEnd{}, run.KindStorage, fmt.Sprintf("step %s: starting the child run of workflow %s: %v", in.row.Key, sp.st.Workflow, err), false
		}
		return stepEnd{}, run.KindError, fmt.Sprintf("step %s: starting the child run of workflow %s: %v", in.row.Key, sp.st.Workflow, err), false
	}
	if child.Run != nil {
		defer r.removeChild(child)
		select {
		case <-child.Run.Done():
		case <-actx.Done():
			switch {
			case ctx.Err() == nil && context.Cause(actx) == timeout:
				child.Run.Cancel(fmt.Sprintf("step %s of parent run %s timed out after %s", in.row.Key, r.id, sp.timeout))
				return stepEnd{}, run.KindTimeout, fmt.Sprintf("step %s: attempt %d timed out after %s; child run %s (workflow %s) was cancelled",
					in.row.Key, attempt, sp.timeout, child.RunID, sp.st.Workflow), false
			default:
				r.stopChild(ctx, child)
				return r.stoppedEnd(ctx), "", "", true
			}
		}
	}
	res, err := r.x.cfg.Children.Result(context.Background(), child.RunID)
	if err != nil && run.CodeOf(err) == run.CodeClosed {
		return r.parentStopping(ctx), "", "", true // the engine closes under both runs
	}
	if err != nil {
		return stepEnd{}, run.KindError, fmt.Sprintf("step %s: reading child run %s: %v", in.row.Key, child.RunID, err), false
	}
	switch res.Status {
	case run.StatusCompleted:
		out := res.Outputs
		if len(out) == 0 {
			out = json.RawMessage("{}")
		}
		return stepEnd{status: run.StepCompleted, hasOutput: true, outputJSON: out, lazy: true}, "", "", true
	case run.StatusInterrupted, run.StatusPaused:
		// The engine stopped the child (a paused child ends paused when its engine stops, to be
		// unpaused later): it stops this run too.
		return r.parentStopping(ctx), "", "", true
	}
	kind, msg = run.KindError, ""
	if res.Error != nil {
		kind, msg = res.Error.Kind, res.Error.Message
		if res.Error.StepKey != "" {
			msg = fmt.Sprintf("step %s: %s", res.Error.StepKey, msg)
		}
	}
	if kind == "" {
		kind = run.KindError
	}
	return stepEnd{}, kind, fmt.Sprintf("step %s: child run %s (workflow %s) %s: %s", in.row.Key, child.RunID, sp.st.Workflow, res.Status, msg), false
}

// joinBegin counts a Children.Join about to start: until joinEnd, stopChildren waits for it.
func (r *runner) joinBegin() {
	r.kidsMu.Lock()
	r.joins++
	r.kidsMu.Unlock()
}

// joinEnd ends a joinBegin; live registers c, a live child run, so that stopping the run stops
// it (stopChildren). The child's first tool call can be in flight before Join returns, so a
// Cancel of the parent at that moment must find the child here, not only in its step.
func (r *runner) joinEnd(c Child, live bool) {
	r.kidsMu.Lock()
	if live {
		if r.kids == nil {
			r.kids = map[string]Child{}
		}
		r.kids[c.RunID] = c
	}
	r.joins--
	if r.joins == 0 && r.joined != nil {
		close(r.joined)
		r.joined = nil
	}
	r.kidsMu.Unlock()
}

func (r *runner) removeChild(c Child) {
	r.kidsMu.Lock()
	delete(r.kids, c.RunID)
	r.kidsMu.Unlock()
}

// stopChildren ends the live child runs of a run being stopped (Cancel, Stop), with its
// cause, and returns once their terminal records are written: a cancelled parent's children
// are cancelled when Cancel returns. It first waits for the Joins in flight (the run's context
// has ended, so they return soon), so a child already started is among them. A child
// registered after this runs is stopped by its step (stopChild), which sees the run's context
// ended.
func (r *runner) stopChildren() {
	r.kidsMu.Lock()
	for r.joins > 0 {
		if r.joined == nil {
			r.joined = make(chan struct{})
		}
		ch := r.joined
		r.kidsMu.Unlock()
		<-ch
		r.kidsMu.Lock()
	}
	kids := make([]Child, 0, len(r.kids))
	for _, c := range r.kids {
		kids = append(kids, c)
	}
	r.kidsMu.Unlock()
	for _, c := range kids {
		r.stopChild(r.ctx, c)
	}
}

// stopChild ends a child whose parent step stopped: with the parent's own cause when the run
// stops (cancelled with it, interrupted by an engine stop), cancelled otherwise (a sibling
// failed under on_any_fail: abort, an enclosing step timed out). It returns once the child's
// terminal record is written.
func (r *runner) stopChild(ctx context.Context, child Child) {
	sc := r.stopCause.Load()
	switch {
	case sc != nil && sc.abandon:
		child.Run.Abandon()
	case sc != nil && sc.run == run.StatusInterrupted:
		child.Run.Stop()
	case sc != nil && sc.run == run.StatusCancelled:
		child.Run.Cancel(fmt.Sprintf("its parent run %s was cancelled (%s)", r.id, sc.msg))
	default:
		_, _, why := r.stopped(ctx)
		child.Run.Cancel(fmt.Sprintf("step %s of its parent run %s stopped (%s)", child.StepKey, r.id, why))
	}
}

// parentStopping is the end of a step whose child was refused or interrupted because the
// engine is stopping: it waits (a bounded while) for the run's own stop, so the run ends
// interrupted, not failed.
func (r *runner) parentStopping(ctx context.Context) stepEnd {
	t := time.NewTimer(childInterruptedGrace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return r.stoppedEnd(ctx)
	case <-t.C:
	}
	return stepEnd{status: run.StepFailed, errKind: KindInterrupted, errMsg: "the child run was interrupted: the engine is stopping"}
}
