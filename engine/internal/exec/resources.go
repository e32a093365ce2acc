package exec

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/template"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// ResourceGate gives the attempts of tool steps with `resources` their units of the engine's
// scarce resources (docs/guide/resources.md; the engine's gate orders the waiters with
// engine/internal/resources and counts the units in the store).
type ResourceGate interface {
	// Acquire waits until the units of w are held for it and returns the function that gives
	// them back (called once, when the attempt's call returned). When it cannot hold them at
	// once it calls w.Waiting, from Acquire's goroutine, with what it waits for and its place:
	// when it starts waiting and when that changes. When ctx ends first it returns
	// context.Cause(ctx), holding nothing.
	Acquire(ctx context.Context, w ResourceWait) (release func(), err error)
}

// ResourceWait is one attempt asking for units.
type ResourceWait struct {
	// RunID and StepKey name the step instance, Attempt its attempt.
	RunID, StepKey string
	Attempt        int
	// Amounts are the step's `resources`.
	Amounts map[string]int
	// Priority is the run's (its own, else its spec's `priority`); FairShare the key its
	// waiters share a round-robin turn by: the run tree (the run started on its own).
	Priority  int
	FairShare string
	// Waiting is told what the attempt waits for and its place (the step's record while it is
	// run.StepWaitingResources), and message, the same for people ("waiting for houdini ×1:
	// 3rd of 5 in this engine's queue", the step's progress message).
	Waiting func(w run.StepWaiting, message string)
}

// holdResources acquires the units the step's `resources` (or its tool's: stepResources) ask
// for through the executor's gate.
// While it waits, the step instance is run.StepWaitingResources, its record saying what it
// waits for (the waiting of its progress, run.EncodeWaitingProgress) and its progress message
// the same; each is written at once with a step_progress event of that status. Once it holds
// them it is running again, its progress "holds houdini ×1 (waited 2.1 s)", written the same
// way. An attempt whose units are free at once writes nothing more. release gives them back. A
// step without resources, or an executor without a gate, holds nothing.
func (r *runner) holdResources(ctx context.Context, in *inst, call tools.Call) (release func(), err error) {
	sp := in.sp
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
	var since time.Time // when the step started waiting; zero: it did not wait
	attempt := r.attemptBase[in.row.Key] + call.Attempt
	w := ResourceWait{RunID: r.id, StepKey: call.StepKey, Attempt: call.Attempt, Amounts: amounts,
		Priority: r.priority, FairShare: fair,
		Waiting: func(wt run.StepWaiting, msg string) {
			if since.IsZero() {
				since = wt.Since
				r.resWaiting.Add(1) // not taken for a stall (checkStall)
			}
			in.row.Status = run.StepWaitingResources
			p := run.StepProgress{Message: run.Clip(msg, run.MaxProgressMessageBytes), Attempt: attempt}
			in.row.Progress = run.EncodeWaitingProgress(p, wt)
			// A failed write cancels the run (writeFor): ctx ends, and Acquire with it.
			_ = in.save(run.EventStepProgress, in.row.Progress)
		}}
	release, err = gate.Acquire(ctx, w)
	if !since.IsZero() {
		r.resWaiting.Add(-1)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		in.row.Status = run.StepRunning // the attempt fails: its end is written by the caller
		return nil, fmt.Errorf("step %q: taking its resources %s: %w", sp.st.ID, DescribeAmounts(amounts), err)
	}
	if !since.IsZero() {
		in.row.Status = run.StepRunning
		waited := max(r.now().Sub(since), 0).Seconds()
		b, _ := json.Marshal(run.StepProgress{Message: fmt.Sprintf("holds %s (waited %.1f s)", DescribeAmounts(amounts), waited), Attempt: attempt})
		in.row.Progress = b
		if err := in.save(run.EventStepProgress, b); err != nil {
			release()
			if cause := context.Cause(r.ctx); cause != nil {
				return nil, cause // the write stopped the run
			}
			return nil, fmt.Errorf("step %q: recording that it holds its resources: %w", sp.st.ID, err)
		}
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
