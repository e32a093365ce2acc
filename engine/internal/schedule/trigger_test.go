package schedule

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func mustLoc(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

func mustCron(t testing.TB, expr, tz string) trigger {
	t.Helper()
	trig, ps := compileCron(expr, tz)
	if len(ps) > 0 {
		t.Fatalf("compileCron(%q, %q): %+v", expr, tz, ps)
	}
	return trig
}

// fires returns the first n fire times after start, formatted in the trigger's zone.
func fires(trig trigger, start time.Time, n int, loc *time.Location) []string {
	var out []string
	t := start
	for range n {
		t = trig.next(t)
		if t.IsZero() {
			out = append(out, "never")
			break
		}
		out = append(out, t.In(loc).Format("2006-01-02 15:04:05 MST"))
	}
	return out
}

func TestCronNextSequence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, expr, tz, start string // start is a wall time in tz
		want                  []string
	}{
		{"seconds step", "*/15 * * * * *", "UTC", "2026-01-01 00:00:00",
			[]string{"2026-01-01 00:00:15 UTC", "2026-01-01 00:00:30 UTC", "2026-01-01 00:00:45 UTC", "2026-01-01 00:01:00 UTC"}},
		{"seconds list", "5,10 0 12 * * *", "UTC", "2026-01-01 11:00:00",
			[]string{"2026-01-01 12:00:05 UTC", "2026-01-01 12:00:10 UTC", "2026-01-02 12:00:05 UTC"}},
		{"daily 03:00", "0 0 3 * * *", "UTC", "2026-01-01 03:00:00",
			[]string{"2026-01-02 03:00:00 UTC", "2026-01-03 03:00:00 UTC"}},
		{"weekdays", "30 15 10 * * MON-FRI", "UTC", "2026-01-02 11:00:00", // a Friday
			[]string{"2026-01-05 10:15:30 UTC", "2026-01-06 10:15:30 UTC"}},
		{"descriptor daily in Paris", "@daily", "Europe/Paris", "2026-01-01 12:00:00",
			[]string{"2026-01-02 00:00:00 CET", "2026-01-03 00:00:00 CET"}},
		{"descriptor hourly", "@hourly", "UTC", "2026-01-01 00:30:00",
			[]string{"2026-01-01 01:00:00 UTC", "2026-01-01 02:00:00 UTC"}},
		{"descriptor every", "@every 1h30m", "UTC", "2026-01-01 00:00:00",
			[]string{"2026-01-01 01:30:00 UTC", "2026-01-01 03:00:00 UTC"}},
		{"timezone Tokyo", "0 0 9 * * *", "Asia/Tokyo", "2026-01-01 00:00:00",
			[]string{"2026-01-01 09:00:00 JST", "2026-01-02 09:00:00 JST"}},
		{"feb 29", "0 0 0 29 2 *", "UTC", "2026-01-01 00:00:00",
			[]string{"2028-02-29 00:00:00 UTC"}},

		// Spring forward in New York: 02:00 EST → 03:00 EDT on 2026-03-08.
		{"NY spring 02:30 fires at 03:00", "0 30 2 * * *", "America/New_York", "2026-03-07 12:00:00",
			[]string{"2026-03-08 03:00:00 EDT", "2026-03-09 02:30:00 EDT", "2026-03-10 02:30:00 EDT"}},
		{"NY spring 01:30 unaffected", "0 30 1 * * *", "America/New_York", "2026-03-07 12:00:00",
			[]string{"2026-03-08 01:30:00 EST", "2026-03-09 01:30:00 EDT"}},
		{"NY spring every 30 min", "0 */30 * * * *", "America/New_York", "2026-03-08 00:45:00",
			[]string{"2026-03-08 01:00:00 EST", "2026-03-08 01:30:00 EST", "2026-03-08 03:00:00 EDT", "2026-03-08 03:30:00 EDT"}},
		{"NY spring every minute of 2 o'clock fires once", "0 * 2 * * *", "America/New_York", "2026-03-07 12:00:00",
			[]string{"2026-03-08 03:00:00 EDT", "2026-03-09 02:00:00 EDT", "2026-03-09 02:01:00 EDT"}},

		// Fall back in New York: 02:00 EDT → 01:00 EST on 2026-11-01.
		{"NY fall 01:30 fires once", "0 30 1 * * *", "America/New_York", "2026-10-31 12:00:00",
			[]string{"2026-11-01 01:30:00 EDT", "2026-11-02 01:30:00 EST", "2026-11-03 01:30:00 EST"}},
		{"NY fall 02:30 unaffected", "0 30 2 * * *", "America/New_York", "2026-10-31 12:00:00",
			[]string{"2026-11-01 02:30:00 EST", "2026-11-02 02:30:00 EST"}},
		{"NY fall fixed hour with minutes fires once", "0 */30 1 * * *", "America/New_York", "2026-10-31 12:00:00",
			[]string{"2026-11-01 01:00:00 EDT", "2026-11-01 01:30:00 EDT", "2026-11-02 01:00:00 EST"}},
		{"NY fall hourly follows real time", "0 0 * * * *", "America/New_York", "2026-10-31 23:30:00",
			[]string{"2026-11-01 00:00:00 EDT", "2026-11-01 01:00:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 02:00:00 EST"}},
		{"NY fall every 20 min follows real time", "0 */20 * * * *", "America/New_York", "2026-11-01 01:30:00",
			[]string{"2026-11-01 01:40:00 EDT", "2026-11-01 01:00:00 EST", "2026-11-01 01:20:00 EST", "2026-11-01 01:40:00 EST", "2026-11-01 02:00:00 EST"}},

		// Other zones.
		{"Sao Paulo 2018 midnight gap", "@daily", "America/Sao_Paulo", "2018-11-03 12:00:00",
			[]string{"2018-11-04 01:00:00 -02", "2018-11-05 00:00:00 -02"}},
		{"Lord Howe 30-minute gap", "0 15 2 * * *", "Australia/Lord_Howe", "2026-10-03 12:00:00",
			[]string{"2026-10-04 02:30:00 +11", "2026-10-05 02:15:00 +11"}},
		{"Lord Howe 30-minute overlap", "0 45 1 * * *", "Australia/Lord_Howe", "2026-04-04 12:00:00",
			[]string{"2026-04-05 01:45:00 +11", "2026-04-06 01:45:00 +1030"}},
		{"London fall", "0 30 1 * * *", "Europe/London", "2026-10-24 12:00:00",
			[]string{"2026-10-25 01:30:00 BST", "2026-10-26 01:30:00 GMT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			loc := mustLoc(t, tc.tz)
			start, err := time.ParseInLocation("2006-01-02 15:04:05", tc.start, loc)
			if err != nil {
				t.Fatal(err)
			}
			got := fires(mustCron(t, tc.expr, tc.tz), start, len(tc.want), loc)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("%s in %s after %s:\ngot  %q\nwant %q", tc.expr, tc.tz, tc.start, got, tc.want)
			}
		})
	}
}

// TestCronDSTExactlyOncePerLocalDay checks the DST rule over whole years: a daily schedule
// fires exactly once on every local day, at its wall time when that exists and otherwise at the
// first instant after the gap; and at the first occurrence of a repeated wall time.
func TestCronDSTExactlyOncePerLocalDay(t *testing.T) {
	t.Parallel()
	zones := []struct {
		name string
		year int
	}{
		{"America/New_York", 2026}, {"Europe/London", 2026}, {"Europe/Paris", 2026}, {"Australia/Sydney", 2026},
		{"Australia/Lord_Howe", 2026}, {"America/Sao_Paulo", 2018}, {"America/Santiago", 2026},
		{"Asia/Tokyo", 2026}, {"UTC", 2026}, {"America/Havana", 2026},
	}
	clock := []string{"00:00:00", "00:30:00", "01:00:00", "01:30:00", "01:59:59", "02:00:00", "02:30:00", "03:00:00", "12:00:00", "23:59:59"}
	for _, z := range zones {
		for _, hms := range clock {
			t.Run(z.name+"/"+hms, func(t *testing.T) {
				t.Parallel()
				loc := mustLoc(t, z.name)
				var h, m, s int
				fmt.Sscanf(hms, "%d:%d:%d", &h, &m, &s)
				trig := mustCron(t, fmt.Sprintf("%d %d %d * * *", s, m, h), z.name)
				day := time.Date(z.year, 1, 1, 0, 0, 0, 0, time.UTC)
				at := time.Date(z.year, 1, 1, 0, 0, 0, 0, loc).Add(-time.Nanosecond)
				for range 366 {
					at = trig.next(at)
					got := at.In(loc)
					if y, mo, d := got.Date(); y != day.Year() || mo != day.Month() || d != day.Day() {
						t.Fatalf("after %s the next fire is %s; want one on %s", day.AddDate(0, 0, -1).Format("2006-01-02"), got, day.Format("2006-01-02"))
					}
					want := time.Date(day.Year(), day.Month(), day.Day(), h, m, s, 0, time.UTC)
					switch insts := wallInstants(want, loc); {
					case len(insts) > 0:
						if !got.Equal(insts[0]) {
							t.Fatalf("%s: fired at %s; want the first occurrence %s", day.Format("2006-01-02"), got, insts[0])
						}
					default: // in a gap: the first valid instant after it
						before := got.Add(-time.Nanosecond).In(loc)
						if !wallTime(got).After(want) || wallTime(before).After(want) {
							t.Fatalf("%s: %s is in a gap; fired at %s, which is not the first instant after it", day.Format("2006-01-02"), hms, got)
						}
					}
					day = day.AddDate(0, 0, 1)
				}
			})
		}
	}
}

func TestCronInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr, tz, code, hint string
	}{
		{"0 3 * * *", "", CodeInvalidCron, `use "0 0 3 * * *"`},
		{"  0 3  *  * *", "", CodeInvalidCron, `use "0 0 3 * * *"`},
		{"0 0 3 * * * 2026", "", CodeInvalidCron, "remove the year"},
		{"0 0 3 * *  * * *", "", CodeInvalidCron, "write 6 fields"},
		{"", "", CodeInvalidCron, "write 6 fields"},
		{"61 * * * * *", "", CodeInvalidCron, "write 6 fields"},
		{"0 0 25 * * *", "", CodeInvalidCron, "write 6 fields"},
		{"a b c d e f", "", CodeInvalidCron, "write 6 fields"},
		{"0 0 0 30 2 *", "", CodeInvalidCron, "check the day-of-month"},
		{"@reboot", "", CodeInvalidCron, "catchup"},
		{"@sometimes", "", CodeInvalidCron, "@daily"},
		{"@every 10ms", "", CodeInvalidCron, `"@every 1s"`},
		{"@every soon", "", CodeInvalidCron, `"@every 15m"`},
		{"TZ=Europe/Paris 0 0 3 * * *", "", CodeInvalidCron, "trigger.timezone"},
		{"0 0 3 * * *", "Mars/Olympus", CodeInvalidTimezone, "IANA"},
		{"0 0 3 * * *", "Local", CodeInvalidTimezone, "IANA"},
		{"0 0 3 * * *", " UTC", CodeInvalidTimezone, "IANA"},
		{"0 0 3 * * *", "../../etc/passwd", CodeInvalidTimezone, "IANA"},
	}
	for _, tc := range tests {
		t.Run(tc.expr+"|"+tc.tz, func(t *testing.T) {
			t.Parallel()
			_, ps := compileCron(tc.expr, tc.tz)
			if len(ps) != 1 {
				t.Fatalf("want 1 problem, got %+v", ps)
			}
			if ps[0].code != tc.code || !strings.Contains(ps[0].hint, tc.hint) {
				t.Errorf("got %s %q (hint %q); want %s with a hint containing %q", ps[0].code, ps[0].msg, ps[0].hint, tc.code, tc.hint)
			}
		})
	}
}

func TestCronValid(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"0 0 3 * * *", "*/5 * * * * *", "0 0 0 1 1 *", "0 30 9 * * mon-fri", "0 0 12 ? * SUN",
		"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly", "@every 1s", "@every 1h30m"} {
		t.Run(expr, func(t *testing.T) {
			t.Parallel()
			if _, ps := compileCron(expr, "Europe/Berlin"); len(ps) > 0 {
				t.Errorf("compileCron(%q): %+v", expr, ps)
			}
		})
	}
}

func TestInterval(t *testing.T) {
	t.Parallel()
	tests := []struct {
		every string
		want  time.Duration
		bad   string // substring of the message when invalid
	}{
		{every: "15m", want: 15 * time.Minute},
		{every: "1h30m", want: 90 * time.Minute},
		{every: "1s", want: time.Second},
		{every: " 2h ", want: 2 * time.Hour},
		{every: "500ms", bad: "shorter than 1s"},
		{every: "0s", bad: "not positive"},
		{every: "-5m", bad: "not positive"},
		{every: "1d", bad: "not a duration"},
		{every: "15", bad: "not a duration"},
		{every: "", bad: "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.every, func(t *testing.T) {
			t.Parallel()
			trig, p := compileInterval(tc.every)
			if tc.bad != "" {
				if p == nil || p.code != CodeInvalidInterval || !strings.Contains(p.msg, tc.bad) {
					t.Fatalf("compileInterval(%q) = %+v; want invalid_interval %q", tc.every, p, tc.bad)
				}
				return
			}
			if p != nil {
				t.Fatalf("compileInterval(%q): %+v", tc.every, p)
			}
			start := time.Date(2026, 3, 8, 1, 0, 0, 0, mustLoc(t, "America/New_York"))
			if got := trig.next(start); got.Sub(start) != tc.want {
				t.Errorf("next is %v after start; want %v (real time, DST does not matter)", got.Sub(start), tc.want)
			}
		})
	}
}

func BenchmarkCronNext(b *testing.B) {
	trig := mustCron(b, "0 30 2 * * *", "America/New_York")
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		t = trig.next(t)
	}
}
