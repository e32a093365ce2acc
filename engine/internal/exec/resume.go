package exec

import (
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
