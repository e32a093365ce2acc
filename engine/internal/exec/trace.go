package exec

import (
	"context"
	"errors"

	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing"
	"github.com/dcc-flow/dcc-flow/engine/internal/tracing/tracectx"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The spans of a run (engine/internal/tracing; docs/guide/tracing.md): one for each
// execution of the run (Start to finish), one for each attempt of a tool or tool_remote step
// (from just before its call to endAttempt), one for its tool call. With tracing off
// (Config.Tracer nil) every function here returns at its first test, allocating nothing.

// startTrace starts the span of this execution of the run.
func (r *runner) startTrace(p Params) {
	t := r.x.cfg.Tracer
	if t == nil {
		return
	}
	info := tracing.RunInfo{ID: r.id, Workflow: r.name, Resumed: p.Resume, Origin: p.Origin}
	if len(r.ancestors) > 0 {
		info.Root, info.Parent = r.ancestors[0], r.ancestors[len(r.ancestors)-1]
	}
	r.trace = t.StartRun(info)
}

// endTrace ends the execution's span with the run's final status (interrupted for a run
// stopped or abandoned by its engine).
func (r *runner) endTrace(status run.Status, o outcome) {
	if r.trace == nil {
		return
	}
	kind, msg := "", ""
	if o.err != nil {
		kind, msg = o.err.Kind, o.err.Message
	}
	if sc := r.stopCause.Load(); sc != nil && status != run.StatusFailed {
		kind, msg = sc.kind, sc.msg
	}
	r.trace.End(string(status), kind, msg)
}

// startSpans starts the spans of attempt n (counted across executions) of the instance and of
// its call, and sets the call's Traceparent to the call span's. It returns the call span.
func (in *inst) startSpans(call *tools.Call, n int) *tracing.Call {
	if in.r.trace == nil {
		return nil
	}
	in.span = in.r.trace.StartAttempt(in.row.Key, in.sp.st.ID, attemptTool(in.sp), n)
	cs := in.span.StartCall(call.Tool, call.DCC)
	call.Traceparent = cs.Traceparent()
	return cs
}

// endSpan ends the span of the attempt in progress (endAttempt).
func (in *inst) endSpan(status run.StepStatus, worker, kind, msg string) {
	if in.span == nil {
		return
	}
	in.span.End(string(status), worker, kind, msg)
	in.span = nil
}

// endCall ends the span of a call that returned res and err.
func endCall(cs *tracing.Call, res tools.Result, err error) {
	if cs == nil {
		return
	}
	switch {
	case err != nil:
		kind := run.KindError
		var at *attemptTimeout
		if errors.As(err, &at) {
			kind = run.KindTimeout
		}
		cs.End(res.Worker, kind, err.Error())
	case res.Error != nil:
		kind := res.Error.Kind
		if kind == "" {
			kind = run.KindError
		}
		cs.End(res.Worker, kind, res.Error.Message)
	default:
		cs.End(res.Worker, "", "")
	}
}

// withTraceparent returns ctx carrying the call's traceparent for the remotes (tracectx); ctx
// itself when there is none.
func withTraceparent(ctx context.Context, traceparent string) context.Context {
	return tracectx.With(ctx, traceparent)
}
