package run

import "encoding/json"

// Streams of a LogLine.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	// StreamLog: a line the tool logged with current_call().log (docs/reference/python/README.md), with its
	// fields, or a logging record of an in-process Python tool, with its Level and Logger.
	StreamLog = "log"
)

// Bounds on a LogLine's Level and Logger (longer ones are cut like a line's text, Clip).
const (
	MaxLogLevelBytes  = 32
	MaxLogLoggerBytes = 256
)

// ValidStream reports whether s names a stream of a LogLine (StreamStdout, StreamStderr or
// StreamLog).
func ValidStream(s string) bool {
	return s == StreamStdout || s == StreamStderr || s == StreamLog
}

// Caps on the output kept on one step record (docs/reference/limits.md "Step output"): the newest lines
// are kept, across the step's attempts, and the rest are counted in the record's logs_dropped.
const (
	MaxStepLogLines = 1000
	MaxStepLogBytes = 256 << 10 // of line text
)

// LogLine is one line a step's tool wrote while it ran, as kept on the step record (the "logs"
// of a step's JSON): the output of a call on a pool worker (docs/guide/pools.md "Output"), what an
// in-process Python tool printed or logged (docs/reference/python/tool-calls.md "Output of in-process tools"), and
// current_call().log lines. Later entries may carry more fields; readers ignore the fields they
// do not know.
type LogLine struct {
	Stream  string `json:"stream"`            // StreamStdout, StreamStderr or StreamLog
	Text    string `json:"text"`              // without its newline
	Attempt int    `json:"attempt,omitempty"` // the attempt that wrote it, 1-based; 0 when unknown
	// Fields are the keyword fields of a StreamLog line, a JSON object; nil when none.
	Fields json.RawMessage `json:"fields,omitempty"`
	// Level and Logger are a logging record's level name ("WARNING") and logger name
	// ("studio.export") for a StreamLog line an in-process Python tool logged with the
	// logging module; "" otherwise (current_call().log lines, output lines).
	Level  string `json:"level,omitempty"`
	Logger string `json:"logger,omitempty"`
}

// CapLogs keeps the newest lines of lines within MaxStepLogLines and MaxStepLogBytes of text
// (a single line longer than MaxStepLogBytes keeps its last MaxStepLogBytes bytes). It returns
// them and how many lines it dropped; it does not modify lines.
func CapLogs(lines []LogLine) ([]LogLine, int) {
	keep, size := 0, 0
	for i := len(lines) - 1; i >= 0 && keep < MaxStepLogLines; i-- {
		n := len(lines[i].Text)
		if size+n > MaxStepLogBytes {
			if keep == 0 { // one huge line: its end
				l := lines[i]
				start := n - MaxStepLogBytes
				for start < n && l.Text[start]&0xC0 == 0x80 { // not in the middle of a UTF-8 sequence
					start++
				}
				l.Text = l.Text[start:]
				return []LogLine{l}, len(lines) - 1
			}
			break
		}
		size += n
		keep++
	}
	return lines[len(lines)-keep:], len(lines) - keep
}
