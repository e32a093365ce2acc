package schedule

import (
	"fmt"
	"strings"
)

// Problem codes of schedule files. They are stable: the C ABI, MCP and Python report them as is.
// Codes shared with engine/spec have the same strings.
const (
	CodeParseError           = "parse_error"
	CodeTooLarge             = "too_large"
	CodeWrongType            = "wrong_type"
	CodeMissingField         = "missing_field"
	CodeUnknownField         = "unknown_field"
	CodeInvalidValue         = "invalid_value"
	CodeInvalidID            = "invalid_id"
	CodeDuplicateID          = "duplicate_id"
	CodeUnknownKind          = "unknown_kind"
	CodeUnknownWorkflow      = "unknown_workflow"
	CodeInvalidCron          = "invalid_cron"
	CodeInvalidTimezone      = "invalid_timezone"
	CodeInvalidInterval      = "invalid_interval"
	CodeInvalidWebhookPath   = "invalid_webhook_path"
	CodeDuplicateWebhookPath = "duplicate_webhook_path"
	CodeInvalidTemplate      = "invalid_template"
	CodeUnknownTemplateVar   = "unknown_template_var"

	// CodeValidationFailed is the code of a ValidationError whose problems are not all
	// parse_error or too_large.
	CodeValidationFailed = "validation_failed"
)

// Problem is one problem of a schedule file or Spec. Message is complete on its own: it names
// the schedule (by id, or by index when the id is missing), the field and the fix.
type Problem struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	File       string `json:"file,omitempty"`
	ScheduleID string `json:"schedule_id,omitempty"`
	Path       string `json:"path,omitempty"` // e.g. "schedules[1].trigger.expression"
	Line       int    `json:"line,omitempty"`
	Column     int    `json:"column,omitempty"`
	Hint       string `json:"hint,omitempty"`
}

// String formats the problem as "file:line:col: message"; parts that are unknown are left out.
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

// ValidationError is returned when schedule files or specs have problems. It lists every
// problem found, in file and line order. Code is "parse_error" or "too_large" when every problem
// has that code, else "validation_failed".
type ValidationError struct {
	Code     string
	Problems []Problem
}

// ErrorCode returns the stable error code (for run.CodeOf).
func (e *ValidationError) ErrorCode() string { return e.Code }

// Error returns the problems, one per line when there are several.
func (e *ValidationError) Error() string {
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

// newValidationError returns nil for no problems.
func newValidationError(ps []Problem) error {
	if len(ps) == 0 {
		return nil
	}
	code := ps[0].Code
	for _, p := range ps {
		if p.Code != code || (code != CodeParseError && code != CodeTooLarge) {
			code = CodeValidationFailed
			break
		}
	}
	return &ValidationError{Code: code, Problems: ps}
}
