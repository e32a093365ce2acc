package run

import (
	"errors"
	"fmt"
)

// Error kinds classify a failed attempt; `retry_on` lists kinds. A tool may return any other
// string as its kind; it is retried by default like `error`.
const (
	KindTimeout      = "timeout"
	KindTransient    = "transient"
	KindError        = "error"
	KindInvalidInput = "invalid_input"
	KindNotFound     = "not_found"
	KindPermission   = "permission"
	KindFatal        = "fatal"
	KindCancelled    = "cancelled"
	// KindInvalidOutput: the tool returned a value that cannot be carried as JSON (a string
	// that is not Unicode, a value nested too deep, a NaN, an object that is not serialisable).
	KindInvalidOutput = "invalid_output"
	// KindTooLarge: the tool's output is over MaxMessageBytes (64 MiB of JSON): an in-process
	// tool's answer, or one message from a pool worker or a remote MCP server.
	KindTooLarge = "too_large"
	// KindStorage: the run's database could not be written (a full disk, a read-only or
	// corrupted file). It is a run-level error kind (RunError.Kind), not a tool's.
	KindStorage = "storage"
	// KindWorkerLost: the pool worker process serving the call exited or crashed before it
	// answered (docs/guide/pools.md). Retryable by default, like transient; the retry goes to
	// another worker.
	KindWorkerLost = "worker_lost"
)

// MaxMessageBytes bounds one message a tool's answer travels in, whichever way it comes: a C
// ABI request (an in-process tool's result), and every message a pool worker or a remote MCP
// server sends (a line of a stdio worker, an HTTP response body, an SSE event). Past it the call
// fails with KindTooLarge; a worker that sent the message is killed (docs/reference/limits.md).
const MaxMessageBytes = 64 << 20

// RetryableByDefault reports whether an attempt that failed with kind is retried when the step's
// retry policy has no `retry_on` list: every kind except fatal, cancelled, invalid_input,
// permission, not_found, invalid_output and too_large (a tool that returned an unencodable or
// oversized value will return it again). The empty kind counts as `error`.
func RetryableByDefault(kind string) bool {
	switch kind {
	case KindFatal, KindCancelled, KindInvalidInput, KindPermission, KindNotFound, KindInvalidOutput, KindTooLarge:
		return false
	}
	return true
}

// Stable error codes shared by the C ABI envelope, MCP tool errors and Python exceptions.
const (
	CodeInvalidRequest   = "invalid_request"
	CodeParseError       = "parse_error"
	CodeValidationFailed = "validation_failed"
	CodeTooLarge         = "too_large"
	CodeNotFound         = "not_found"
	CodeInvalidInput     = "invalid_input"
	CodeUnknownTool      = "unknown_tool"
	CodeNotResumable     = "not_resumable"
	CodeSpecChanged      = "spec_changed"
	CodeInvalidState     = "invalid_state"
	CodeClosed           = "closed"
	CodeDBLocked         = "db_locked"
	CodeReadOnly         = "read_only"
	CodeStaleHandle      = "stale_handle"
	CodeTimeout          = "timeout"
	CodeCancelled        = "cancelled"
	// CodeStorage: the database could not be read or written: a full disk, an I/O error, a
	// corrupted (malformed) file, a file that cannot be opened. Not a bug: fix the storage.
	CodeStorage  = "storage"
	CodeInternal = "internal"
	// CodeWorkerStart: a pool worker could not be started (docs/guide/pools.md): its command failed,
	// exited at start or did not answer initialize in time; the message names the command and
	// the end of its stderr.
	CodeWorkerStart = "worker_start"
)

// Error is an error with a stable code. Doors (C ABI, MCP, Python) use Code to choose the
// exception or status to report; Message is for humans and names the step and field when known.
type Error struct {
	Code    string
	Message string
	StepID  string         // optional
	Details map[string]any // optional, JSON-encodable
	Err     error          // optional cause
}

func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the stable code of err: the Code of the first *Error in its chain, or
// CodeInternal when there is none. nil has the empty code.
func CodeOf(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var c interface{ ErrorCode() string }
	if errors.As(err, &c) {
		return c.ErrorCode()
	}
	return CodeInternal
}

// StepError is the failure of one attempt (or the last attempt) of a step instance.
type StepError struct {
	RunID   string
	StepKey string // e.g. "per_file[3].export"
	Attempt int
	Kind    string // an error kind: KindTimeout, KindTransient, … or a tool's own string
	Message string
	Trace   string // optional traceback from the tool (e.g. a Python traceback)
	Err     error  // optional cause
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %q attempt %d failed (%s): %s", e.StepKey, e.Attempt, e.Kind, e.Message)
}

func (e *StepError) Unwrap() error { return e.Err }
