package exec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// stopCause is the cause a step context is cancelled with. It says what the steps still in
// flight become and, for run-level causes, what the run becomes.
type stopCause struct {
	step run.StepStatus // the status of interrupted step instances
	run  run.Status     // the run's status; "" for causes below the run (aborts, step timeouts)
	kind string         // the error kind recorded on those instances
	msg  string
	// abandon: the run stops here without writing anything more (errLeaseLost).
	abandon bool
}

func (c *stopCause) Error() string { return c.msg }

// KindInterrupted is the error kind of steps and runs interrupted by an engine stop.
const KindInterrupted = "interrupted"

// ErrEngineStop is the cause of a run stopped by Engine.Close: it becomes interrupted.
var ErrEngineStop error = &stopCause{step: run.StepInterrupted, run: run.StatusInterrupted, kind: KindInterrupted,
	msg: "interrupted: the engine stopped while the run was in progress"}

// errLeaseLost is the cause of a run abandoned by Run.Abandon: another engine holds (or may
// take) its lease, so this one stops orchestrating it and writes nothing more of it.
var errLeaseLost = &stopCause{step: run.StepInterrupted, run: run.StatusInterrupted, kind: KindInterrupted, abandon: true,
	msg: "interrupted: this engine lost the run's lease to another engine"}

// errLeaseRefused is errLeaseLost found by the run itself: the store refused one of its writes
// (store.ErrLeaseLost) before a heartbeat told the engine (Run.LeaseRefused).
var errLeaseRefused = &stopCause{step: run.StepInterrupted, run: run.StatusInterrupted, kind: KindInterrupted, abandon: true,
	msg: errLeaseLost.msg}

// errConnectionLost is the cause of a run whose store write lost its database connection
// (store.ErrConnectionLost): the write may or may not be applied, so the engine stops
// orchestrating the run without writing anything more of it, as for a lost lease; its lease
// expires and an engine (this one or another) takes it over through the resume path once the
// database is back.
var errConnectionLost = &stopCause{step: run.StepInterrupted, run: run.StatusInterrupted, kind: KindInterrupted, abandon: true,
	msg: "interrupted: this engine lost its database connection while writing the run; an engine resumes it once the database is back and its lease expired"}

// Abandoned reports whether cause (a step context's context.Cause) is the run being given up
// without a record (a lost lease, a write whose outcome is unknown): another engine, or this
// one, takes it over through the resume path, so work left in flight for it on a shared queue
// is left there for the resume to adopt rather than cancelled.
func Abandoned(cause error) bool {
	var sc *stopCause
	return errors.As(cause, &sc) && sc.abandon
}

func userCancel(reason string) *stopCause {
	msg := "cancelled"
	if reason != "" {
		msg += ": " + reason
	}
	return &stopCause{step: run.StepCancelled, run: run.StatusCancelled, kind: run.KindCancelled, msg: msg}
}

func storeFailure(err error) *stopCause {
	return &stopCause{step: run.StepFailed, run: run.StatusFailed, kind: run.KindStorage, msg: "store write failed: " + err.Error()}
}

func siblingAbort(key string) *stopCause {
	return &stopCause{step: run.StepCancelled, kind: run.KindCancelled,
		msg: fmt.Sprintf("cancelled: %s failed and on_any_fail is abort", key)}
}

func stepTimeout(key string, d time.Duration) *stopCause {
	return &stopCause{step: run.StepCancelled, kind: run.KindCancelled,
		msg: fmt.Sprintf("cancelled: step %s timed out after %s", key, d)}
}

// attemptTimeout is the cause of an attempt that ran out of time.
type attemptTimeout struct {
	attempt int
	d       time.Duration
}

func (e *attemptTimeout) Error() string {
	return fmt.Sprintf("attempt %d timed out after %s", e.attempt, e.d)
}

// stopped describes how a step whose context ended stops: its status, error kind and message.
func stopped(ctx context.Context) (run.StepStatus, string, string) {
	cause := context.Cause(ctx)
	var sc *stopCause
	if errors.As(cause, &sc) {
		return sc.step, sc.kind, sc.msg
	}
	if cause == nil {
		cause = context.Canceled
	}
	return run.StepCancelled, run.KindCancelled, "cancelled: " + cause.Error()
}
