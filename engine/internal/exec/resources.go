package exec

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// ResourceGate gives the attempts of tool steps with `resources` their units of the engine's
// scarce resources (docs/guide/resources.md; the engine's gate orders the waiters with
// engine/internal/resources and counts the units in the store).
type ResourceGate interface {
	// Acquire waits until the units of w are held for it and returns the function that gives
	// them back (called once, when the attempt's call returned). While it waits it calls
	// w.Waiting with what it waits for and its place, when it starts waiting and when that
	// changes. When ctx ends first it returns context.Cause(ctx), holding nothing.
	Acquire(ctx context.Context, w ResourceWait) (release func(), err error)
}

// ResourceWait is one attempt asking for units.
type ResourceWait struct {
	// RunID and StepKey name the step instance, Attempt its attempt.
	RunID, StepKey string
	Attempt        int
	// Amounts are the step's `resources`.
	Amounts map[string]int
	// Priority is the run's (its spec's `priority`); FairShare the key its waiters share a
	// round-robin turn by: the run tree (the run started on its own).
	Priority  int
	FairShare string
	// Waiting is told what the attempt waits for ("waiting for houdini ×1: 3rd of 5 in the
	// queue"), as the step's progress message.
	Waiting func(message string)
}

// holdResources acquires the units the step's `resources` (or its tool's: stepResources) ask for through the executor's gate,
// showing the wait as the attempt's progress message; release gives them back. A step without
// resources, or an executor without a gate, holds nothing.
func (r *runner) holdResources(ctx context.Context, sp *stepPlan, call tools.Call) (release func(), err error) {
	gate := r.x.cfg.Resources
	amounts := r.stepResources(sp)
	if gate == nil || len(amounts) == 0 {
		return func() {}, nil
	}
	fair := r.id
	if len(r.ancestors) > 0 {
		fair = r.ancestors[0]
	}
	if r.fairShare != "" {
		// Validated with the spec: it renders from what the run had when it started.
		if t, err := template.Parse(r.fairShare); err == nil {
			fair = "fair_share:" + template.Stringify(t.Render(r.root.resolve))
		}
	}
	rep := call.Reporter
	w := ResourceWait{RunID: r.id, StepKey: call.StepKey, Attempt: call.Attempt, Amounts: amounts,
		Priority: r.priority, FairShare: fair,
		Waiting: func(msg string) {
			if rep != nil {
				rep.Report(tools.Report{Progress: &run.StepProgress{Message: msg}})
			}
		}}
	release, err = gate.Acquire(ctx, w)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("step %q: taking its resources %s: %w", sp.st.ID, DescribeAmounts(amounts), err)
	}
	return release, nil
}

// DescribeAmounts is amounts for messages, by name: "gpu ×2, houdini ×1".
func DescribeAmounts(amounts map[string]int) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(amounts)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", name, amounts[name]))
	}
	return strings.Join(parts, ", ")
}
