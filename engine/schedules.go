package engine

import "github.com/dcc-flow/dcc-flow/engine/internal/schedule"

// Public names of the scheduler's vocabulary (docs/guide/scheduler.md), so doors can parse and show
// schedules.
type (
	// ScheduleSpec is one schedule: which workflow to start, with which inputs, and when.
	ScheduleSpec = schedule.Spec
	// ScheduleTrigger is a schedule's cron, interval or webhook trigger.
	ScheduleTrigger = schedule.Trigger
	// ScheduleProblem is one problem of a schedule file, with file, line and schedule id.
	ScheduleProblem = schedule.Problem
	// ScheduleValidationError lists every problem of a set of schedules.
	ScheduleValidationError = schedule.ValidationError
)

// ParseSchedules decodes and validates one schedules file (YAML or JSON). source labels
// problems (usually the file name); workflows, when not nil, reports whether a workflow name is
// known, so unknown workflows are problems too. Errors are *ScheduleValidationError.
func ParseSchedules(data []byte, source string, workflows func(string) bool) ([]ScheduleSpec, error) {
	return schedule.Parse(data, schedule.ParseOptions{File: source, Workflows: workflows})
}

// ValidateSchedules checks schedules built in code (for example from Python) as a set: every
// problem at once, duplicate ids and webhook paths included.
func ValidateSchedules(specs []ScheduleSpec, workflows func(string) bool) error {
	return schedule.Validate(specs, workflows)
}
