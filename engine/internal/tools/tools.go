// Package tools routes the tool calls of workflow steps: host tools (registered by Python and
// pulled by it, see Host), built-in Go tools (flow__echo, flow__sleep, flow__fail) and remote MCP
// servers (tool_remote steps, through a RemoteCaller).
package tools

import (
	"context"
	"errors"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// Call is one attempt of a tool step.
type Call struct {
	RunID string
	// Ancestors are the runs above RunID when it is a sub-workflow's child run, outermost
	// first; nil for a run started on its own. A pull of one of them takes this call too.
	Ancestors []string
	StepKey   string // the step instance key, e.g. "per_file[3].export"
	Tool      string
	DCC       string // the remote's name for tool_remote calls; "" otherwise
	// Queued marks a call claimed from the tool-call queue of a shared database (docs/operations/cluster.md):
	// it runs here or fails, it is never queued again.
	Queued bool
	// Adopt marks the first attempt of a step instance that an earlier execution of the run
	// had started (a resume, a takeover): on a shared database, when the tool-call queue holds
	// a call of the same run, step key, tool, remote and args still queued or claimed — left in
	// flight by the run's former orchestrator — the attempt waits for that call's outcome
	// instead of making the call again (docs/operations/cluster.md, "The tool-call queue").
	Adopt bool
	// AdoptAttempt, with Adopt, is the attempt the earlier execution was making when it
	// stopped (its step row interrupted at that attempt); 0 when it was making none. The call
	// of that attempt is adopted even when it already ended: its outcome came after its
	// orchestrator stopped, so no step recorded it, and making the call again would run it twice.
	AdoptAttempt int
	// Pooled marks a tool step routed to a worker pool (DCC is the pool): the schemas of a host
	// tool of the same name, when one is registered, are checked as for an in-process call.
	Pooled bool
	// PoolOptional marks a Pooled call of a step's own `pool:`: when neither this engine nor
	// another attached engine has the pool, it runs in-process (Router.Call) instead.
	PoolOptional bool
	// Args are the rendered arguments, JSON values. Callers must not modify them: parts may be
	// shared with the spec.
	Args     map[string]any
	Attempt  int       // 1-based
	Deadline time.Time // the attempt's deadline on the engine clock; zero = none
	// Timeout, for a host tool call (Router.HostTimed), is the attempt's limit counted from
	// when a host thread pulls the call (Deadline is then ignored); 0 = none. TimeoutErr is the
	// error the attempt ends with when it passes (the step's own, naming the attempt).
	Timeout    time.Duration
	TimeoutErr error
	// Started, for a host tool call, is called when a host thread takes the call (the attempt
	// starts), under the Host's lock: it must be quick and take no lock. nil = none.
	Started func()
	// Reporter receives what the running call reports about itself (progress, log lines);
	// nil when nobody listens (the reports are then dropped).
	Reporter Reporter
	// Traceparent is the W3C traceparent of the call's span (engine/internal/tracing), handed
	// to the tool (PendingCall.Traceparent); "" when tracing is off.
	Traceparent string
}

// Report is what a running call tells about itself (current_call().progress and .log,
// docs/reference/python/README.md): its latest progress, log lines, or both (flowtype.ToolReport).
type Report = flowtype.ToolReport

// Reporter takes the reports of one running call. Report is safe for concurrent use, never
// blocks on I/O (it coalesces and writes later) and ignores reports after the call ended.
type Reporter interface {
	Report(Report)
}

// Result is what a tool returned: an output, or a structured error (flowtype.ToolResult).
type Result = flowtype.ToolResult

// ToolError is the structured failure of a tool call (flowtype.ToolError).
type ToolError = flowtype.ToolError

// KindInternal is the error kind of a tool call that failed because Go code panicked.
const KindInternal = "internal"

// Failure returns a Result carrying a ToolError.
func Failure(kind, message string) Result {
	return Result{Error: &ToolError{Kind: kind, Message: message}}
}

// Caller makes tool calls. The error return is for failures outside the tool (the call could
// not be made, the context ended); a tool's own failure is a Result with Error set.
type Caller interface {
	Call(ctx context.Context, call Call) (Result, error)
}

// CallerFunc adapts a function to Caller.
type CallerFunc func(ctx context.Context, call Call) (Result, error)

// Call calls f.
func (f CallerFunc) Call(ctx context.Context, call Call) (Result, error) { return f(ctx, call) }

// RemoteCaller calls tools on remote MCP servers (tool_remote steps; flowtype.RemoteCaller).
// Implementations should honour ctx, but the router does not rely on it: a call whose context
// ends is abandoned.
type RemoteCaller = flowtype.RemoteCaller

// Errors of the router and the host.
var (
	// ErrUnknownTool: no tool of that name is registered.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrNoRemote: a tool_remote call names a remote the router has no caller for.
	ErrNoRemote = errors.New("no remote caller")
	// ErrClosed: the host was closed; no call can be made or pulled.
	ErrClosed = errors.New("tool host closed")
)

type reporterKey struct{}

// WithReporter returns ctx carrying rep: how a RemoteCaller learns the reporter of the call it
// makes (see ReporterFrom).
func WithReporter(ctx context.Context, rep Reporter) context.Context {
	return context.WithValue(ctx, reporterKey{}, rep)
}

// ReporterFrom returns the reporter ctx carries (WithReporter), or nil.
func ReporterFrom(ctx context.Context) Reporter {
	rep, _ := ctx.Value(reporterKey{}).(Reporter)
	return rep
}
