package flowtype

import (
	"fmt"
	"strings"
)

// Severity of a problem.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Problem is one problem of a document: a workflow spec (spec.Problem is this type) or a
// schedule file. Message is complete on its own: it names where the problem is (the step by
// index path and id, or the schedule by id), the field, and how to fix it when that is not
// obvious; Hint repeats the fix alone. Fields that do not apply are empty and left out of the
// JSON form, except Severity, which is always "error" or "warning".
type Problem struct {
	Code       string `json:"code"`
	Severity   string `json:"severity"`
	Message    string `json:"message"`
	File       string `json:"file,omitempty"`        // the schedule file; specs name theirs on the error
	StepID     string `json:"step_id,omitempty"`     // the step of a spec, when it has an id
	ScheduleID string `json:"schedule_id,omitempty"` // the schedule of a schedule file, when it has an id
	Path       string `json:"path,omitempty"`        // e.g. "steps[1].retry.max_attempts"
	Line       int    `json:"line,omitempty"`        // 1-based; 0 when unknown
	Column     int    `json:"column,omitempty"`      // 1-based, in runes; 0 when unknown
	Hint       string `json:"hint,omitempty"`
}

// String formats the problem as "file:line:col: message"; parts that are unknown are left out
// ("line:col: message" for a spec problem, just the message when there is no position).
func (p Problem) String() string {
	var b strings.Builder
	if p.File != "" {
		b.WriteString(p.File)
		b.WriteByte(':')
	}
	if p.Line > 0 {
		fmt.Fprintf(&b, "%d:%d:", p.Line, p.Column)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(p.Message)
	return b.String()
}

// ScheduleValidationError is returned when schedule files or specs have problems. It lists every
// problem found, in file and line order. Code is "parse_error" or "too_large" when every problem
// has that code, else "validation_failed".
type ScheduleValidationError struct {
	Code     string
	Problems []Problem
}

// ErrorCode returns the stable error code (for run.CodeOf).
func (e *ScheduleValidationError) ErrorCode() string { return e.Code }

// ProblemList returns e.Problems.
func (e *ScheduleValidationError) ProblemList() []Problem { return e.Problems }

// Error returns the problems, one per line when there are several.
func (e *ScheduleValidationError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d problems in schedules:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}
