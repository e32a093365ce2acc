package dryrun

import (
	"context"
	"fmt"
	"slices"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// Config is what a dry run needs besides the run: the executor's environment and limits, and the
// answers to give.
type Config struct {
	Environ func() []string // the process environment for {{env.X}}; nil = os.Environ
	Limits  exec.Limits     // as a real run's
	// Fixtures answer tool and workflow steps (Caller); Approvals decide approve steps by
	// instance key, else step id: false denies. An approval not named is granted at once, by
	// "dry-run".
	Fixtures  map[string]any
	Approvals map[string]bool
}

// Outcome is what a dry run did.
type Outcome struct {
	Status run.Status
	Error  *store.RunError // why the run did not complete; nil when it did
	Steps  []store.Step    // the rows of every step instance reached, as the executor wrote them
	Calls  map[string]Call // the Caller's answers, by step instance key
	// Prompts and Decided are the rendered prompt and the decision of every approve step
	// instance reached, by instance key.
	Prompts map[string]string
	Decided map[string]bool
}

// Run runs p (its RunID is set to RunID) on an executor of its own, with a memory store, the
// real clock, and a router that sends every tool call to a Caller of cfg.Fixtures: no tool is
// called and nothing outside is written. Approvals are decided as they are reached. p.Spec must
// be valid (the caller validates it: the executor does not). When ctx ends first the run is
// cancelled and ctx's cause returned; a failed start is returned as is.
func Run(ctx context.Context, cfg Config, p exec.Params) (*Outcome, error) {
	caller := NewCaller(cfg.Fixtures)
	wake := make(chan struct{}, 1)
	st := storeopen.Memory()
	defer func() { _ = st.Close() }()
	x := exec.New(exec.Config{
		Store: st, Clock: clock.New(), Router: tools.NewDryRouter(caller), Environ: cfg.Environ,
		Limits: cfg.Limits, Children: caller,
		OnWrite: func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		},
	})
	p.RunID = RunID
	h, err := x.Start(ctx, p)
	if err != nil {
		return nil, err
	}
	out := &Outcome{Prompts: map[string]string{}, Decided: map[string]bool{}}
	for done := false; !done; {
		select {
		case <-h.Done():
			done = true
		case <-ctx.Done():
			h.Cancel("the dry run's caller gave up")
			return nil, context.Cause(ctx)
		case <-wake:
			for _, a := range h.Approvals() {
				approved := true
				if v, ok := cfg.Approvals[a.StepKey]; ok {
					approved = v
				} else if v, ok := cfg.Approvals[StepID(a.StepKey)]; ok {
					approved = v
				}
				out.Prompts[a.StepKey], out.Decided[a.StepKey] = a.Prompt, approved
				reason, by := "dry run: approved automatically", "dry-run"
				if !approved {
					reason, by = "the dry run's approvals deny it", ""
				}
				_ = h.Approve(a.StepKey, approved, reason, by) // answered already: nothing to do
			}
		}
	}
	rec, err := st.GetRun(context.Background(), RunID)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInternal, Message: "reading the dry run: " + err.Error(), Err: err}
	}
	if out.Steps, err = st.ListSteps(context.Background(), RunID); err != nil {
		return nil, &run.Error{Code: run.CodeInternal, Message: "reading the dry run's steps: " + err.Error(), Err: err}
	}
	out.Status, out.Error = rec.Status, rec.Error
	if u := h.Unsaved(); u != nil { // cannot happen with a memory store; kept exact all the same
		out.Status, out.Error = u.Status, u.Error
	}
	out.Calls = caller.Calls()
	return out, nil
}

// Warnings names the fixtures and approvals that match no step or tool of s: a fixture must name
// a tool or workflow step (by instance key or step id), a tool ("dcc/tool" too for a
// tool_remote step) or a workflow a workflow step runs; an approval an approve step. Each
// sentence says it is not used, with a "did you mean" for a likely typo; fixtures first, each
// group sorted.
func Warnings(s *spec.Spec, fixtures map[string]any, approvals map[string]bool) []string {
	var toolIDs, approveIDs, toolNames []string
	s.Walk(func(st *spec.Step, _ []*spec.Step) bool {
		switch st.Kind {
		case spec.KindTool, spec.KindToolRemote:
			toolIDs = append(toolIDs, st.ID)
			toolNames = append(toolNames, st.Tool)
			if st.Kind == spec.KindToolRemote {
				toolNames = append(toolNames, st.DCC+"/"+st.Tool)
			}
		case spec.KindWorkflow:
			toolIDs = append(toolIDs, st.ID)
			toolNames = append(toolNames, st.Workflow)
		case spec.KindApprove:
			approveIDs = append(approveIDs, st.ID)
		}
		return true
	})
	var out []string
	check := func(what string, names []string, ids, others []string) {
		slices.Sort(names)
		for _, name := range names {
			if slices.Contains(ids, StepID(name)) || slices.Contains(others, name) {
				continue
			}
			msg := fmt.Sprintf("%s %q names no %s of the spec, so it is not used", what, name,
				map[bool]string{true: "tool step or tool", false: "approve step"}[what == "fixture"])
			if sug := yamltext.Suggest(StepID(name), append(slices.Clone(ids), others...)); sug != "" {
				msg += fmt.Sprintf("; did you mean %q?", sug)
			}
			out = append(out, msg)
		}
	}
	fixtureNames := make([]string, 0, len(fixtures))
	for k := range fixtures {
		fixtureNames = append(fixtureNames, k)
	}
	approvalNames := make([]string, 0, len(approvals))
	for k := range approvals {
		approvalNames = append(approvalNames, k)
	}
	check("fixture", fixtureNames, toolIDs, toolNames)
	check("approval", approvalNames, approveIDs, nil)
	return out
}
