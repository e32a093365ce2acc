package flowtype

import "time"

// RunError says why a run did not complete. Stored as JSON.
type RunError struct {
	Kind    string `json:"kind"`               // an error kind, e.g. "transient", "cancelled", "interrupted"
	Message string `json:"message"`            // for humans
	StepKey string `json:"step_key,omitempty"` // the step instance that failed first, if any
	Trace   string `json:"trace,omitempty"`
}

// Approval is an open approval of a run.
type Approval struct {
	StepKey     string    `json:"step_key"`
	Prompt      string    `json:"prompt"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at,omitzero"` // zero = waits indefinitely
}
