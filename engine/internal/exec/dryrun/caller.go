// Package dryrun runs a spec on the executor without calling any tool (docs/reference/spec.md "Dry runs"):
// a Caller answers every tool call and every workflow step from fixtures, approvals are decided
// from a map, and the run is kept in a memory store of its own that Run reads back. Nothing
// outside it is written. Order lists the step instances reached in the order a run would start
// them; the engine shapes them into its DryRunResult.
package dryrun

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// RunID is the run id a dry run's templates see as {{run.id}}: a dry run has no run record
// outside its own memory store.
const RunID = "dry-run"

// Where the output of a dry run's tool or workflow step came from (Call.From).
const (
	FromKey      = "key"      // the fixture named by the step instance key, "per_file[1].export"
	FromStepID   = "step_id"  // the fixture named by the step id, "export"
	FromTool     = "tool"     // the fixture named by the tool ("maya__export_fbx"; "dcc/tool" or "tool" for tool_remote)
	FromWorkflow = "workflow" // the fixture named by the workflow a workflow step runs ("publish_asset")
	FromEcho     = "echo"     // flow__echo with no fixture: its args, as a real run gives
	FromNone     = "none"     // no fixture: null
)

// Call is what the Caller answered one step instance.
type Call struct {
	Tool, DCC string         // a tool or tool_remote step's tool and remote ("" for a workflow step)
	Args      map[string]any // the tool's rendered args, or the child run's rendered inputs
	From      string         // FromKey, FromStepID, FromTool, FromWorkflow, FromEcho or FromNone
	Fixture   string         // the fixtures name used; "" when none
	Output    json.RawMessage
}

// Caller answers every tool call (tools.Caller) and every workflow step (exec.Children: no child
// run is started) of a dry run from its fixtures, and records each answer by step instance key.
// The most specific fixture name wins: the instance key, then the step id, then (a tool step)
// "dcc/tool" for a tool_remote step and the tool name, or (a workflow step) the workflow's name.
// No fixture is null, except for flow__echo, which answers its args (it has no side effects). A
// fixture that is not JSON-encodable fails the step with kind invalid_input.
type Caller struct {
	fixtures map[string]any
	mu       sync.Mutex
	calls    map[string]Call // by step instance key
}

var (
	_ tools.Caller  = (*Caller)(nil)
	_ exec.Children = (*Caller)(nil)
)

// NewCaller returns a Caller answering from fixtures (nil: none).
func NewCaller(fixtures map[string]any) *Caller {
	return &Caller{fixtures: fixtures, calls: map[string]Call{}}
}

// nameFrom is a fixture name to try and where an answer found under it comes from.
type nameFrom struct{ name, from string }

// Call implements tools.Caller.
func (c *Caller) Call(_ context.Context, call tools.Call) (tools.Result, error) {
	id := StepID(call.StepKey)
	names := []nameFrom{{call.StepKey, FromKey}, {id, FromStepID}}
	if call.StepKey == id {
		names = names[1:] // a top-level step: its key is its id
	}
	if call.DCC != "" {
		names = append(names, nameFrom{call.DCC + "/" + call.Tool, FromTool})
	}
	names = append(names, nameFrom{call.Tool, FromTool})
	rec := Call{Tool: call.Tool, DCC: call.DCC, Args: call.Args, From: FromNone}
	res := tools.Result{OutputJSON: json.RawMessage("null")}
	found := false
	for _, n := range names {
		if v, ok := c.fixtures[n.name]; ok {
			b, err := json.Marshal(v)
			if err != nil {
				return tools.Failure(run.KindInvalidInput, fmt.Sprintf("dry run: fixture %q is not JSON-encodable: %v", n.name, err)), nil
			}
			res.OutputJSON, rec.From, rec.Fixture, found = b, n.from, n.name, true
			break
		}
	}
	if !found && call.DCC == "" && call.Tool == tools.Echo {
		b, err := json.Marshal(call.Args)
		if err == nil {
			res.OutputJSON, rec.From = b, FromEcho
		}
	}
	c.mu.Lock()
	c.calls[call.StepKey] = rec
	c.mu.Unlock()
	return res, nil
}

// childPrefix makes the run id a dry workflow step's answer is filed under.
const childPrefix = RunID + "/"

// Join implements exec.Children: the step's output is the fixture of its instance key, step id
// or workflow name, else null; no run starts.
func (c *Caller) Join(_ context.Context, req exec.ChildRequest) (exec.Child, error) {
	id := StepID(req.StepKey)
	names := []nameFrom{{req.StepKey, FromKey}, {id, FromStepID}, {req.Workflow, FromWorkflow}}
	if req.StepKey == id {
		names = names[1:]
	}
	rec := Call{Args: req.Inputs, From: FromNone, Output: json.RawMessage("null")}
	for _, n := range names {
		if v, ok := c.fixtures[n.name]; ok {
			b, err := json.Marshal(v)
			if err != nil {
				return exec.Child{}, &exec.ChildError{Kind: run.KindInvalidInput, Message: fmt.Sprintf("dry run: fixture %q is not JSON-encodable: %v", n.name, err)}
			}
			rec.Output, rec.From, rec.Fixture = b, n.from, n.name
			break
		}
	}
	c.mu.Lock()
	c.calls[req.StepKey] = rec
	c.mu.Unlock()
	return exec.Child{RunID: childPrefix + req.StepKey}, nil
}

// Result implements exec.Children: the answer Join filed; an error for a run id Join did not
// give.
func (c *Caller) Result(_ context.Context, runID string) (exec.ChildResult, error) {
	c.mu.Lock()
	rec, ok := c.calls[strings.TrimPrefix(runID, childPrefix)]
	c.mu.Unlock()
	if !ok {
		return exec.ChildResult{}, fmt.Errorf("dry run: no answer for %s", runID)
	}
	return exec.ChildResult{Status: run.StatusCompleted, Outputs: rec.Output}, nil
}

// Calls returns a copy of the answers given so far, by step instance key.
func (c *Caller) Calls() map[string]Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.calls)
}

// StepID returns the step id of an instance key: "per_file[1].export" → "export".
func StepID(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[i+1:]
	}
	return key
}
