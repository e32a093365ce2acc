package engine

import (
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
)

// ParseSchedules decodes and validates one schedules file (YAML or JSON). source labels
// problems (usually the file name); workflows, when not nil, reports whether a workflow name is
// known, so unknown workflows are problems too. Errors are
// *flowtype.ScheduleValidationError.
func ParseSchedules(data []byte, source string, workflows func(string) bool) ([]flowtype.ScheduleSpec, error) {
	return schedule.Parse(data, schedule.ParseOptions{File: source, Workflows: workflows})
}

// ValidateSchedules checks schedules built in code (for example from Python) as a set: every
// problem at once, duplicate ids and webhook paths included.
func ValidateSchedules(specs []flowtype.ScheduleSpec, workflows func(string) bool) error {
	return schedule.Validate(specs, workflows)
}
