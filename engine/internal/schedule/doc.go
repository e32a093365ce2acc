// Package schedule is the scheduler of dcc-flow (docs/guide/scheduler.md): it parses
// *.schedules.yaml files, fires workflows on cron and interval triggers, serves webhook
// triggers over HTTP, and records every fire.
//
// The scheduler does not run workflows. It asks the engine through a Starter to start a run,
// with the schedule's inputs rendered from the trigger context ({{trigger.payload.x}},
// {{trigger.schedule_id}}, {{trigger.workflow}}, {{trigger.fired_at}}, …), and asks it how
// many runs of a schedule are active to enforce max_concurrent. Fires are recorded in a
// FireLog (MemFireLog in memory; the store's schedule_fires table for persistent engines).
//
// Parsing: Parse, LoadFile and LoadDir validate every schedule, disabled ones included, and
// report every problem at once as a *ValidationError whose Problems name the file, line,
// column, schedule id, field and fix, with a stable code.
//
// Cron expressions have 6 fields (seconds first) or are descriptors, evaluated in an IANA time
// zone (tzdata is embedded). Across DST changes a daily schedule fires exactly once per local
// day: a wall time skipped by a spring-forward change fires at the first instant after the
// gap, and a wall time repeated by a fall-back change fires at its first occurrence only,
// unless the hour field matches every hour, in which case both occurrences fire (see
// cronTrigger).
//
// Time and randomness are injected (WithClock, WithRand): the clock is the engine's
// (engine/internal/clock), and its Stub drives the tests. The package never writes to stdout and never panics on bad input; a panicking
// Starter is turned into a failed fire.
package schedule
