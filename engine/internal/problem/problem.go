// Package problem holds the one Problem type that every parser and validator of untrusted
// documents reports (workflow specs, schedule files), and the interface of the errors that list
// them, so that the doors (C ABI, MCP) report any of them the same way. It imports nothing of
// the engine: engine/spec re-exports it as spec.Problem.
package problem

import (
	"fmt"
	"strings"
)

// Severity of a problem.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Problem is one problem of a document. Message is complete on its own: it names where the
// problem is (the step by index path and id, or the schedule by id), the field, and how to fix
// it when that is not obvious; Hint repeats the fix alone. Fields that do not apply are empty
// and left out of the JSON form, except Severity, which is always "error" or "warning".
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

// Error is implemented by the errors that list problems: a spec's and a schedule set's
// ValidationError. ErrorCode is the stable error code; ProblemList is every problem, in
// document order (never empty).
type Error interface {
	error
	ErrorCode() string
	ProblemList() []Problem
}

// FillSeverity sets the severity of every problem that has none to SeverityError.
func FillSeverity(ps []Problem) {
	for i := range ps {
		if ps[i].Severity == "" {
			ps[i].Severity = SeverityError
		}
	}
}

// Codes the shared YAML decoder (engine/internal/yamltext) reports. engine/spec and the
// scheduler re-export them under the same names; they are stable.
const (
	CodeParseError   = "parse_error"   // malformed text, or a duplicate key
	CodeTooLarge     = "too_large"     // a limit on size, nesting or alias expansion exceeded
	CodeWrongType    = "wrong_type"    // a value of the wrong type (a number where a string goes, …)
	CodeUnknownField = "unknown_field" // a mapping key the document format does not know
)
