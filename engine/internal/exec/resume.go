package exec

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// PlanResume returns the step instances of an earlier execution of run runID that a resume
// reuses (Params.Prior): prior without the instances force names and without every instance
// that encloses one (its foreach, parallel or branch), so those run again. force holds step ids
// ("export": every instance of it) and instance keys ("per_file[3].export"). An entry that
// names neither a step id of s nor an instance of prior is refused with code invalid_request
// (a typo would otherwise force nothing, and a completed run would "resume" without running
// anything). prior is not modified; with no force it is returned as is.
func PlanResume(runID string, s *spec.Spec, prior []store.Step, force []string) ([]store.Step, error) {
	if len(force) == 0 {
		return prior, nil
	}
	if err := checkForced(runID, s, prior, force); err != nil {
		return nil, err
	}
	return withoutForced(prior, force), nil
}

func checkForced(runID string, s *spec.Spec, prior []store.Step, force []string) error {
	known := make(map[string]bool, len(prior))
	s.Walk(func(st *spec.Step, _ []*spec.Step) bool {
		known[st.ID] = true
		return true
	})
	for _, st := range prior {
		known[st.Key] = true
	}
	for _, f := range force {
		if known[f] {
			continue
		}
		return &run.Error{Code: run.CodeInvalidRequest,
			Message: fmt.Sprintf("force_steps: run %s has no step or step instance %q; name a step id (e.g. \"export\") or an instance key of the run (e.g. \"per_file[3].export\")", runID, f),
			Details: map[string]any{"force_step": f}}
	}
	return nil
}

// withoutForced drops the forced instances and every instance that encloses one; other
// instances are kept, in order, in a new slice.
func withoutForced(steps []store.Step, force []string) []store.Step {
	forced := make(map[string]bool, len(force))
	for _, f := range force {
		forced[f] = true
	}
	drop := map[string]bool{}
	for _, st := range steps {
		if forced[st.Key] || forced[st.StepID] {
			drop[st.Key] = true
			for _, anc := range EnclosingKeys(st.Key) {
				drop[anc] = true
			}
		}
	}
	out := steps[:0:0]
	for _, st := range steps {
		if !drop[st.Key] {
			out = append(out, st)
		}
	}
	return out
}

// EventLister reads a run's events (a store.Store is one).
type EventLister interface {
	ListEvents(ctx context.Context, f store.EventFilter) ([]run.Event, error)
}

// FailingWhenInterrupted returns the run's error when the run was interrupted while its
// on_failure steps ran (its last on_failure_started event comes after its last start or
// resume), else nil: a resume then runs only its on_failure steps (Params.OnFailureOnly). It
// reads the run's events a page at a time; an error reading them is code internal.
func FailingWhenInterrupted(ctx context.Context, events EventLister, runID string) (*store.RunError, error) {
	const page = 2000
	var failing *store.RunError
	after := uint64(0)
	for {
		evs, err := events.ListEvents(ctx, store.EventFilter{RunID: runID, AfterSeq: after, Limit: page})
		if err != nil {
			return nil, &run.Error{Code: run.CodeInternal, Message: fmt.Sprintf("run %s: reading its events: %v", runID, err), Err: err}
		}
		for _, ev := range evs {
			switch ev.Type {
			case run.EventWorkflowStarted, run.EventWorkflowResumed:
				failing = nil
			case run.EventOnFailureStarted:
				var d struct {
					Error *store.RunError `json:"error"`
				}
				if json.Unmarshal(ev.Detail, &d) == nil && d.Error != nil {
					failing = d.Error
				}
			}
			after = ev.Seq
		}
		if len(evs) < page {
			return failing, nil
		}
	}
}
