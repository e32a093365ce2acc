// Package run is the shared vocabulary of dcc-flow: run and step statuses, error kinds, the stable
// error codes shared by the C ABI, MCP and Python, and the StepError type.
//
// It imports only the standard library so every other package can depend on it.
package run

import (
	"encoding/json"
	"time"
)

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
	// StepWaitingResources: a tool step's attempt waits for the units of the scarce resources
	// its `resources` ask for (docs/guide/resources.md); it becomes running once it holds
	// them. Its call has not started: a resume starts it again.
	StepWaitingResources StepStatus = "waiting_resources"
	StepCompleted        StepStatus = "completed"
	StepFailed           StepStatus = "failed"
	StepCancelled        StepStatus = "cancelled"
	StepSkipped          StepStatus = "skipped"
	StepInterrupted      StepStatus = "interrupted"
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
	case StepPending, StepRunning, StepRetrying, StepWaitingApproval, StepWaitingResources:
		return true
	}
	return s.Terminal()
}

// StepWaiting is what a step instance that is StepWaitingResources waits for: the "waiting" of
// its record (docs/guide/resources.md, "Waiting, visibly").
type StepWaiting struct {
	// Resources are the amounts its `resources` ask for, by name.
	Resources map[string]int `json:"resources"`
	// Place is its place in the queue of the engine running it (1 = served next; of the
	// resources it asks for, the worst), Of the number of that queue's waiters. With
	// OtherEngines it is first in that queue and other engines of a shared database hold the
	// units (Place 1).
	Place        int  `json:"place"`
	Of           int  `json:"of"`
	OtherEngines bool `json:"other_engines,omitempty"`
	// AllEngines: Place is its place in the one queue of every engine of a PostgreSQL database
	// (docs/guide/resources.md, "Who goes first"), Of 0 (not read).
	AllEngines bool `json:"all_engines,omitempty"`
	// Since is when it started waiting.
	Since time.Time `json:"since"`
}

// stepRecordProgress is the JSON of a step record's progress while the step waits for
// resources: the progress message and, beside it, what it waits for.
type stepRecordProgress struct {
	StepProgress
	Waiting *StepWaiting `json:"waiting,omitempty"`
}

// EncodeWaitingProgress is the progress of a step record that waits for resources: p (its
// message says what it waits for) with w beside it, as DecodeStepProgress reads them.
func EncodeWaitingProgress(p StepProgress, w StepWaiting) []byte {
	b, _ := json.Marshal(stepRecordProgress{StepProgress: p, Waiting: &w})
	return b
}

// DecodeStepProgress reads the progress of a step record (nil when it has none or it is not
// valid JSON) and, when the record is StepWaitingResources, what it waits for (else nil).
func DecodeStepProgress(b []byte, status StepStatus) (*StepProgress, *StepWaiting) {
	if len(b) == 0 {
		return nil, nil
	}
	var rp stepRecordProgress
	if json.Unmarshal(b, &rp) != nil {
		return nil, nil
	}
	if status != StepWaitingResources {
		rp.Waiting = nil
	}
	return &rp.StepProgress, rp.Waiting
}
