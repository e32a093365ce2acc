package run

import (
	"encoding/json"
	"math"
	"time"
)

// Limits on what a running tool reports about itself (current_call().progress and .log,
// docs/reference/limits.md "Progress and logs"). They bound what one call can write to the event log and
// the database, however fast it reports.
const (
	// ReportInterval is the shortest time between two writes of one call's reports: at most
	// one step_progress and one step_log event per interval (10 a second). Reports in between
	// are coalesced: the latest progress replaces the earlier ones, log lines are buffered. The
	// last report is written at the end of the interval, and at the latest when the call ends.
	ReportInterval = 100 * time.Millisecond
	// ReportRowInterval is the shortest time between two writes of the step record with the
	// reported progress while the call runs (the record is written once more when the call
	// ends).
	ReportRowInterval = time.Second
	// ReportLogsRowInterval is the shortest time between two writes of the reported log lines
	// on the step record while the call runs (the step_log events carry them at once).
	ReportLogsRowInterval = 10 * time.Second
	// MaxLogLinesPerFlush bounds the log lines buffered between two writes (so at most 1,000
	// lines a second per call); the lines logged beyond it are counted as dropped.
	MaxLogLinesPerFlush = 100
	// MaxLogLineBytes bounds the text of one log line; longer text keeps its first
	// MaxLogLineBytes bytes and ends with "…".
	MaxLogLineBytes = 4 << 10
	// MaxLogFieldsBytes bounds the JSON of one log line's fields; larger fields are left out
	// and the line says so.
	MaxLogFieldsBytes = 4 << 10
	// MaxProgressMessageBytes bounds a progress message (cut like a log line's text).
	MaxProgressMessageBytes = 512
)

// StepProgress is the latest progress a running tool reported: the detail of a step_progress
// event and the "progress" of the step record. Done is how much is done, Total (optional) of
// how much, in the tool's unit (frames, files, bytes).
type StepProgress struct {
	Done    float64  `json:"done"`
	Total   *float64 `json:"total,omitempty"`
	Message string   `json:"message,omitempty"`
	// Attempt is the attempt that reported it (set by the engine).
	Attempt int `json:"attempt,omitempty"`
}

// Check returns what is wrong with p ("" when nothing): Done and Total must be finite and not
// negative.
func (p StepProgress) Check() string {
	if math.IsNaN(p.Done) || math.IsInf(p.Done, 0) || p.Done < 0 {
		return "progress done must be a finite number ≥ 0"
	}
	if p.Total != nil && (math.IsNaN(*p.Total) || math.IsInf(*p.Total, 0) || *p.Total < 0) {
		return "progress total must be a finite number ≥ 0"
	}
	return ""
}

// Clip cuts s to at most max bytes, at a UTF-8 boundary, ending with "…" when it was cut.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	end := max - len("…")
	for end > 0 && s[end]&0xC0 == 0x80 {
		end--
	}
	return s[:end] + "…"
}

// LogLineOf makes a StreamLog line of text and fields (a JSON object or nil), within
// MaxLogLineBytes and MaxLogFieldsBytes.
func LogLineOf(text string, fields json.RawMessage) LogLine {
	l := LogLine{Stream: StreamLog, Text: Clip(text, MaxLogLineBytes)}
	switch {
	case len(fields) == 0 || string(fields) == "null" || string(fields) == "{}":
	case len(fields) > MaxLogFieldsBytes:
		l.Text = Clip(l.Text+" [fields left out: over 4 KiB]", MaxLogLineBytes)
	default:
		l.Fields = fields
	}
	return l
}
