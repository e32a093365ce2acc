package engine

import (
	"context"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// ResumeOptions tune Resume.
type ResumeOptions struct {
	// ForceSteps names step ids or step instance keys to run again even though they completed
	// ("export" re-runs every iteration's export; "per_file[3].export" only that one). The steps
	// that enclose a forced one (its foreach, parallel or branch) run again too, reusing their
	// other completed instances. A forced tool step is called even when its idempotency key has
	// a cached output (that is what forcing is for); its new output replaces the cached one.
	ForceSteps []string `json:"force_steps,omitempty"`
	// ExpectedSpecHash, when set, refuses to resume (code spec_changed) unless the run's spec
	// has this hash: the caller checks it resumes the pipeline it thinks it resumes.
	ExpectedSpecHash string `json:"expected_spec_hash,omitempty"`
	// By names who resumes the run (the dashboard's user, the Python caller's login name, "mcp",
	// "engine ID (takeover)"): the workflow_resumed event's detail has {"by": By}, shown in the
	// run's resume history (docs/reference/cli/inspecting.md "show"). "" records no name.
	By string `json:"-"`
}

// Resume runs again a failed, interrupted or cancelled run (or a completed one when ForceSteps
// is given) under the same id, reusing every completed step instance: those are not called
// again and their outputs feed the steps that run. It returns the run id (the same) at once;
// use Wait. A spec's on_failure steps are not reused: they run again, all of them, only if the
// resumed run fails again; but a run interrupted while they ran (and resumed without
// ForceSteps) only finishes them, with the run's error, and ends failed again. Errors:
// not_found, not_resumable (still running or paused, or completed without ForceSteps),
// spec_changed, unknown_tool (its host tools must be registered again after a restart).
func (e *Engine) Resume(ctx context.Context, runID string, opts ResumeOptions) (string, error) {
	return e.resume(ctx, runID, opts, nil)
}

// resume is Resume; with unpause, of a paused run that no engine runs (Unpause).
func (e *Engine) resume(ctx context.Context, runID string, opts ResumeOptions, unpause *exec.PauseInfo) (string, error) {
	if e.isClosed() {
		return "", errClosed()
	}
	if e.cfg.ReadOnly {
		return "", e.errReadOnly("resume a run")
	}
	if h := e.live(runID); h != nil && !isDone(h.Done()) {
		return "", &run.Error{Code: run.CodeNotResumable, Message: fmt.Sprintf("run %s is still running; cancel it or wait for it to end before resuming", runID)}
	}
	if e.unsavedFor(runID) != nil {
		e.writeUnsaved(ctx) // its end must be stored before it runs again
		if e.unsavedFor(runID) != nil {
			return "", &run.Error{Code: run.CodeStorage, Message: fmt.Sprintf("run %s ended but the database does not take its end yet; free disk space or fix the storage, then resume it", runID)}
		}
	}
	rec, err := e.store.GetRun(ctx, runID)
	if err != nil {
		return "", notFound(runID, err)
	}
	switch rec.Status {
	case run.StatusFailed, run.StatusInterrupted, run.StatusCancelled:
		if unpause != nil {
			return "", pauseFinished("unpause", runID, rec.Status)
		}
	case run.StatusPaused:
		if unpause == nil {
			return "", &run.Error{Code: run.CodeNotResumable, Details: map[string]any{"status": string(rec.Status)},
				Message: fmt.Sprintf("run %s is paused; unpause it to let it go on", runID)}
		}
	case run.StatusCompleted:
		if len(opts.ForceSteps) == 0 {
			return "", &run.Error{Code: run.CodeNotResumable, Message: fmt.Sprintf("run %s completed; name the steps to run again with force_steps", runID),
				Details: map[string]any{"status": string(rec.Status)}}
		}
	default:
		return "", &run.Error{Code: run.CodeNotResumable, Message: fmt.Sprintf("run %s is %s; only failed, interrupted or cancelled runs resume", runID, rec.Status)}
	}
	if opts.ExpectedSpecHash != "" && opts.ExpectedSpecHash != rec.SpecHash {
		return "", &run.Error{Code: run.CodeSpecChanged, Message: fmt.Sprintf("run %s was started from spec %s, not %s; start a new run for the changed spec", runID, short(rec.SpecHash), short(opts.ExpectedSpecHash)),
			Details: map[string]any{"spec_hash": rec.SpecHash, "expected_spec_hash": opts.ExpectedSpecHash}}
	}
	s, err := spec.Parse(rec.SpecJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + runID})
	if err != nil {
		return "", &run.Error{Code: run.CodeInternal, Message: fmt.Sprintf("run %s: its stored spec no longer parses: %v", runID, err), Err: err}
	}
	if err := e.checkTools(s); err != nil {
		return "", err
	}
	if err := e.acquire(ctx, runID); err != nil { // a shared database: one engine resumes it
		return "", err
	}
	var inputs, trigger map[string]any
	if len(rec.Inputs) > 0 {
		if err := (*spec.Object)(&inputs).UnmarshalJSON(rec.Inputs); err != nil {
			return "", &run.Error{Code: run.CodeInternal, Message: "decoding the stored inputs: " + err.Error(), Err: err}
		}
	}
	if len(rec.Trigger) > 0 {
		_ = (*spec.Object)(&trigger).UnmarshalJSON(rec.Trigger)
	}
	prior, err := e.store.ListSteps(ctx, runID)
	if err != nil {
		return "", notFound(runID, err)
	}
	if prior, err = exec.PlanResume(runID, s, prior, opts.ForceSteps); err != nil {
		return "", err
	}
	var ancestors []string // a sub-workflow's child run (subflows.go)
	if rec.ParentRunID != "" {
		if ancestors, err = e.ancestors(ctx, rec.ParentRunID); err != nil {
			return "", err
		}
	}
	var onFailureOnly *store.RunError
	if rec.Status == run.StatusInterrupted && len(s.OnFailure) > 0 && len(opts.ForceSteps) == 0 {
		if onFailureOnly, err = exec.FailingWhenInterrupted(ctx, e.store, runID); err != nil {
			return "", err
		}
	}
	if err := e.start(ctx, exec.Params{
		RunID: runID, Spec: s, Inputs: inputs, Origin: rec.Origin, Trigger: trigger, Priority: rec.Priority,
		Env:   exec.EnvPolicy{All: rec.EnvAllow == nil, Allow: rec.EnvAllow},
		Prior: prior, Force: opts.ForceSteps, Resume: true, ResumedBy: opts.By, Ancestors: ancestors,
		OnFailureOnly: onFailureOnly, Unpause: unpause,
	}); err != nil {
		return "", err
	}
	return runID, nil
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}
