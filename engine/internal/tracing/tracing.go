// Package tracing makes a run an OpenTelemetry trace (docs/guide/tracing.md): a span for
// each execution of the run, one for each attempt of a tool or tool_remote step, and one for
// each tool call. The spans are the official Go SDK's (go.opentelemetry.io/otel/sdk: tracer
// provider, sampler, resource, span processor interface, read-only spans) and exported over
// OTLP HTTP/protobuf by an exporter of our own (otlphttp.go, otlpproto.go): the SDK's
// otlptracehttp linked gRPC into the library (+2.5 MB) and spent ~10 times the CPU per span.
// A run's span is a live SDK span; the two spans of each tool step (its attempt and its call)
// are the SDK's read-only spans made when they end (Attempt), which halves the cost of a step.
//
// Off, it costs nothing: New returns a nil *Tracer, and every method of a nil *Tracer, *Run,
// *Attempt and *Call does nothing and allocates nothing, so the executor calls them
// unconditionally.
//
// A run's trace id and the span ids of its first execution and of each of its attempts are
// derived from the run id (ids.go), so nothing is stored: a resumed run, or a run another
// engine took over, continues the same trace, and every engine computes the same ids.
//
// A collector that is down or slow never slows or fails a run: ended spans go to a bounded
// queue (queue.go) that one goroutine exports; a span that finds the queue full is dropped
// and counted (Stats), as is a batch the collector did not take.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is the service.name of the engine's spans when neither the config nor
// OTEL_SERVICE_NAME names one.
const DefaultServiceName = "dcc-flow"

// scopeName is the instrumentation scope of the engine's spans.
const scopeName = "github.com/dcc-flow/dcc-flow/engine"

// DefaultQueueSize is the most ended spans waiting for export when Config.QueueSize is 0.
const DefaultQueueSize = 2048

// MaxQueueSize is the largest Config.QueueSize: a full queue of ended spans (about 2 KB each, the
// SDK's snapshots) then holds some 200 MB.
const MaxQueueSize = 100_000

// DefaultExportTimeout bounds one export (one POST) when OTEL_EXPORTER_OTLP_TIMEOUT and
// OTEL_EXPORTER_OTLP_TRACES_TIMEOUT are unset; it is also the most Shutdown waits for the
// queued spans.
const DefaultExportTimeout = 5 * time.Second

// Config turns tracing on and says where the spans go.
type Config struct {
	// Enabled turns tracing on; false (the default): New returns nil and nothing is traced.
	Enabled bool
	// Endpoint is the collector's OTLP/HTTP URL: a base URL such as "http://collector:4318"
	// (the path /v1/traces is added, as to OTEL_EXPORTER_OTLP_ENDPOINT), or a URL with a path,
	// used as it is (as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). "" = the OTEL_EXPORTER_OTLP_*
	// variables, else http://localhost:4318/v1/traces. Headers, timeout, compression and TLS
	// come from the standard OTEL_EXPORTER_OTLP_* variables.
	Endpoint string
	// ServiceName is the resource's service.name; "" = OTEL_SERVICE_NAME, else "dcc-flow".
	// OTEL_RESOURCE_ATTRIBUTES adds resource attributes.
	ServiceName string
	// ServiceVersion is the resource's service.version ("" = none).
	ServiceVersion string
	// QueueSize is the most ended spans waiting for export: 0 = DefaultQueueSize, else 1 to
	// MaxQueueSize. Past it spans are dropped (Stats.Dropped).
	QueueSize int
	// Getenv reads the environment (OTEL_SERVICE_NAME, OTEL_SDK_DISABLED, the
	// OTEL_EXPORTER_OTLP_* variables); nil = os.Getenv. OTEL_RESOURCE_ATTRIBUTES is read from
	// the process environment by the SDK.
	Getenv func(string) string
	// BatchDelay is the longest an ended span waits for its batch to fill before export; 0 =
	// one second.
	BatchDelay time.Duration
}

// Check returns the problem of c's fields, naming the field ("endpoint: …"); nil when fine.
func (c Config) Check() error {
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("endpoint: must be an http:// or https:// URL such as \"http://127.0.0.1:4318\"; got %q", c.Endpoint)
		}
	}
	if c.QueueSize < 0 || c.QueueSize > MaxQueueSize {
		return fmt.Errorf("queue_size: must be 0 (the default, %d) or 1 to %d; got %d", DefaultQueueSize, MaxQueueSize, c.QueueSize)
	}
	if strings.ContainsAny(c.ServiceName, "\x00\r\n") {
		return errors.New("service_name: must not contain a line break or NUL byte")
	}
	return nil
}

// Tracer makes the spans of an engine's runs. A nil *Tracer is tracing off.
type Tracer struct {
	tp    *sdktrace.TracerProvider
	tr    trace.Tracer
	q     *queue
	scope instrumentation.Scope // the scope of tr
}

// Stats counts the spans a Tracer ended: exported (the collector took them), dropped (the
// queue was full) and failed (their export failed, or the tracer shut down before it).
type Stats struct {
	Exported, Dropped, Failed int64
}

// New starts a Tracer for cfg, or returns nil, nil when cfg.Enabled is false or
// OTEL_SDK_DISABLED is true. The exporter connects lazily: a collector that is down fails no
// New; a bad OTEL_EXPORTER_OTLP_* variable does, naming it.
func New(cfg Config) (*Tracer, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = osGetenv
	}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil
	}
	s, err := settings(cfg, getenv)
	if err != nil {
		return nil, err
	}
	return newWithExporter(cfg, newExporter(s)), nil
}

// newWithExporter is New with the exporter given (tests export to memory).
func newWithExporter(cfg Config, exp sdktrace.SpanExporter) *Tracer {
	getenv := cfg.Getenv
	if getenv == nil {
		getenv = osGetenv
	}
	name := cfg.ServiceName
	if name == "" {
		name = getenv("OTEL_SERVICE_NAME")
	}
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.ServiceVersion))
	}
	// OTEL_RESOURCE_ATTRIBUTES first, so that service.name above wins over a service.name in it
	// (as OTEL_SERVICE_NAME does in the SDK). A malformed variable only loses its attributes.
	res, _ := resource.New(context.Background(), resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithHost(), resource.WithProcessPID(), resource.WithAttributes(attrs...))
	size := cfg.QueueSize
	if size == 0 {
		size = DefaultQueueSize
	}
	delay := cfg.BatchDelay
	if delay <= 0 {
		delay = time.Second
	}
	q := newQueue(exp, size, delay)
	tp := sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithSpanProcessor(q),
		sdktrace.WithIDGenerator(idGenerator{}), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	return &Tracer{tp: tp, tr: tp.Tracer(scopeName), q: q, scope: instrumentation.Scope{Name: scopeName}}
}

// Stats returns the span counts so far; zero for a nil Tracer.
func (t *Tracer) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	return Stats{Exported: t.q.exported.Load(), Dropped: t.q.dropped.Load(), Failed: t.q.failed.Load()}
}

// Flush exports the spans ended so far, waiting until they are sent or ctx ends.
func (t *Tracer) Flush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown exports the spans still queued, within DefaultExportTimeout or until ctx ends
// (the rest are counted failed), and stops the tracer. Spans ended later are not exported.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultExportTimeout)
	defer cancel()
	err := t.tp.Shutdown(ctx)
	// The provider skips its processors when ctx has ended: the queue's goroutine must end all
	// the same (a second Shutdown of the queue does nothing).
	if qerr := t.q.Shutdown(ctx); err == nil {
		err = qerr
	}
	return err
}

// RunInfo describes the execution of a run that a Run span covers.
type RunInfo struct {
	ID, Workflow string
	// Root is the outermost run of the run's tree of sub-workflows (its trace); "" = ID.
	Root string
	// Parent is the run this one is a child of ("" for a run started on its own): the run's
	// first span is a child of the parent's.
	Parent string
	// Resumed: this execution resumes (or takes over) a run that an earlier one started; its
	// span is a child of the first execution's.
	Resumed bool
	Origin  string
}

// Run is the span of one execution of a run. A nil *Run traces nothing.
type Run struct {
	t    *Tracer
	id   string
	ctx  context.Context // holds span
	span trace.Span
	res  *resource.Resource // the tracer provider's, as span has it: its attempts' and calls' spans carry it
}

// StartRun starts the span of an execution of a run. nil when t is nil.
func (t *Tracer) StartRun(info RunInfo) *Run {
	if t == nil {
		return nil
	}
	root := info.Root
	if root == "" {
		root = info.ID
	}
	tid := TraceID(root)
	ctx := context.Background()
	switch {
	case info.Resumed:
		// A child of the first execution's span: same trace, a new (random) span id.
		ctx = trace.ContextWithRemoteSpanContext(ctx, remoteParent(tid, RunSpanID(info.ID)))
	default:
		if info.Parent != "" {
			ctx = trace.ContextWithRemoteSpanContext(ctx, remoteParent(tid, RunSpanID(info.Parent)))
		}
		ctx = withIDs(ctx, tid, RunSpanID(info.ID))
	}
	attrs := []attribute.KeyValue{
		semconv.CICDPipelineName(info.Workflow), semconv.CICDPipelineRunID(info.ID),
		attribute.String("dcc_flow.run.origin", info.Origin), attribute.Bool("dcc_flow.run.resumed", info.Resumed),
	}
	if info.Parent != "" {
		attrs = append(attrs, attribute.String("dcc_flow.run.parent_id", info.Parent))
	}
	name := "run " + info.Workflow
	if info.Workflow == "" {
		name = "run"
	}
	_, span := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	r := &Run{t: t, id: info.ID, ctx: trace.ContextWithSpan(context.Background(), span), span: span}
	if ro, ok := span.(sdktrace.ReadOnlySpan); ok {
		r.res = ro.Resource()
	}
	return r
}

// End ends the run's span with the run's status ("completed", "failed", "cancelled",
// "interrupted") and, unless completed, its error kind and message.
func (r *Run) End(status, errKind, errMsg string) {
	if r == nil {
		return
	}
	r.span.SetAttributes(semconv.CICDPipelineResultKey.String(pipelineResult(status, errKind)),
		attribute.String("dcc_flow.run.status", status))
	setError(r.span, status, errKind, errMsg)
	r.span.End()
}

// Cache records a content-cache lookup of step instance stepKey (docs/guide/assets.md) as an
// event of the run's span: "cache hit" with the attempt it was served from (fromRun, fromStep,
// fromAttempt; the step makes no attempt, so no span of its own), or "cache miss" with why
// (reason) when fromRun is "". A span keeps its first 128 events (the SDK's limit; the others
// are counted as dropped). Nothing when r is nil.
func (r *Run) Cache(stepKey, fromRun, fromStep string, fromAttempt int, reason string) {
	if r == nil {
		return
	}
	if fromRun == "" {
		r.span.AddEvent("cache miss", trace.WithAttributes(attribute.String("dcc_flow.step.key", stepKey),
			attribute.String("dcc_flow.cache.reason", reason)))
		return
	}
	r.span.AddEvent("cache hit", trace.WithAttributes(attribute.String("dcc_flow.step.key", stepKey),
		attribute.String("dcc_flow.cache.run_id", fromRun), attribute.String("dcc_flow.cache.step_key", fromStep),
		attribute.Int("dcc_flow.cache.attempt", fromAttempt)))
}

// Attempt is the span of one attempt of a tool or tool_remote step. A nil *Attempt traces
// nothing.
//
// The spans of attempts and calls, two per tool step, are the SDK's read-only spans made when
// they end (tracetest.SpanStub.Snapshot: its ids, parent, times, attributes, status, resource
// and scope, as the SDK's own span would have them), handed straight to the span processor;
// the SDK's live span (locks, options, attributes grown at the end and deduplicated, a context
// per span) cost about twice as much per step. Until it ends an Attempt holds its ids and start.
type Attempt struct {
	r                   *Run
	sc                  trace.SpanContext // the run's trace, AttemptSpanID
	start               time.Time
	stepKey, stepID, tt string // tt: the tool
	n                   int
	events              []sdktrace.Event // the waits for resources (Call.Waited)
}

// StartAttempt starts the span of attempt n (counted across the run's executions, as the
// attempt records are) of the step instance stepKey of step stepID, calling tool. Its span id
// is AttemptSpanID(run, stepKey, n). nil when r is nil.
func (r *Run) StartAttempt(stepKey, stepID, tool string, n int) *Attempt {
	if r == nil {
		return nil
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: r.span.SpanContext().TraceID(),
		SpanID: AttemptSpanID(r.id, stepKey, n), TraceFlags: trace.FlagsSampled})
	return &Attempt{r: r, sc: sc, start: time.Now(), stepKey: stepKey, stepID: stepID, tt: tool, n: n}
}

// End ends the attempt's span with its status ("completed", "failed", "cancelled"), the
// worker that ran it ("POOL/PID", an engine id; "" = this process) and, unless completed,
// its error kind and message.
func (a *Attempt) End(status, worker, errKind, errMsg string) {
	if a == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, semconv.CICDPipelineTaskName(a.stepID), attribute.String("dcc_flow.step.key", a.stepKey),
		attribute.Int("dcc_flow.attempt", a.n), semconv.GenAIToolName(a.tt),
		semconv.CICDPipelineTaskRunResultKey.String(pipelineResult(status, errKind)))
	var st sdktrace.Status
	if status != "completed" {
		if errKind == "" {
			errKind = status
		}
		attrs = append(attrs, semconv.ErrorTypeKey.String(errKind))
		st = sdktrace.Status{Code: codes.Error, Description: errMsg}
	}
	if worker != "" {
		attrs = append(attrs, semconv.CICDWorkerID(worker))
	}
	t := a.r.t
	t.q.OnEnd(tracetest.SpanStub{Name: a.stepID, SpanContext: a.sc, Parent: a.r.span.SpanContext(),
		SpanKind: trace.SpanKindInternal, StartTime: a.start, EndTime: time.Now(), Attributes: attrs, Status: st,
		Events: a.events, Resource: a.r.res, InstrumentationScope: t.scope}.Snapshot())
}

// Call is the span of one tool call. A nil *Call traces nothing.
type Call struct {
	a            *Attempt
	sc           trace.SpanContext // the attempt's trace, a random span id
	start        time.Time
	tool, remote string
	tp           string // the W3C traceparent of the span
}

// StartCall starts the span of the attempt's tool call: tool, through remote ("" = in this
// process or its host). nil when a is nil.
func (a *Attempt) StartCall(tool, remote string) *Call {
	if a == nil {
		return nil
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: a.sc.TraceID(), SpanID: randomSpanID(), TraceFlags: trace.FlagsSampled})
	return &Call{a: a, sc: sc, start: time.Now(), tool: tool, remote: remote, tp: Traceparent(sc)}
}

// Traceparent returns the W3C traceparent of the call's span, for the tool: "" when c is nil.
func (c *Call) Traceparent() string {
	if c == nil {
		return ""
	}
	return c.tp
}

// Waited records that the call waited for units of scarce resources (docs/guide/resources.md)
// from since until now, before it was made: an event "resources acquired" on the attempt's span
// at now, with what it asked for (dcc_flow.resources, "gpu ×2, houdini ×1") and the wait
// (dcc_flow.resources.wait_ms), and the call's span starts now. Nothing when c is nil.
func (c *Call) Waited(since time.Time, what string) {
	if c == nil {
		return
	}
	now := time.Now()
	c.a.events = append(c.a.events, sdktrace.Event{Name: "resources acquired", Time: now, Attributes: []attribute.KeyValue{
		attribute.String("dcc_flow.resources", what),
		attribute.Float64("dcc_flow.resources.wait_ms", float64(now.Sub(since).Microseconds())/1000),
	}})
	c.start = now
}

// End ends the call's span: worker is who ran it ("" = this process), errKind and errMsg the
// call's failure ("" = it returned an output).
func (c *Call) End(worker, errKind, errMsg string) {
	if c == nil {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(c.tool))
	if c.remote != "" {
		attrs = append(attrs, attribute.String("dcc_flow.remote", c.remote))
	}
	if worker != "" {
		attrs = append(attrs, semconv.CICDWorkerID(worker))
	}
	var st sdktrace.Status
	if errKind != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errKind))
		st = sdktrace.Status{Code: codes.Error, Description: errMsg}
	}
	t := c.a.r.t
	t.q.OnEnd(tracetest.SpanStub{Name: "execute_tool " + c.tool, SpanContext: c.sc, Parent: c.a.sc,
		SpanKind: trace.SpanKindClient, StartTime: c.start, EndTime: time.Now(), Attributes: attrs, Status: st,
		Resource: c.a.r.res, InstrumentationScope: t.scope}.Snapshot())
}

// setError marks span failed unless status is completed: error.type is the error kind.
func setError(span trace.Span, status, errKind, errMsg string) {
	if status == "completed" {
		return
	}
	if errKind == "" {
		errKind = status
	}
	span.SetAttributes(semconv.ErrorTypeKey.String(errKind))
	span.SetStatus(codes.Error, errMsg)
}

// pipelineResult maps a status and error kind to the values of cicd.pipeline.result and
// cicd.pipeline.task.run.result.
func pipelineResult(status, errKind string) string {
	switch {
	case status == "completed":
		return "success"
	case errKind == "timeout":
		return "timeout"
	case status == "cancelled" || status == "interrupted":
		return "cancellation"
	case status == "failed":
		return "failure"
	}
	return "error"
}
