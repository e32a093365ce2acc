package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A search's time bound is an RFC 3339 time or a positive age; anything else names both forms.
func TestParseTimeBound(t *testing.T) {
	now := time.Date(2026, 3, 8, 12, 0, 0, 0, time.UTC)
	for s, want := range map[string]time.Time{
		"2026-03-01T00:00:00Z":        time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC),
		"2026-03-01T02:00:00.5+02:00": time.Date(2026, 3, 1, 0, 0, 0, 5e8, time.UTC),
		"90s":                         now.Add(-90 * time.Second),
		"2h":                          now.Add(-2 * time.Hour),
		"1h30m":                       now.Add(-90 * time.Minute),
		"7d":                          now.Add(-7 * 24 * time.Hour),
		"2w":                          now.Add(-14 * 24 * time.Hour),
		" 30m ":                       now.Add(-30 * time.Minute),
	} {
		got, err := engine.ParseTimeBound("since", s, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTimeBound(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "yesterday", "-2h", "0d", "0s", "2026-13-01T00:00:00Z", "2026-03-01", "7 d", "1e3h",
		"99999999999d", strings.Repeat("9", 10000) + "h", "2h; DROP TABLE workflows"} {
		_, err := engine.ParseTimeBound("until", s, now)
		if run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "until") || !strings.Contains(err.Error(), "RFC 3339") ||
			len(err.Error()) > 300 {
			t.Errorf("ParseTimeBound(%.40q) = %v; want invalid_request naming until and both forms, short", s, err)
		}
	}
}

// Runs refuses a search it cannot answer, naming the field and the valid values, before the
// store sees it.
func TestRedteamRunSearchValidation(t *testing.T) {
	e, err := engine.Open(context.Background(), engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	huge := strings.Repeat("é", engine.MaxSearchText+1)
	for _, c := range []struct {
		f    engine.RunFilter
		says string
	}{
		{engine.RunFilter{StepStatuses: []run.StepStatus{"done"}}, "use one of pending, running"},
		{engine.RunFilter{Statuses: []run.Status{"done"}}, "not a run status"},
		{engine.RunFilter{ErrorKind: "timout"}, "use one of timeout, transient"},
		{engine.RunFilter{ErrorText: huge}, "error text is 257 characters: at most 256"},
		{engine.RunFilter{Tool: strings.Repeat("x", 10<<20)}, "at most 256"},
		{engine.RunFilter{Worker: "a\x00b"}, "NUL"},
		{engine.RunFilter{Inputs: map[string]string{"shot": huge}}, "not indexed"},
		{engine.RunFilter{Inputs: map[string]string{"": "x"}}, "empty key"},
		{engine.RunFilter{Since: time.Unix(10, 0), Until: time.Unix(5, 0)}, "the time range is empty"},
		{engine.RunFilter{Until: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, "out of range"},
	} {
		_, err := e.Runs(context.Background(), c.f)
		if run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), c.says) || len(err.Error()) > 400 {
			t.Errorf("Runs(%.80v) = %.200v; want invalid_request saying %q", c.f, err, c.says)
		}
	}
	if runs, err := e.Runs(context.Background(), engine.RunFilter{ErrorText: "%_\\'", Inputs: map[string]string{"a": strings.Repeat("é", engine.MaxSearchText)}}); err != nil || len(runs) != 0 {
		t.Errorf("a search at the bounds = %v, %v; want no runs, no error", runs, err)
	}
}
