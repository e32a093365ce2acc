package flowtype

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Lanes of host tools: the host runs "main" calls on its main thread (Maya's UI thread) and
// "worker" calls on a pool of its choosing.
const (
	LaneMain   = "main"
	LaneWorker = "worker"
)

// ToolInfo describes a tool: host tools are registered with engine.RegisterTool.
type ToolInfo struct {
	Name string `json:"name"`
	// Lane is LaneMain or LaneWorker for host tools, "" for built-in tools.
	Lane string `json:"lane,omitempty"`
	// MaxConcurrent bounds the calls of this tool in flight at once, across runs; 0 = no limit.
	MaxConcurrent int    `json:"max_concurrent,omitempty"`
	Description   string `json:"description,omitempty"`
	// Schema is the JSON Schema of the args, checked before every call: a call whose args do not
	// conform fails with kind invalid_input and is not retried.
	Schema json.RawMessage `json:"schema,omitempty"`
	// OutputSchema is the JSON Schema of the output, checked after every successful call: an
	// output that does not conform fails the attempt with kind invalid_output.
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Resources are the units of the engine's scarce resources each call of this tool holds
	// while it runs (docs/guide/resources.md), name → 1 to 1,000,000, for the steps that do not
	// say their own `resources` (a step's `resources` replaces the tool's whole); nil = none.
	// Every name must be one the engine declares, with an amount at most its limit.
	Resources map[string]int `json:"resources,omitempty"`
	Builtin   bool           `json:"builtin,omitempty"`
}

// ToolResult is what a tool returned: an output, or a structured error (ToolError).
type ToolResult struct {
	// Output is the tool's result as a JSON value (nil, bool, float64 or json.Number, string,
	// []any, map[string]any). It is ignored when OutputJSON is set.
	Output any
	// OutputJSON is the result as JSON text, for callers that have it in that form (the host
	// answers in JSON). When set it is authoritative.
	OutputJSON json.RawMessage
	// Error is non-nil when the tool failed; Output is then ignored.
	Error *ToolError
	// Worker names the pool worker process that ran the call, "POOL/PID" (docs/guide/pools.md), or
	// the engine that ran a call of the tool-call queue (its id, docs/operations/cluster.md); "" when the
	// call ran on neither.
	Worker string
	// Logs are the lines the call wrote (a pool worker's call output, docs/guide/pools.md "Output"),
	// kept on the step record; LogsDropped counts the lines the tool's side did not keep.
	Logs        []run.LogLine
	LogsDropped int
	// NotStarted, with a context error, says the call was never handed to a host thread: the
	// attempt did not begin (it waited in its lane until its step was cancelled).
	NotStarted bool
	// Files are the files the call said it read and wrote (current_call().reads and .writes,
	// @task's reads and writes arguments; docs/guide/assets.md), in the order it said so, a
	// path repeated as often as it was said; nil when it said none. The engine hashes them
	// when the attempt ends and records them with it.
	Files []FileUse
	// Env is the environment of the process that ran the call (the DCC's name and version,
	// plugin versions: a pool worker's dcc_flow.set_environment in its --init), a JSON object;
	// nil when the tool's side reported none (the engine then records its own Config.Env).
	Env json.RawMessage
}

// FileUse is one file a tool call read or wrote.
type FileUse struct {
	// Path is the file as the tool named it: absolute, or relative to the working directory of
	// the process that ran the call.
	Path string `json:"path"`
	// Role is FileRead or FileWrite.
	Role string `json:"role"`
}

// File roles of a FileUse.
const (
	FileRead  = "read"
	FileWrite = "write"
)

// ToolError is the structured failure of a tool call (kind, message, trace).
type ToolError struct {
	// Kind classifies the failure for retry_on: "timeout", "transient", "error",
	// "invalid_input", "not_found", "permission", "fatal", "cancelled", or any string the tool
	// chose. "" counts as "error".
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Trace   string `json:"trace,omitempty"` // e.g. a Python traceback
	// Final marks a failure that no attempt can change (args that do not conform to the tool's
	// schema): the step is not retried, whatever its retry policy says.
	Final bool `json:"-"`
}

// Error returns "kind: message", the kind "error" when Kind is "".
func (e *ToolError) Error() string {
	kind := e.Kind
	if kind == "" {
		kind = "error"
	}
	return kind + ": " + e.Message
}

// ToolReport is what a running tool call tells about itself (current_call().progress and .log,
// docs/reference/python/README.md; engine.Host().Report): its latest progress, log lines, or both.
type ToolReport struct {
	Progress *run.StepProgress
	Logs     []run.LogLine // StreamLog lines
	// Dropped counts lines the tool's side logged but did not send (a worker's own throttle).
	Dropped int
}

// RemoteCaller calls tools on remote MCP servers (tool_remote steps; engine.WithRemoteCaller).
// Implementations should honour ctx, but the engine does not rely on it: a call whose context
// ends is abandoned.
type RemoteCaller interface {
	CallRemote(ctx context.Context, dcc, tool string, args map[string]any) (ToolResult, error)
}

// PendingCall is a host tool call waiting for the host, as handed out by the host queue's Pull.
type PendingCall struct {
	ID      uint64         `json:"id"`
	Lane    string         `json:"lane"`
	Tool    string         `json:"tool"`
	RunID   string         `json:"run_id"`
	StepKey string         `json:"step_key"`
	Args    map[string]any `json:"args"` // must not be modified
	Attempt int            `json:"attempt"`
	// Deadline is when the attempt times out, set when the call is pulled: an attempt's time
	// counts from when a host thread starts it, not from when it was queued. Zero = none.
	Deadline time.Time `json:"deadline,omitzero"`
	// Traceparent is the W3C traceparent of the call's span when the engine traces
	// (docs/guide/tracing.md); "" otherwise.
	Traceparent string `json:"traceparent,omitempty"`
}

// PullRequest selects the host tool calls the host queue's Pull hands out: lanes, an optional
// run, a batch size, a wait bound and a stop channel (see engine.RunDone).
type PullRequest struct {
	// Lanes to take calls from, in priority order; empty means LaneMain.
	Lanes []string
	// RunID restricts the calls to one run and its sub-workflows' child runs; "" means any run.
	// A host thread that drives one run (Python's Engine.run) pulls only that run's calls.
	RunID string
	// Max is the most calls returned; ≤ 0 means 1.
	Max int
	// Timeout bounds the wait for the first call (real time); ≤ 0 polls without waiting.
	Timeout time.Duration
	// Stop, when closed, ends the wait early with no calls (e.g. the watched run finished).
	Stop <-chan struct{}
	// Puller is who takes the calls (OpenPuller); 0 means none. The calls a puller holds go
	// back to their lane when it hands them back (Release) or closes (ClosePuller).
	Puller uint64
	// LockedThread says the caller's goroutine is locked to its OS thread, as a cgo callback from
	// a host's thread (the C ABI's calls_next) is. Such a Pull of the main lane, right after its
	// puller's answer, meets the run's next call halfway: it spins without yielding while the
	// run's goroutine sleeps for the answer in the kernel, where a futex allows (Linux), instead
	// of two thread switches through the Go scheduler (docs/design/performance.md). An ordinary
	// goroutine parks and is woken as before: the scheduler switches goroutines on one thread.
	LockedThread bool
}

// ErrDropped is the cause of the host queue's Complete error for a late result: the call is no
// longer pending (its step was cancelled or timed out, or it was already answered) and the
// result was dropped. Test for it with errors.Is; the error is a *run.Error with code
// invalid_state whose message says why ("attempt 1 timed out after 5s") and whose details are
// {"call_id", "reason"?}.
var ErrDropped = errors.New("the tool call is no longer pending; its result was dropped")
