package run_test

import (
	"os"
	"strings"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// TestStateMachineDocNamesEverything keeps docs/reference/state-machine.md in step with the vocabulary:
// every run status, step status and event type has a row there (as `name` in a table cell).
func TestStateMachineDocNamesEverything(t *testing.T) {
	b, err := os.ReadFile("../../docs/reference/state-machine.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	names := []string{
		string(run.StatusPending), string(run.StatusRunning), string(run.StatusWaiting), string(run.StatusCompleted),
		string(run.StatusFailed), string(run.StatusCancelled), string(run.StatusInterrupted), string(run.StatusPaused),
		string(run.StepPending), string(run.StepRunning), string(run.StepRetrying), string(run.StepWaitingApproval),
		string(run.StepWaitingResources), string(run.StepCompleted), string(run.StepFailed), string(run.StepCancelled), string(run.StepSkipped),
		string(run.StepInterrupted),
		run.EventWorkflowStarted, run.EventStepEnter, run.EventStepRetry, run.EventStepExit, run.EventStepSkipped,
		run.EventApproveRequested, run.EventApproveResolved, run.EventWorkflowTerminal, run.EventWorkflowResumed,
		run.EventInterrupted, run.EventStallDetected, run.EventOnFailureStarted, run.EventRunPaused, run.EventRunUnpaused,
		run.EventStepProgress, run.EventStepLog,
	}
	for _, n := range names {
		if !strings.Contains(doc, "| `"+n+"` |") {
			t.Errorf("docs/reference/state-machine.md has no table row for %q", n)
		}
	}
	if got := strings.Count(doc, "```mermaid\nstateDiagram-v2"); got != 2 {
		t.Errorf("want 2 Mermaid state diagrams (runs, steps), found %d", got)
	}
}
