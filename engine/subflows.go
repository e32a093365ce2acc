package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Sub-workflows (docs/reference/spec.md, "workflow"): the engine side of `kind: workflow` steps. The
// executor asks children (exec.Children) for the child run of a step instance; the child is a
// real run of a catalog workflow, registered like any other (Cancel, Status, Close reach it),
// whose record names its parent run and step (RunInfo.ParentRunID, ParentStepKey).

// ChildRun is a child run of a workflow step, as Status lists it.
type ChildRun struct {
	ID      string     `json:"run_id"`
	StepKey string     `json:"step_key"` // the parent's step instance that started it
	Name    string     `json:"name"`
	Status  run.Status `json:"status"`
}

// children implements exec.Children for the engine.
type children struct{ e *Engine }

var _ exec.Children = children{}

// maxDepth is the engine's max_depth, default applied.
func (e *Engine) maxDepth() int {
	if e.cfg.MaxDepth > 0 {
		return e.cfg.MaxDepth
	}
	return exec.DefaultMaxDepth
}

// Join implements exec.Children.
func (c children) Join(ctx context.Context, req exec.ChildRequest) (exec.Child, error) {
	e := c.e
	if req.Resume {
		if child, ok, err := c.rejoin(ctx, req); ok || err != nil {
			return child, err
		}
	}
	s, ok := e.Workflow(req.Workflow)
	if !ok {
		msg := fmt.Sprintf("no workflow named %q is registered", req.Workflow)
		if sug := e.catalog.Suggest(req.Workflow); sug != "" {
			msg += fmt.Sprintf("; did you mean %q?", sug)
		}
		return exec.Child{}, &exec.ChildError{Kind: run.KindNotFound, Message: msg + "; register it (register_workflow, --workflows) before the run reaches this step"}
	}
	chain, err := e.ancestors(ctx, req.ParentRunID)
	if err != nil {
		return exec.Child{}, err
	}
	if depth := len(chain) + 1; depth > e.maxDepth() {
		return exec.Child{}, &exec.ChildError{Kind: exec.KindLimitExceeded, Message: fmt.Sprintf(
			"starting workflow %s would nest sub-workflows %d deep, more than the limit of %d (engine config max_depth; runs: %s); "+
				"flatten the chain of workflows, or raise max_depth (up to %d)",
			req.Workflow, depth, e.maxDepth(), strings.Join(chain, " → "), exec.MaxDepthCeiling)}
	}
	if err := s.Validate(); err != nil {
		return exec.Child{}, &exec.ChildError{Kind: run.KindInvalidInput, Message: fmt.Sprintf("workflow %s is not valid: %v", req.Workflow, err)}
	}
	inputs, err := exec.CheckInputs(s, req.Inputs)
	if err != nil {
		return exec.Child{}, &exec.ChildError{Kind: run.KindInvalidInput, Message: fmt.Sprintf("the inputs of workflow %s: %v", req.Workflow, err)}
	}
	if err := e.checkTools(s); err != nil {
		return exec.Child{}, &exec.ChildError{Kind: run.KindNotFound, Message: err.Error()}
	}
	id := e.newRunID()
	if err := e.start(ctx, exec.Params{RunID: id, Spec: s, Inputs: inputs, Origin: req.Origin, Env: req.Env,
		ParentRunID: req.ParentRunID, ParentStepKey: req.StepKey, Ancestors: chain}); err != nil {
		return exec.Child{}, err
	}
	return exec.Child{RunID: id, Run: e.live(id)}, nil
}

// rejoin finds the newest child of the step instance from an earlier execution of its parent:
// ok is false when there is none.
func (c children) rejoin(ctx context.Context, req exec.ChildRequest) (exec.Child, bool, error) {
	e := c.e
	kids, err := e.store.ListRuns(ctx, store.RunFilter{ParentRunID: req.ParentRunID})
	if err != nil {
		return exec.Child{}, false, notFound(req.ParentRunID, err)
	}
	for _, k := range kids { // newest first
		if k.ParentStepKey != req.StepKey {
			continue
		}
		if h := e.live(k.ID); h != nil && !isDone(h.Done()) {
			return exec.Child{RunID: k.ID, Run: h}, true, nil
		}
		if u := e.unsavedFor(k.ID); u != nil {
			k.Status = u.Status
		}
		switch k.Status {
		case run.StatusCompleted:
			return exec.Child{RunID: k.ID}, true, nil
		case run.StatusFailed, run.StatusCancelled, run.StatusInterrupted, run.StatusPaused:
			// A child paused on its own that outlived its engine is unpaused: resuming the
			// parent resumes the chain under it.
			var unpause *exec.PauseInfo
			if k.Status == run.StatusPaused {
				unpause = &exec.PauseInfo{Reason: fmt.Sprintf("its parent run %s was resumed", req.ParentRunID)}
			}
			if _, err := e.resume(ctx, k.ID, ResumeOptions{}, unpause); err != nil {
				if run.CodeOf(err) == run.CodeClosed {
					return exec.Child{}, false, err
				}
				return exec.Child{}, false, &exec.ChildError{Kind: childKind(err), Message: fmt.Sprintf("resuming child run %s: %v", k.ID, err)}
			}
			return exec.Child{RunID: k.ID, Run: e.live(k.ID)}, true, nil
		}
		return exec.Child{}, false, &exec.ChildError{Kind: run.KindError,
			Message: fmt.Sprintf("child run %s is %s in the database but not running in this engine", k.ID, k.Status)}
	}
	return exec.Child{}, false, nil
}

// cancelStoredChildren cancels the child runs of parentID, a paused run that no engine ran and
// that was just cancelled, that have not ended: a paused child left by an engine stop is
// cancelled in the store, a child running here is cancelled live (an interrupted one stays
// interrupted: a resume of the parent resumes it). Their own children follow, down to
// MaxDepthCeiling levels.
func (e *Engine) cancelStoredChildren(ctx context.Context, parentID, reason string, depth int) error {
	if depth >= exec.MaxDepthCeiling {
		return nil
	}
	kids, err := e.store.ListRuns(ctx, store.RunFilter{ParentRunID: parentID})
	if err != nil {
		return notFound(parentID, err)
	}
	why := fmt.Sprintf("its parent run %s was cancelled (%s)", parentID, reason)
	for _, k := range kids {
		if h := e.live(k.ID); h != nil && !isDone(h.Done()) {
			h.Cancel(why) // a running child stops its own children
			continue
		}
		if k.Status != run.StatusPaused {
			continue
		}
		if err := e.cancelPaused(ctx, k, why); err != nil {
			return err
		}
		if err := e.cancelStoredChildren(ctx, k.ID, why, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// childKind is the step error kind of an error code met while starting or resuming a child.
func childKind(err error) string {
	switch run.CodeOf(err) {
	case run.CodeNotFound, run.CodeUnknownTool:
		return run.KindNotFound
	case run.CodeInvalidInput, run.CodeValidationFailed, run.CodeSpecChanged:
		return run.KindInvalidInput
	case run.CodeStorage:
		return run.KindStorage
	}
	return run.KindError
}

// ancestors returns the ids of runID and of the runs above it, outermost first
// (runtree.Registry.Ancestors).
func (e *Engine) ancestors(ctx context.Context, runID string) ([]string, error) {
	return e.trees.Ancestors(ctx, runID)
}

// Result implements exec.Children.
func (c children) Result(ctx context.Context, runID string) (exec.ChildResult, error) {
	info, err := c.e.status(WithRawOutputs(ctx), runID)
	if err != nil {
		return exec.ChildResult{}, err
	}
	res := exec.ChildResult{Status: info.Status, Outputs: json.RawMessage("{}")}
	if info.Outputs != nil {
		if res.Outputs, err = json.Marshal(info.Outputs); err != nil {
			return exec.ChildResult{}, err
		}
	}
	if info.Error != nil {
		res.Error = &run.StepError{RunID: runID, Kind: info.Error.Kind, Message: info.Error.Message, StepKey: info.Error.StepKey}
	}
	return res, nil
}

// childRuns lists the child runs of a run, oldest first; nil, without a query, when its spec has
// no workflow step.
func (e *Engine) childRuns(ctx context.Context, parent store.Run) ([]ChildRun, error) {
	if !bytes.Contains(parent.SpecJSON, []byte(`"kind":"workflow"`)) { // canonical JSON
		return nil, nil
	}
	recs, err := e.store.ListRuns(ctx, store.RunFilter{ParentRunID: parent.ID})
	if err != nil {
		return nil, err
	}
	out := make([]ChildRun, 0, len(recs))
	for i := len(recs) - 1; i >= 0; i-- {
		rec := recs[i]
		st := rec.Status
		if u := e.unsavedFor(rec.ID); u != nil {
			st = u.Status
		}
		out = append(out, ChildRun{ID: rec.ID, StepKey: rec.ParentStepKey, Name: rec.Name, Status: st})
	}
	return out, nil
}

// newestChildren maps each step key to its newest child run id.
func newestChildren(kids []ChildRun) map[string]string {
	if len(kids) == 0 {
		return nil
	}
	m := make(map[string]string, len(kids))
	for _, c := range kids { // oldest first: the newest wins
		m[c.StepKey] = c.ID
	}
	return m
}

// checkWorkflows checks, before a run of s starts, the workflows its workflow steps name,
// through the catalog as it is now (catalog.CheckWorkflows): each must be registered (else
// not_found, with a "did you mean"), use registered tools (unknown_tool), and none may lead back
// to a workflow on the way (a *spec.ValidationError with a problem of code cycle).
func (e *Engine) checkWorkflows(s *spec.Spec) error {
	return e.catalog.CheckWorkflows(s, e.catalog.SubmittedName(s), e.checkTools)
}
