package schedule

import (
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // IANA time zones work on machines without a zoneinfo database

	"github.com/robfig/cron/v3"
)

// cronParser accepts the 6-field form (seconds first) and descriptors (@daily, @every 1h, …).
var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// MinInterval is the shortest interval accepted for `every` and `@every`.
const MinInterval = time.Second

// maxScan bounds the wall-clock candidates examined by one cronTrigger.next call. A schedule
// reaches it only when it matches every second of the hour repeated by a backward DST change.
const maxScan = 100_000

// trigger computes fire times. next returns the first fire time strictly after `after`, or the
// zero time when the schedule never fires again.
type trigger interface {
	next(after time.Time) time.Time
}

// intervalTrigger fires every `every`, counted from the previous fire (real elapsed time, no
// wall clock, so DST changes do not matter). `@every` cron descriptors compile to it too.
type intervalTrigger struct {
	every time.Duration
}

func (t intervalTrigger) next(after time.Time) time.Time { return after.Add(t.every) }

// cronTrigger fires on a cron expression evaluated on the wall clock of loc.
//
// robfig/cron evaluates expressions on real time and so skips a wall-clock time that falls in a
// spring-forward gap (a daily 02:30 schedule does not fire on that day) and fires twice a time
// in the hour repeated when clocks go back. cronTrigger instead evaluates the expression on the
// wall clock (robfig's SpecSchedule in UTC, which has no DST) and maps each matching wall time to
// a real instant:
//
//   - a wall time that exists once fires at that instant;
//   - a wall time in a gap fires at the first instant after the gap (02:30 on a spring-forward
//     night in New York fires at 03:00 EDT); several matching times in one gap fire once;
//   - a wall time that occurs twice fires at its first occurrence only, except when the
//     expression's hour field matches every hour (`*`, as in "0 */15 * * * *" or @hourly):
//     such schedules follow real time and fire in both occurrences of the repeated hour.
//
// So a daily schedule fires exactly once per local day.
type cronTrigger struct {
	spec     *cron.SpecSchedule // Location is UTC: fields are matched against wall-clock time
	loc      *time.Location
	allHours bool
}

// compileCron parses expression in the time zone named tz ("" means UTC). The problems it
// returns are complete messages for the field "trigger.expression" or "trigger.timezone".
func compileCron(expression, tz string) (trigger, []fieldProblem) {
	var ps []fieldProblem
	loc, tzp := loadLocation(tz)
	if tzp != nil {
		ps = append(ps, *tzp)
	}
	trig, cp := parseCron(expression, loc)
	if cp != nil {
		ps = append(ps, *cp)
	}
	if len(ps) > 0 {
		return nil, ps
	}
	return trig, nil
}

// fieldProblem is a problem of one field of a schedule, before it is placed in a file.
type fieldProblem struct {
	code  string
	field string // relative to the schedule, e.g. "trigger.expression"
	msg   string // names the field and the value
	hint  string // the fix; appended to msg
}

func loadLocation(tz string) (*time.Location, *fieldProblem) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	bad := func(why string) *fieldProblem {
		return &fieldProblem{code: CodeInvalidTimezone, field: "trigger.timezone",
			msg:  fmt.Sprintf("`trigger.timezone` %q %s", tz, why),
			hint: `use an IANA time zone name such as "UTC", "Europe/Paris" or "America/New_York"`}
	}
	if tz == "Local" || strings.TrimSpace(tz) != tz {
		return nil, bad("is not an IANA time zone name")
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, bad("is not a known time zone")
	}
	return loc, nil
}

func parseCron(expression string, loc *time.Location) (trig trigger, p *fieldProblem) {
	bad := func(why, hint string) (trigger, *fieldProblem) {
		return nil, &fieldProblem{code: CodeInvalidCron, field: "trigger.expression",
			msg: fmt.Sprintf("`trigger.expression` %q %s", expression, why), hint: hint}
	}
	const sixFields = "write 6 fields: second minute hour day-of-month month day-of-week, e.g. \"0 0 3 * * *\" for 03:00 every day"
	expr := strings.TrimSpace(expression)
	if expr == "" {
		return bad("is empty", sixFields)
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return bad("names a time zone inside the expression", "remove the TZ= prefix and set `trigger.timezone` instead")
	}
	fields := strings.Fields(expr)
	if strings.HasPrefix(expr, "@") {
		switch {
		case fields[0] == "@reboot":
			return bad("is not supported", "use catchup: true to fire once at start after a missed fire")
		case fields[0] == "@every":
			d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(expr, "@every")))
			if err != nil || len(fields) != 2 {
				return bad("has no valid duration", "write a Go duration such as \"@every 15m\" or \"@every 1h30m\"")
			}
			if d < MinInterval {
				return bad("is shorter than 1s", "use at least \"@every 1s\"")
			}
			return intervalTrigger{every: d}, nil
		}
	} else if len(fields) != 6 {
		switch len(fields) {
		case 5:
			return bad("has 5 fields; schedules need 6, with seconds first",
				fmt.Sprintf("use %q", "0 "+strings.Join(fields, " ")))
		case 7:
			return bad("has 7 fields; there is no year field", "remove the year (last field): "+fmt.Sprintf("%q", strings.Join(fields[:6], " ")))
		}
		return bad(fmt.Sprintf("has %d fields", len(fields)), sixFields)
	}
	defer func() {
		if recover() != nil {
			trig, p = bad("cannot be parsed", sixFields)
		}
	}()
	sched, err := cronParser.Parse(expr)
	if err != nil {
		hint := sixFields
		if strings.HasPrefix(expr, "@") {
			hint = "use @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or \"@every <duration>\""
		}
		return bad("is not a valid cron expression: "+err.Error(), hint)
	}
	spec, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return bad("is not a supported cron expression", sixFields)
	}
	wallSpec := *spec
	wallSpec.Location = time.UTC
	ct := &cronTrigger{spec: &wallSpec, loc: loc, allHours: spec.Hour&(1<<24-1) == 1<<24-1}
	// An expression such as "0 0 0 30 2 *" (February 30) never matches.
	if wallSpec.Next(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return bad("never fires (no date matches)", "check the day-of-month, month and day-of-week fields")
	}
	return ct, nil
}

// next returns the first fire time strictly after `after`, in loc (see cronTrigger).
func (c *cronTrigger) next(after time.Time) time.Time {
	a := after.In(c.loc)
	w := wallTime(a)
	// If a is in the first occurrence of an hour that the next zone change repeats, wall times
	// just before a occur again after the change: start the search early enough to see them.
	if d := repeatedAhead(a); d > 0 {
		w = w.Add(-d)
	}
	var best time.Time
	for range maxScan {
		w = c.spec.Next(w)
		if w.IsZero() {
			return best
		}
		insts := c.instants(w)
		for _, t := range insts {
			if t.After(after) && (best.IsZero() || t.Before(best)) {
				best = t
			}
		}
		// Instants of later wall times are never before this wall time's first instant.
		if !best.IsZero() && !insts[0].Before(best) {
			return best
		}
	}
	return best
}

// instants returns the real instants at which the wall time w (a UTC time holding local
// fields) fires, in order: one instant, or two for a repeated wall time when c.allHours.
func (c *cronTrigger) instants(w time.Time) []time.Time {
	valid := wallInstants(w, c.loc)
	switch {
	case len(valid) == 0:
		return []time.Time{afterGap(w, c.loc)}
	case len(valid) > 1 && !c.allHours:
		return valid[:1]
	}
	return valid
}

// wallTime returns t's wall-clock fields as a UTC time.
func wallTime(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// zoneOffsetsNear returns the UTC offsets (seconds) of the zones in effect around wall time w.
func zoneOffsetsNear(w time.Time, loc *time.Location) []int {
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	_, off := guess.Zone()
	offs := []int{off}
	start, end := guess.ZoneBounds()
	if !start.IsZero() {
		_, o := start.Add(-time.Nanosecond).Zone()
		offs = append(offs, o)
	}
	if !end.IsZero() {
		_, o := end.Zone()
		offs = append(offs, o)
	}
	return offs
}

// wallInstants returns the distinct instants whose wall clock in loc is w, in order.
func wallInstants(w time.Time, loc *time.Location) []time.Time {
	var out []time.Time
	for _, off := range zoneOffsetsNear(w, loc) {
		t := time.Unix(w.Unix()-int64(off), int64(w.Nanosecond())).In(loc)
		if wallTime(t).Equal(w) && !slices.ContainsFunc(out, t.Equal) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// afterGap returns the first instant after the gap that skips wall time w: the start of the
// zone that begins when the clocks jump over w.
func afterGap(w time.Time, loc *time.Location) time.Time {
	var best time.Time
	for _, off := range zoneOffsetsNear(w, loc) {
		t := time.Unix(w.Unix()-int64(off), int64(w.Nanosecond())).In(loc)
		if !wallTime(t).After(w) {
			continue
		}
		start, _ := t.ZoneBounds()
		if start.IsZero() || !wallTime(start).After(w) || wallTime(start.Add(-time.Nanosecond)).After(w) {
			continue
		}
		if best.IsZero() || start.Before(best) {
			best = start
		}
	}
	if best.IsZero() {
		// Not a gap after all (no zone data explains it): fall back to the standard library.
		best = time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	}
	return best
}

// repeatedAhead returns how far the wall clock goes back at the end of t's zone when t is at
// most that far before the change (so t's wall time occurs again), else 0.
func repeatedAhead(t time.Time) time.Duration {
	_, end := t.ZoneBounds()
	if end.IsZero() {
		return 0
	}
	_, before := t.Zone()
	_, after := end.Zone()
	d := time.Duration(before-after) * time.Second
	if d <= 0 || t.Before(end.Add(-d)) {
		return 0
	}
	return d
}

// compileInterval parses an interval trigger's `every`.
func compileInterval(every string) (trigger, *fieldProblem) {
	bad := func(why string) (trigger, *fieldProblem) {
		return nil, &fieldProblem{code: CodeInvalidInterval, field: "trigger.every",
			msg:  fmt.Sprintf("`trigger.every` %q %s", every, why),
			hint: `write a positive Go duration of at least 1s, such as "30s", "15m" or "1h30m" (use "24h" for a day)`}
	}
	d, err := time.ParseDuration(strings.TrimSpace(every))
	switch {
	case strings.TrimSpace(every) == "":
		return bad("is empty")
	case err != nil:
		return bad("is not a duration")
	case d <= 0:
		return bad("is not positive")
	case d < MinInterval:
		return bad("is shorter than 1s")
	}
	return intervalTrigger{every: d}, nil
}
