// Package run is the shared vocabulary of dcc-flow: run and step statuses, error kinds, the stable
// error codes shared by the C ABI, MCP and Python, and the StepError type.
//
// It imports only the standard library so every other package can depend on it.
package run

// Status is the status of a whole workflow run.
//
//	pending → running ⇄ waiting → completed | failed | cancelled | interrupted
//	running | waiting ⇄ paused → cancelled (and completed or failed, when the steps in flight end it)
//
// A run is `waiting` while at least one approval is open and nothing else is running; `paused`
// from a pause until its unpause: no step starts, the steps in flight finish
// (docs/reference/state-machine.md, "Pause").
type Status string

// Run statuses.
const (
	StatusPending     Status = "pending"
	StatusRunning     Status = "running"
	StatusWaiting     Status = "waiting"
	StatusPaused      Status = "paused"
	StatusCompleted   Status = "completed"
	StatusFailed      Status = "failed"
	StatusCancelled   Status = "cancelled"
	StatusInterrupted Status = "interrupted"
)

// Terminal reports whether no further transition happens without a resume.
// completed, failed, cancelled and interrupted are terminal.
func (s Status) Terminal() bool {
	switch s {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusInterrupted:
		return true
	}
	return false
}

// Valid reports whether s is one of the run statuses above.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusRunning, StatusWaiting, StatusPaused:
		return true
	}
	return s.Terminal()
}

// StepStatus is the status of one step instance (a foreach iteration's step is its own instance).
type StepStatus string

// Step statuses.
const (
	StepPending         StepStatus = "pending"
	StepRunning         StepStatus = "running"
	StepRetrying        StepStatus = "retrying"
	StepWaitingApproval StepStatus = "waiting_approval"
	StepCompleted       StepStatus = "completed"
	StepFailed          StepStatus = "failed"
	StepCancelled       StepStatus = "cancelled"
	StepSkipped         StepStatus = "skipped"
	StepInterrupted     StepStatus = "interrupted"
)

// Terminal reports whether the step instance is finished: completed, failed, cancelled, skipped
// or interrupted.
func (s StepStatus) Terminal() bool {
	switch s {
	case StepCompleted, StepFailed, StepCancelled, StepSkipped, StepInterrupted:
		return true
	}
	return false
}

// Valid reports whether s is one of the step statuses above.
func (s StepStatus) Valid() bool {
	switch s {
	case StepPending, StepRunning, StepRetrying, StepWaitingApproval:
		return true
	}
	return s.Terminal()
}
