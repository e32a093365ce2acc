package spec

import (
	"fmt"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/problem"
)

// Problem codes. They are stable: the C ABI, MCP and Python report them as is. The codes the
// YAML decoder reports (parse_error, too_large, wrong_type, unknown_field) are problem.Code*.
const (
	CodeParseError         = "parse_error"
	CodeNotAMapping        = "not_a_mapping"
	CodeTooLarge           = "too_large"
	CodeNoSteps            = "no_steps"
	CodeDuplicateStepID    = "duplicate_step_id"
	CodeEmptyStepID        = "empty_step_id"
	CodeInvalidStepID      = "invalid_step_id"
	CodeInvalidToolName    = "invalid_tool_name"
	CodeInvalidName        = "invalid_name"
	CodeInvalidJSONPath    = "invalid_jsonpath"
	CodeInvalidPolicy      = "invalid_policy"
	CodeInvalidTemplate    = "invalid_template"
	CodeUnknownTemplateVar = "unknown_template_var"
	CodeUnknownField       = "unknown_field"
	CodeWrongType          = "wrong_type"
	CodeInvalidValue       = "invalid_value"
	CodeReservedStepID     = "reserved_step_id"
	CodeUnknownDependency  = "unknown_dependency"
	CodeCycle              = "cycle"
	CodeMissingField       = "missing_field"
	CodeUnknownKind        = "unknown_kind"
	CodeJitterClamped      = "jitter_clamped"

	// CodeValidationFailed is the code of a ValidationError with problems of several kinds.
	CodeValidationFailed = "validation_failed"
)

// Severity of a problem.
const (
	SeverityError   = problem.SeverityError
	SeverityWarning = problem.SeverityWarning
)

// Problem is one validation problem, the one type that spec and schedule problems share.
// Message is complete on its own: it names the step (by index path and id) and the field, and
// says how to fix it when that is not obvious. A spec's problems leave File and ScheduleID
// empty (the error names the source), so their JSON form has code, severity, message and, when
// known, step_id, path, line, column and hint. String formats it as "line:col: message".
type Problem = problem.Problem

// ProblemError is implemented by the errors that list problems: *ValidationError and the
// scheduler's (flowtype.ScheduleValidationError), so that a door reports either with one branch:
// ErrorCode is the error's stable code, ProblemList every problem in document order.
type ProblemError = problem.Error

// ValidationError is returned when a spec has problems. Code is "parse_error" when the text is
// not well-formed, "too_large" when a limit is exceeded, else "validation_failed".
type ValidationError struct {
	Code     string
	Problems []Problem
	Source   string // file name or "", for messages
}

// ErrorCode returns the stable error code (for run.CodeOf).
func (e *ValidationError) ErrorCode() string { return e.Code }

var _ ProblemError = (*ValidationError)(nil)

// ProblemList returns e.Problems (for ProblemError).
func (e *ValidationError) ProblemList() []Problem { return e.Problems }

func (e *ValidationError) Error() string {
	var b strings.Builder
	src := e.Source
	if src == "" {
		src = "spec"
	}
	if len(e.Problems) == 1 {
		p := e.Problems[0]
		if p.Line > 0 {
			fmt.Fprintf(&b, "%s:%d:%d: %s", src, p.Line, p.Column, p.Message)
		} else {
			fmt.Fprintf(&b, "%s: %s", src, p.Message)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "%d problems in %s:", len(e.Problems), src)
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		if p.Line > 0 {
			fmt.Fprintf(&b, "%d:%d: ", p.Line, p.Column)
		}
		b.WriteString(p.Message)
	}
	return b.String()
}

// problems collects problems during decoding and validation.
type problems struct {
	errs  []Problem
	warns []Problem
}

func (ps *problems) add(p Problem) {
	if p.Severity == "" {
		p.Severity = SeverityError
	}
	if p.Severity == SeverityWarning {
		ps.warns = append(ps.warns, p)
		return
	}
	ps.errs = append(ps.errs, p)
}

// at builds a problem located at pos, for the step with the given index path and id.
func problemAt(code string, pos Pos, path, stepID, msg string) Problem {
	return Problem{Code: code, Message: describe(path, stepID) + msg, StepID: stepID, Path: path, Line: pos.Line, Column: pos.Column}
}

// describe returns the message prefix that names where a problem is: `steps[1] (id "export"): `.
func describe(path, stepID string) string {
	loc := path
	if i := strings.Index(path, "."); stepID != "" && i > 0 {
		// Keep only the step part of the path in the prefix; the field is named by the message.
		loc = stepPathPrefix(path)
	}
	switch {
	case loc == "" && stepID == "":
		return ""
	case stepID == "":
		return loc + ": "
	case loc == "":
		return fmt.Sprintf("step %q: ", stepID)
	}
	return fmt.Sprintf("%s (id %q): ", loc, stepID)
}

// stepPathPrefix cuts a field path after the last step index: "steps[1].steps[0].retry.x" →
// "steps[1].steps[0]".
func stepPathPrefix(path string) string {
	end := 0
	for _, list := range []string{"steps[", "then[", "else[", "on_failure["} {
		for i := 0; ; {
			j := strings.Index(path[i:], list)
			if j < 0 {
				break
			}
			k := strings.Index(path[i+j:], "]")
			if k < 0 {
				break
			}
			if e := i + j + k + 1; e > end {
				end = e
			}
			i += j + k + 1
		}
	}
	if end == 0 {
		return path
	}
	return path[:end]
}
