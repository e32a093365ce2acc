package engine

import (
	"context"
	"fmt"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec/dryrun"
	"github.com/dcc-flow/dcc-flow/engine/internal/toolcheck"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// DryRunID is the run id a dry run's templates see as {{run.id}}: a dry run has no run record.
const DryRunID = dryrun.RunID

// Where the output of a dry run's tool step came from (DryStep.OutputFrom).
const (
	FixtureByKey    = dryrun.FromKey    // the fixture named by the step instance key, "per_file[1].export"
	FixtureByStepID = dryrun.FromStepID // the fixture named by the step id, "export"
	FixtureByTool   = dryrun.FromTool   // the fixture named by the tool ("maya__export_fbx"; "dcc/tool" or "tool" for tool_remote)
	// FixtureByWorkflow is the fixture named by the workflow a workflow step runs ("publish_asset").
	FixtureByWorkflow = dryrun.FromWorkflow
	OutputFromEcho    = dryrun.FromEcho // flow__echo with no fixture: its args, as a real run gives
	OutputFromNone    = dryrun.FromNone // no fixture: null
)

// DryRunRequest describes a dry run: the run that StartRequest describes, walked without calling
// any tool.
type DryRunRequest struct {
	StartRequest
	// Fixtures give the outputs of tool and tool_remote steps. A step's output is the fixture of
	// its instance key ("per_file[1].export"), else of its step id ("export"), else of its tool
	// name ("maya__export_fbx"; a tool_remote step looks up "dcc/tool", then "tool"): the most
	// specific name wins. A fixture is the output as is (any JSON value). A step no fixture names
	// outputs null, except the built-in flow__echo, whose output is its args as in a real run (it
	// has no side effects). A workflow step (sub-workflow) starts no child run: it is answered
	// the same way, its instance key, then its step id, then the name of the workflow it runs
	// ("publish_asset"); null when none names it.
	Fixtures map[string]any
	// Approvals decide approve steps by instance key, else step id: false denies (the step fails
	// with kind denied and what depends on it is skipped, as in a real run). Every approval not
	// named is granted at once, by "dry-run".
	Approvals map[string]bool
}

// DryRunResult is what a dry run found: the steps in the order they would run, each with the
// arguments it would receive.
type DryRunResult struct {
	Name     string `json:"name"`
	SpecHash string `json:"spec_hash"`
	// Status is completed, or failed when a step would fail even with these fixtures (a denied
	// approval, a foreach whose items are not a list, a branch condition that cannot be read).
	Status run.Status         `json:"status"`
	Error  *flowtype.RunError `json:"error,omitempty"`
	Inputs map[string]any     `json:"inputs"`
	// Steps are every step instance reached, in the order a run would start them: a list in
	// dependency order (ties in document order), each foreach iteration after the one before
	// (a real run may run them concurrently), a control step before its children.
	Steps []DryStep `json:"steps"`
	// Outputs maps the id of every completed step outside foreach iterations to its output.
	Outputs map[string]any `json:"outputs"`
	// UnknownTools lists the tool names (and "dcc/tool" of tool_remote steps) this engine has no
	// tool or remote for, sorted: a real run would be refused with unknown_tool. Suggestions maps
	// some of them to the registered name they are likely a typo of.
	UnknownTools []string          `json:"unknown_tools,omitempty"`
	Suggestions  map[string]string `json:"suggestions,omitempty"`
	// Warnings are sentences about the request: fixtures and approvals that name no step or tool
	// of the spec (a typo, most likely), and workflow steps naming a workflow that is not
	// registered (a real run would be refused with not_found).
	Warnings []string `json:"warnings,omitempty"`
}

// DryStep is one step instance of a dry run.
type DryStep struct {
	// Order numbers the instances that would call a tool or wait for an approval, from 1, in
	// Steps' order; 0 for control steps (foreach, parallel, branch) and skipped instances.
	Order  int            `json:"order,omitempty"`
	Key    string         `json:"key"`
	StepID string         `json:"step_id"`
	Kind   string         `json:"kind"`
	Depth  int            `json:"depth"` // nesting: 0 for a top-level step, +1 inside a control step
	Status run.StepStatus `json:"status"`
	Tool   string         `json:"tool,omitempty"`
	DCC    string         `json:"dcc,omitempty"` // tool_remote: the remote
	// UnknownTool is true when this engine has no such tool (or remote): see DryRunResult.UnknownTools.
	UnknownTool bool `json:"unknown_tool,omitempty"`
	// Workflow is the catalog workflow a workflow step would run as a child run; a dry run does
	// not walk into it (the step is a leaf answered from Fixtures).
	Workflow string `json:"workflow,omitempty"`
	// Args are the rendered arguments the tool would receive (tool and tool_remote steps), or the
	// rendered inputs of the child run (workflow steps).
	Args map[string]any `json:"args,omitempty"`
	// Output is the step's output (a fixture, flow__echo's args, an approval's decision, a
	// foreach's iterations, a branch's condition); null when none.
	Output any `json:"output"`
	// OutputFrom says where a tool or workflow step's output came from (FixtureByKey,
	// FixtureByStepID, FixtureByTool, FixtureByWorkflow, OutputFromEcho, OutputFromNone) and
	// Fixture the fixtures name used.
	OutputFrom string `json:"output_from,omitempty"`
	Fixture    string `json:"fixture,omitempty"`
	Prompt     string `json:"prompt,omitempty"`   // approve: the rendered prompt
	Approved   *bool  `json:"approved,omitempty"` // approve: the decision applied
	Items      *int   `json:"items,omitempty"`    // foreach: how many items it iterates
	Taken      string `json:"taken,omitempty"`    // branch: "then" or "else"
	// Error is why the instance failed, or (Kind-less) why it was skipped.
	Error *StepErrorInfo `json:"error,omitempty"`
}

// DryRun validates a run request and walks its plan as the executor would run it, calling no
// tool: every tool and tool_remote step gets its output from req.Fixtures (or null), every
// approval is granted unless req.Approvals denies it, foreach steps iterate what their items
// resolve to and branches follow their conditions. Nothing is recorded: no run row, no events,
// no idempotency cache read or write (a real run may reuse cached outputs the dry run does not
// show). Unknown tools are not an error (DryRunResult.UnknownTools lists them), so a spec can be
// checked where its tools are not registered (a CI job).
//
// It fails, as Submit does, when the spec is invalid, the workflow is unknown, an input is bad or
// the engine is closed; a read-only engine may dry-run. When ctx ends first the walk is stopped
// and ctx's cause returned.
func (e *Engine) DryRun(ctx context.Context, req DryRunRequest) (*DryRunResult, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, errClosed()
	}
	s, err := e.resolveSpec(req.StartRequest)
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	origin := req.Origin
	if origin == "" {
		origin = OriginLocal
	}
	switch origin {
	case OriginLocal, OriginMCP, OriginWebhook, OriginSchedule, OriginUI:
	default:
		return nil, run.Errorf(run.CodeInvalidRequest, "origin must be %s, %s, %s, %s or %s; got %q", OriginLocal, OriginMCP, OriginWebhook, OriginSchedule, OriginUI, origin)
	}
	inputs, err := exec.CheckInputs(s, req.Inputs)
	if err != nil {
		return nil, err
	}
	unknown, suggestions, _, err := e.unknownTools(s)
	if err != nil {
		return nil, err
	}
	if err := e.catalog.CheckRecursion(s, e.catalog.SubmittedName(s)); err != nil {
		return nil, err // a workflow that reaches itself: refused as Submit refuses it
	}

	o, err := dryrun.Run(ctx, dryrun.Config{Environ: e.environ, Limits: e.cfg.limits(), Fixtures: req.Fixtures, Approvals: req.Approvals},
		exec.Params{Spec: s, Inputs: inputs, Origin: origin, Trigger: req.Trigger,
			Env: exec.EnvPolicy{All: origin == OriginLocal, Allow: e.cfg.EnvAllow}})
	if err != nil {
		return nil, err
	}
	out := &DryRunResult{Name: s.Name, SpecHash: s.Hash(), Status: o.Status, Error: o.Error, Inputs: inputs,
		Outputs: map[string]any{}, UnknownTools: unknown}
	if len(suggestions) > 0 {
		out.Suggestions = suggestions
	}
	unknownSet := make(map[string]bool, len(unknown))
	for _, u := range unknown {
		unknownSet[u] = true
	}
	n := 0 // DryStep.Order: the instances that would call a tool or wait for an approval
	for _, in := range dryrun.Order(s, o.Steps) {
		ds := dryStep(in, o, unknownSet)
		if k := in.Step.Kind; k != spec.KindForeach && k != spec.KindParallel && k != spec.KindBranch && ds.Status != run.StepSkipped {
			n++
			ds.Order = n
		}
		out.Steps = append(out.Steps, ds)
	}
	for _, ds := range out.Steps {
		if ds.Key == ds.StepID && ds.Status == run.StepCompleted {
			out.Outputs[ds.StepID] = ds.Output
		}
	}
	out.Warnings = append(dryrun.Warnings(s, req.Fixtures, req.Approvals), e.dryUnregistered(s)...)
	return out, nil
}

// unknownTools lists the tools and remotes s calls that this engine cannot call, with
// suggestions and notes (toolcheck.Scope.Unknown).
func (e *Engine) unknownTools(s *spec.Spec) ([]string, map[string]string, map[string]string, error) {
	toolNames, remotes, err := e.exec.Tools(s)
	if err != nil {
		return nil, nil, nil, &run.Error{Code: run.CodeInternal, Message: "compiling the spec: " + err.Error(), Err: err}
	}
	unknown, suggestions, notes := e.toolScope().Unknown(toolNames, remotes)
	return unknown, suggestions, notes, nil
}

// toolScope is what this engine can call: its tools, the remotes of its config, and on a shared
// database what the other engines advertise.
func (e *Engine) toolScope() toolcheck.Scope {
	k := toolcheck.Scope{Router: e.router, Remotes: make(map[string]bool, len(e.cfg.Remotes))}
	for name := range e.cfg.Remotes {
		k.Remotes[name] = true
	}
	if e.queue != nil {
		k.Others = e.queue
	}
	return k
}

// dryUnregistered warns of the workflow steps of s that name a workflow the catalog does not
// have: a real run of s would be refused with not_found.
func (e *Engine) dryUnregistered(s *spec.Spec) []string {
	var out []string
	s.Walk(func(st *spec.Step, _ []*spec.Step) bool {
		if st.Kind != spec.KindWorkflow {
			return true
		}
		if _, ok := e.Workflow(st.Workflow); !ok {
			msg := fmt.Sprintf("step %q runs workflow %q, which is not registered: a real run would be refused (not_found)", st.ID, st.Workflow)
			if sug := e.catalog.Suggest(st.Workflow); sug != "" {
				msg += fmt.Sprintf("; did you mean %q?", sug)
			}
			out = append(out, msg)
		}
		return true
	})
	return out
}

// dryStep is the DryStep of one instance the dry run reached, but its Order; unknown holds the
// tool names of DryRunResult.UnknownTools.
func dryStep(in dryrun.Instance, o *dryrun.Outcome, unknown map[string]bool) DryStep {
	st, row, key := in.Step, in.Row, in.Key
	ds := DryStep{Key: key, StepID: st.ID, Kind: string(st.Kind), Depth: in.Depth, Status: row.Status, Output: in.Output}
	if row.ErrorMessage != "" {
		ds.Error = &StepErrorInfo{Kind: row.ErrorKind, Message: row.ErrorMessage, Trace: row.ErrorTrace}
	}
	switch st.Kind {
	case spec.KindTool, spec.KindToolRemote:
		ds.Tool, ds.DCC = st.Tool, st.DCC
		name := st.Tool
		if st.Kind == spec.KindToolRemote {
			name = st.DCC + "/" + st.Tool
		}
		ds.UnknownTool = unknown[name]
		if c, ok := o.Calls[key]; ok {
			ds.Args, ds.OutputFrom, ds.Fixture = c.Args, c.From, c.Fixture
		}
	case spec.KindWorkflow:
		ds.Workflow = st.Workflow
		if c, ok := o.Calls[key]; ok {
			ds.Args, ds.OutputFrom, ds.Fixture = c.Args, c.From, c.Fixture
		}
	case spec.KindApprove:
		if p, ok := o.Prompts[key]; ok {
			ds.Prompt = p
			d := o.Decided[key]
			ds.Approved = &d
		}
	case spec.KindForeach:
		if row.Status != run.StepSkipped {
			items := in.Items
			ds.Items = &items
		}
	case spec.KindBranch:
		ds.Taken = in.Taken
	}
	return ds
}
