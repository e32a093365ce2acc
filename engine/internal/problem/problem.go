// Package problem holds the one Problem type that every parser and validator of untrusted
// documents reports (workflow specs, schedule files), and the interface of the errors that list
// them, so that the doors (C ABI, MCP) report any of them the same way. It imports only the
// public leaf engine/flowtype, where Problem is defined: engine/spec re-exports it as spec.Problem.
package problem

import "github.com/dcc-flow/dcc-flow/engine/flowtype"

// Severity of a problem.
const (
	SeverityError   = flowtype.SeverityError
	SeverityWarning = flowtype.SeverityWarning
)

// Problem is one problem of a document (flowtype.Problem, defined in public so that callers
// outside engine/ can name it). Message is complete on its own: it names where the problem is
// (the step by index path and id, or the schedule by id), the field, and how to fix it when that
// is not obvious; Hint repeats the fix alone.
type Problem = flowtype.Problem

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
