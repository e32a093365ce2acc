package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/yamltext"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// DryRunID is the run id a dry run's templates see as {{run.id}}: a dry run has no run record.
const DryRunID = "dry-run"

// Where the output of a dry run's tool step came from (DryStep.OutputFrom).
const (
	FixtureByKey    = "key"     // the fixture named by the step instance key, "per_file[1].export"
	FixtureByStepID = "step_id" // the fixture named by the step id, "export"
	FixtureByTool   = "tool"    // the fixture named by the tool ("maya__export_fbx"; "dcc/tool" or "tool" for tool_remote)
	// FixtureByWorkflow is the fixture named by the workflow a workflow step runs ("publish_asset").
	FixtureByWorkflow = "workflow"
	OutputFromEcho    = "echo" // flow__echo with no fixture: its args, as a real run gives
	OutputFromNone    = "none" // no fixture: null
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
	Status run.Status     `json:"status"`
	Error  *RunError      `json:"error,omitempty"`
	Inputs map[string]any `json:"inputs"`
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
	if err := e.walkWorkflows(s, e.submittedName(s), false); err != nil {
		return nil, err // a workflow that reaches itself: refused as Submit refuses it
	}

	caller := &dryCaller{fixtures: req.Fixtures, calls: map[string]dryCall{}}
	wake := make(chan struct{}, 1)
	st := storeopen.Memory()
	defer func() { _ = st.Close() }()
	x := exec.New(exec.Config{
		Store: st, Clock: clock.New(), Router: tools.NewDryRouter(caller), Environ: e.environ,
		Limits: e.cfg.limits(), Children: caller,
		OnWrite: func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		},
	})
	h, err := x.Start(ctx, exec.Params{
		RunID: DryRunID, Spec: s, Inputs: inputs, Origin: origin, Trigger: req.Trigger,
		Env: exec.EnvPolicy{All: origin == OriginLocal, Allow: e.cfg.EnvAllow},
	})
	if err != nil {
		return nil, err
	}
	prompts := map[string]string{}
	decided := map[string]bool{}
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
				if v, ok := req.Approvals[a.StepKey]; ok {
					approved = v
				} else if v, ok := req.Approvals[stepIDOf(a.StepKey)]; ok {
					approved = v
				}
				prompts[a.StepKey], decided[a.StepKey] = a.Prompt, approved
				reason, by := "dry run: approved automatically", "dry-run"
				if !approved {
					reason, by = "the dry run's approvals deny it", ""
				}
				_ = h.Approve(a.StepKey, approved, reason, by) // answered already: nothing to do
			}
		}
	}
	rec, err := st.GetRun(context.Background(), DryRunID)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInternal, Message: "reading the dry run: " + err.Error(), Err: err}
	}
	rows, err := st.ListSteps(context.Background(), DryRunID)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInternal, Message: "reading the dry run's steps: " + err.Error(), Err: err}
	}
	status, rerr := rec.Status, rec.Error
	if u := h.Unsaved(); u != nil { // cannot happen with a memory store; kept exact all the same
		status, rerr = u.Status, u.Error
	}
	out := &DryRunResult{Name: s.Name, SpecHash: s.Hash(), Status: status, Error: rerr, Inputs: inputs,
		Outputs: map[string]any{}, UnknownTools: unknown}
	if len(suggestions) > 0 {
		out.Suggestions = suggestions
	}
	w := &dryWalk{out: out, rows: map[string]store.Step{}, iterations: map[string]int{}, calls: caller.snapshot(),
		prompts: prompts, decided: decided, unknown: map[string]bool{}}
	for _, u := range unknown {
		w.unknown[u] = true
	}
	for _, r := range rows {
		w.rows[r.Key] = r
		w.countIterations(r.Key)
	}
	w.list(s.Steps, false, "", 0)
	for _, ds := range out.Steps {
		if ds.Key == ds.StepID && ds.Status == run.StepCompleted {
			out.Outputs[ds.StepID] = ds.Output
		}
	}
	out.Warnings = append(dryWarnings(s, req), e.dryUnregistered(s)...)
	return out, nil
}

// unknownTools lists the tools of s's tool steps that are not registered and the "dcc/tool" of
// its tool_remote steps (and tool steps routed to a pool) whose remote is not configured, sorted,
// with suggestions (suggestTools) and notes: for each "dcc/tool", and each tool of a pool step
// left in-process, which step calls it and why it is unknown ("step export: remote …"). On a
// shared database a tool another attached engine hosts, and a remote another attached engine
// has, are known (their calls go through the tool-call queue, docs/operations/cluster.md). A step's own
// `pool:` that no engine has runs in-process: then its tool must be known.
func (e *Engine) unknownTools(s *spec.Spec) ([]string, map[string]string, map[string]string, error) {
	toolNames, remotes, err := e.exec.Tools(s)
	if err != nil {
		return nil, nil, nil, &run.Error{Code: run.CodeInternal, Message: "compiling the spec: " + err.Error(), Err: err}
	}
	var unknown []string
	knownTool := func(name string) bool {
		_, ok := e.router.Lookup(name)
		return ok || e.queue != nil && e.queue.hostedNow(name)
	}
	for _, name := range toolNames {
		if !knownTool(name) {
			unknown = append(unknown, name)
		}
	}
	notes := map[string]string{}
	nowhere := "is not in the engine config's remotes"
	if e.queue != nil {
		nowhere = "is neither in this engine's config nor advertised by an engine attached to the database"
	}
	for _, rt := range remotes {
		_, configured := e.cfg.Remotes[rt.DCC]
		switch {
		case configured && e.router.HasRemoteNamed(rt.DCC):
		case e.queue != nil && e.queue.hasRemoteNow(rt.DCC):
		case rt.Optional:
			if !knownTool(rt.Tool) {
				unknown = append(unknown, rt.Tool)
				if _, ok := notes[rt.Tool]; !ok {
					notes[rt.Tool] = fmt.Sprintf("step %s: pool %q %s, so the tool runs in-process", rt.Step, rt.DCC, nowhere)
				}
			}
		default:
			name := rt.DCC + "/" + rt.Tool
			unknown = append(unknown, name)
			if _, ok := notes[name]; !ok {
				notes[name] = fmt.Sprintf("step %s: remote %q %s", rt.Step, rt.DCC, nowhere)
			}
		}
	}
	slices.Sort(unknown)
	unknown = slices.Compact(unknown)
	if len(unknown) == 0 {
		return nil, nil, nil, nil
	}
	return unknown, e.suggestTools(unknown), notes, nil
}

// stepIDOf returns the step id of an instance key: "per_file[1].export" → "export".
func stepIDOf(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// dryCall is what the dry caller answered one step instance.
type dryCall struct {
	tool, dcc  string
	args       map[string]any
	from, name string // DryStep.OutputFrom and Fixture
	output     json.RawMessage
}

// dryCaller answers every tool call and every workflow step (exec.Children: no child run is
// started) of a dry run from its fixtures, and records each call.
type dryCaller struct {
	fixtures map[string]any
	mu       sync.Mutex
	calls    map[string]dryCall // by step instance key
}

func (c *dryCaller) Call(_ context.Context, call tools.Call) (tools.Result, error) {
	id := stepIDOf(call.StepKey)
	names := []struct{ name, from string }{{call.StepKey, FixtureByKey}, {id, FixtureByStepID}}
	if call.StepKey == id {
		names = names[1:] // a top-level step: its key is its id
	}
	if call.DCC != "" {
		names = append(names, struct{ name, from string }{call.DCC + "/" + call.Tool, FixtureByTool})
	}
	names = append(names, struct{ name, from string }{call.Tool, FixtureByTool})
	rec := dryCall{tool: call.Tool, dcc: call.DCC, args: call.Args, from: OutputFromNone}
	res := tools.Result{OutputJSON: json.RawMessage("null")}
	found := false
	for _, n := range names {
		if v, ok := c.fixtures[n.name]; ok {
			b, err := json.Marshal(v)
			if err != nil {
				return tools.Failure(run.KindInvalidInput, fmt.Sprintf("dry run: fixture %q is not JSON-encodable: %v", n.name, err)), nil
			}
			res.OutputJSON, rec.from, rec.name, found = b, n.from, n.name, true
			break
		}
	}
	if !found && call.DCC == "" && call.Tool == tools.Echo {
		b, err := json.Marshal(call.Args)
		if err == nil {
			res.OutputJSON, rec.from = b, OutputFromEcho
		}
	}
	c.mu.Lock()
	c.calls[call.StepKey] = rec
	c.mu.Unlock()
	return res, nil
}

var _ exec.Children = (*dryCaller)(nil)

// dryChildPrefix makes the run id a dry workflow step's answer is filed under.
const dryChildPrefix = DryRunID + "/"

// Join implements exec.Children: the step's output is the fixture of its instance key, step id
// or workflow name, else null; no run starts.
func (c *dryCaller) Join(_ context.Context, req exec.ChildRequest) (exec.Child, error) {
	id := stepIDOf(req.StepKey)
	names := []struct{ name, from string }{{req.StepKey, FixtureByKey}, {id, FixtureByStepID}, {req.Workflow, FixtureByWorkflow}}
	if req.StepKey == id {
		names = names[1:]
	}
	rec := dryCall{args: req.Inputs, from: OutputFromNone, output: json.RawMessage("null")}
	for _, n := range names {
		if v, ok := c.fixtures[n.name]; ok {
			b, err := json.Marshal(v)
			if err != nil {
				return exec.Child{}, &exec.ChildError{Kind: run.KindInvalidInput, Message: fmt.Sprintf("dry run: fixture %q is not JSON-encodable: %v", n.name, err)}
			}
			rec.output, rec.from, rec.name = b, n.from, n.name
			break
		}
	}
	c.mu.Lock()
	c.calls[req.StepKey] = rec
	c.mu.Unlock()
	return exec.Child{RunID: dryChildPrefix + req.StepKey}, nil
}

// Result implements exec.Children: the answer Join filed.
func (c *dryCaller) Result(_ context.Context, runID string) (exec.ChildResult, error) {
	c.mu.Lock()
	rec, ok := c.calls[strings.TrimPrefix(runID, dryChildPrefix)]
	c.mu.Unlock()
	if !ok {
		return exec.ChildResult{}, fmt.Errorf("dry run: no answer for %s", runID)
	}
	return exec.ChildResult{Status: run.StatusCompleted, Outputs: rec.output}, nil
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
			if sug := e.suggestWorkflow(st.Workflow); sug != "" {
				msg += fmt.Sprintf("; did you mean %q?", sug)
			}
			out = append(out, msg)
		}
		return true
	})
	return out
}

func (c *dryCaller) snapshot() map[string]dryCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}

// dryWalk orders the step instances of a dry run by walking the spec's tree.
type dryWalk struct {
	out        *DryRunResult
	rows       map[string]store.Step
	iterations map[string]int // foreach instance key → iterations that left a row
	calls      map[string]dryCall
	prompts    map[string]string
	decided    map[string]bool
	unknown    map[string]bool
	n          int
}

// countIterations notes, for each foreach instance enclosing key ("a[2].b[0].c" is in iteration
// 2 of "a" and 0 of "a[2].b"), that it has at least that many iterations.
func (w *dryWalk) countIterations(key string) {
	for i := 0; i < len(key); i++ {
		if key[i] != '[' {
			continue
		}
		end := strings.IndexByte(key[i:], ']')
		if end < 0 {
			return
		}
		n, err := strconv.Atoi(key[i+1 : i+end])
		if err == nil && n+1 > w.iterations[key[:i]] {
			w.iterations[key[:i]] = n + 1
		}
		i += end
	}
}

// list adds the instances of one step list under prefix, in dependency order (ties in document
// order). parallel: the children of a parallel step, which wait only for their own depends_on.
func (w *dryWalk) list(steps []*spec.Step, parallel bool, prefix string, depth int) {
	deps := spec.Dependencies(steps)
	if parallel {
		for i, st := range steps {
			if !st.HasDependsOn {
				deps[i] = nil
			}
		}
	}
	done := make([]bool, len(steps))
	for left := len(steps); left > 0; left-- {
		pick := -1
		for i := range steps {
			if done[i] {
				continue
			}
			ready := true
			for _, d := range deps[i] {
				if !done[d] {
					ready = false
					break
				}
			}
			if ready {
				pick = i
				break
			}
		}
		if pick < 0 { // a cycle: refused by validation; keep the rest in document order
			for i := range steps {
				if !done[i] {
					pick = i
					break
				}
			}
		}
		done[pick] = true
		w.step(steps[pick], prefix, depth)
	}
}

func (w *dryWalk) step(st *spec.Step, prefix string, depth int) {
	key := prefix + st.ID
	row, ok := w.rows[key]
	if !ok {
		return // never reached: the run ended before it
	}
	ds := DryStep{Key: key, StepID: st.ID, Kind: string(st.Kind), Depth: depth, Status: row.Status}
	if len(row.Output) > 0 {
		ds.Output, _ = spec.DecodeValue(row.Output) // written by the executor: valid JSON
	}
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
		ds.UnknownTool = w.unknown[name]
		if c, ok := w.calls[key]; ok {
			ds.Args, ds.OutputFrom, ds.Fixture = c.args, c.from, c.name
		}
	case spec.KindWorkflow:
		ds.Workflow = st.Workflow
		if c, ok := w.calls[key]; ok {
			ds.Args, ds.OutputFrom, ds.Fixture = c.args, c.from, c.name
		}
	case spec.KindApprove:
		if p, ok := w.prompts[key]; ok {
			ds.Prompt = p
			d := w.decided[key]
			ds.Approved = &d
		}
	case spec.KindForeach:
		n := w.iterations[key]
		if items, ok := ds.Output.([]any); ok {
			n = max(n, len(items))
		}
		if row.Status != run.StepSkipped {
			ds.Items = &n
		}
	case spec.KindBranch:
		if m, ok := ds.Output.(map[string]any); ok {
			ds.Taken, _ = m["taken"].(string)
		}
	}
	control := st.Kind == spec.KindForeach || st.Kind == spec.KindParallel || st.Kind == spec.KindBranch
	if !control && row.Status != run.StepSkipped {
		w.n++
		ds.Order = w.n
	}
	w.out.Steps = append(w.out.Steps, ds)
	switch st.Kind {
	case spec.KindForeach:
		for i := range w.iterations[key] {
			w.list(st.Steps, false, key+"["+strconv.Itoa(i)+"].", depth+1)
		}
	case spec.KindParallel:
		w.list(st.Steps, true, prefix, depth+1)
	case spec.KindBranch:
		first, second := st.Then, st.Else
		if ds.Taken == "else" {
			first, second = st.Else, st.Then
		}
		w.list(first, false, prefix, depth+1)
		w.list(second, false, prefix, depth+1)
	}
}

// dryWarnings names the fixtures and approvals of req that match no step or tool of s.
func dryWarnings(s *spec.Spec, req DryRunRequest) []string {
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
			if slices.Contains(ids, stepIDOf(name)) || slices.Contains(others, name) {
				continue
			}
			msg := fmt.Sprintf("%s %q names no %s of the spec, so it is not used", what, name,
				map[bool]string{true: "tool step or tool", false: "approve step"}[what == "fixture"])
			if sug := yamltext.Suggest(stepIDOf(name), append(slices.Clone(ids), others...)); sug != "" {
				msg += fmt.Sprintf("; did you mean %q?", sug)
			}
			out = append(out, msg)
		}
	}
	fixtureNames := make([]string, 0, len(req.Fixtures))
	for k := range req.Fixtures {
		fixtureNames = append(fixtureNames, k)
	}
	approvalNames := make([]string, 0, len(req.Approvals))
	for k := range req.Approvals {
		approvalNames = append(approvalNames, k)
	}
	check("fixture", fixtureNames, toolIDs, toolNames)
	check("approval", approvalNames, approveIDs, nil)
	return out
}
