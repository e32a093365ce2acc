package run

import (
	"encoding/json"
	"time"
)

// Event types of the engine's event stream (docs/reference/state-machine.md, "Events").
const (
	EventWorkflowStarted  = "workflow_started"
	EventStepEnter        = "step_enter"
	EventStepRetry        = "step_retry"
	EventStepExit         = "step_exit"
	EventStepSkipped      = "step_skipped"
	EventApproveRequested = "approve_requested"
	EventApproveResolved  = "approve_resolved"
	EventWorkflowTerminal = "workflow_terminal"
	EventWorkflowResumed  = "workflow_resumed"
	EventInterrupted      = "interrupted"
	EventStallDetected    = "stall_detected"
	// EventOnFailureStarted: the run failed and its on_failure steps start; the detail holds
	// the run's error ({"error": {kind, message, step_key}}).
	EventOnFailureStarted = "on_failure_started"
	EventRunPaused        = "run_paused"
	EventRunUnpaused      = "run_unpaused"
	// EventStepProgress carries the latest progress a running tool reported (detail: a
	// StepProgress); EventStepLog the lines it logged (detail: {"lines": [LogLine…], "dropped"}).
	// Both are throttled per call (ReportInterval, MaxLogLinesPerFlush; docs/reference/limits.md).
	EventStepProgress = "step_progress"
	EventStepLog      = "step_log"
)

// Progress counts the step instances of a run: Total grows as foreach steps expand, Completed
// counts the instances that reached a terminal step status (skipped and cached included).
type Progress struct {
	Completed int `json:"completed"`
	Total     int `json:"total"`
}

// Event is one entry of the engine's event stream. Seq is assigned by the store when the event
// is written: engine-wide, strictly increasing, never reused (it survives a reopen of a
// persistent store). An event is only delivered after it is durable.
type Event struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	RunID    string    `json:"run_id"`
	Type     string    `json:"type"`
	StepKey  string    `json:"step_key,omitempty"` // "" for run-level events
	Status   string    `json:"status,omitempty"`   // a Status for run events, a StepStatus for step events
	Attempt  int       `json:"attempt,omitempty"`  // 0 when not about an attempt
	Progress Progress  `json:"progress"`
	// Detail is a JSON object specific to the type (e.g. the error of a step_exit, the prompt of
	// an approve_requested), or nil.
	Detail json.RawMessage `json:"detail,omitempty"`
}
