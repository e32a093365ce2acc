package schedule

import (
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/problem"
)

// Problem codes of schedule files. They are stable: the C ABI, MCP and Python report them as is.
// Codes shared with engine/spec have the same strings.
const (
	CodeParseError           = problem.CodeParseError
	CodeTooLarge             = problem.CodeTooLarge
	CodeWrongType            = problem.CodeWrongType
	CodeMissingField         = "missing_field"
	CodeUnknownField         = problem.CodeUnknownField
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

// Problem is one problem of a schedule file or Spec: the type spec problems have too
// (problem.Problem). Message is complete on its own: it names the schedule (by id, or by index
// when the id is missing), the field and the fix. File and ScheduleID are set when known;
// StepID is always empty. String formats it as "file:line:col: message".
type Problem = problem.Problem

// ValidationError is returned when schedule files or specs have problems
// (flowtype.ScheduleValidationError): every problem found, in file and line order. Code is
// "parse_error" or "too_large" when every problem has that code, else "validation_failed".
type ValidationError = flowtype.ScheduleValidationError

var _ problem.Error = (*ValidationError)(nil)

// newValidationError returns nil for no problems. Problems without a severity get "error".
func newValidationError(ps []Problem) error {
	if len(ps) == 0 {
		return nil
	}
	problem.FillSeverity(ps)
	code := ps[0].Code
	for _, p := range ps {
		if p.Code != code || (code != CodeParseError && code != CodeTooLarge) {
			code = CodeValidationFailed
			break
		}
	}
	return &ValidationError{Code: code, Problems: ps}
}
