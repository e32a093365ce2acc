package engine

import (
	"encoding/base64"
	"fmt"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// MaxSearchText bounds, in characters, each text of a run search (RunFilter: an input key or
// value, Tool, Worker, ErrorText): 256. Only input values this long are indexed, so a longer
// one could never match; it is refused rather than searched for.
const MaxSearchText = store.MaxSearchText

// maxSearchInputs bounds the input conditions of one search (RunFilter.Inputs).
const maxSearchInputs = 16

// ErrorKinds are the error kinds a search by error kind accepts (RunFilter.ErrorKind): the
// engine's own (run.Kind*, and those of the executor: a limit, a denied approval, an
// interrupted run, a bug).
var ErrorKinds = []string{run.KindTimeout, run.KindTransient, run.KindError, run.KindInvalidInput,
	run.KindNotFound, run.KindPermission, run.KindFatal, run.KindCancelled, run.KindInvalidOutput,
	run.KindTooLarge, run.KindStorage, run.KindWorkerLost, exec.KindLimitExceeded, exec.KindDenied,
	exec.KindInterrupted, exec.KindInternal}

// stepStatuses are the step statuses, for the error naming them.
var stepStatuses = []run.StepStatus{run.StepPending, run.StepRunning, run.StepRetrying, run.StepWaitingApproval,
	run.StepWaitingResources, run.StepCompleted, run.StepFailed, run.StepCancelled, run.StepSkipped, run.StepInterrupted}

// validate checks the search fields of f: known step statuses and error kind, texts of at most
// MaxSearchText characters, valid UTF-8 without NUL bytes; the error (code invalid_request) names
// the field, the valid values and the fix.
func (f *RunFilter) validate() error {
	bad := func(format string, a ...any) error {
		return &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf(format, a...)}
	}
	for _, st := range f.Statuses {
		if !st.Valid() {
			return bad("status %q is not a run status; use pending, running, waiting, paused, completed, failed, cancelled or interrupted", st)
		}
	}
	for _, st := range f.StepStatuses {
		if !st.Valid() {
			names := make([]string, len(stepStatuses))
			for i, s := range stepStatuses {
				names[i] = string(s)
			}
			return bad("step status %q is not a step status; use one of %s", st, strings.Join(names, ", "))
		}
	}
	if f.ErrorKind != "" && !slices.Contains(ErrorKinds, f.ErrorKind) {
		return bad("error kind %q is not an error kind; use one of %s (a tool's own kind: search its message with error text)",
			f.ErrorKind, strings.Join(ErrorKinds, ", "))
	}
	if len(f.Inputs) > maxSearchInputs {
		return bad("%d input conditions: at most %d", len(f.Inputs), maxSearchInputs)
	}
	check := func(field, s string) error {
		if n := utf8.RuneCountInString(s); n > MaxSearchText {
			return bad("%s is %d characters: at most %d are searched (longer input values are not indexed)", field, n, MaxSearchText)
		}
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return bad("%s is not valid UTF-8 text without NUL bytes", field)
		}
		return nil
	}
	for k, v := range f.Inputs {
		if k == "" {
			return bad("an input condition has an empty key; use KEY=VALUE")
		}
		if err := check(fmt.Sprintf("input key %.40q", k), k); err != nil {
			return err
		}
		if err := check(fmt.Sprintf("the value of input %.40q", k), v); err != nil {
			return err
		}
	}
	for _, c := range []struct{ field, s string }{{"tool", f.Tool}, {"worker", f.Worker}, {"error text", f.ErrorText}} {
		if err := check(c.field, c.s); err != nil {
			return err
		}
	}
	for _, b := range []struct {
		name string
		t    time.Time
	}{{"since", f.Since}, {"until", f.Until}} {
		if !b.t.IsZero() && (b.t.Before(minTimeBound) || b.t.After(maxTimeBound)) {
			return bad("%s %s is out of range: give a time from 1970 to 2261", b.name, b.t.Format(time.RFC3339))
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return bad("since (%s) is not before until (%s): the time range is empty", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	}
	return nil
}

// The times a search's range can name: stored times are Unix nanoseconds (to 2262).
var (
	minTimeBound = time.Unix(0, 0)
	maxTimeBound = time.Date(2261, 12, 31, 0, 0, 0, 0, time.UTC)
)

// ParseTimeBound parses a bound of a run search's time range (RunFilter.Since, Until): an RFC
// 3339 time ("2026-03-08T00:00:00Z", a fraction and any offset allowed) or an age before now:
// a whole number and a unit, s, m, h, d (24 hours) or w (7 days) ("90m", "2h", "7d"), or a Go
// duration ("1h30m"). A negative or zero age and anything else is an error (code invalid_request)
// naming the field and both forms.
func ParseTimeBound(field, s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	var age time.Duration
	if n := len(s); n > 1 && (s[n-1] == 'd' || s[n-1] == 'w') {
		if k, err := strconv.ParseInt(s[:n-1], 10, 32); err == nil && k > 0 {
			age = time.Duration(k) * 24 * time.Hour
			if s[n-1] == 'w' {
				age *= 7
			}
		}
	} else if d, err := time.ParseDuration(s); err == nil && d > 0 {
		age = d
	}
	if age <= 0 || age > 100*365*24*time.Hour {
		return time.Time{}, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf(
			"%s %.60q is not a time: give an RFC 3339 time (2026-03-08T00:00:00Z) or an age such as 30m, 2h or 7d", field, s)}
	}
	return now.Add(-age), nil
}

// FormatRunCursor returns c as the opaque text of a page's next cursor (ParseRunCursor).
func FormatRunCursor(c RunCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixNano(), 10) + "." + c.ID))
}

// ParseRunCursor returns the position a FormatRunCursor text names; ok is false for any other
// text.
func ParseRunCursor(s string) (c RunCursor, ok bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return RunCursor{}, false
	}
	ns, id, ok := strings.Cut(string(b), ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return RunCursor{}, false
	}
	return RunCursor{CreatedAt: time.Unix(0, n).UTC(), ID: id}, true
}
