package engine

import (
	"context"

	"github.com/dcc-flow/dcc-flow/engine/internal/tracing"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// TracingConfig turns on OpenTelemetry traces (docs/guide/tracing.md): each run is a
// trace with a span for the run, one for each attempt of a tool or tool_remote step and one for
// each tool call, whose W3C traceparent the tool gets (current_call().traceparent). The spans
// are exported over OTLP HTTP/protobuf; the standard OTEL_EXPORTER_OTLP_* variables (headers,
// timeout, TLS, compression) and OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES apply. Export
// never slows a run: spans wait in a queue of QueueSize that one goroutine exports, and a full
// queue drops spans, counted in dccflow_trace_spans_total.
type TracingConfig struct {
	// Enabled turns tracing on; false (the default) traces nothing and costs nothing.
	Enabled bool `json:"enabled,omitempty"`
	// Endpoint is the collector's OTLP/HTTP URL: a base URL such as "http://collector:4318"
	// (/v1/traces is added) or a full URL with a path, used as it is. "" = the
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT variable, else
	// http://localhost:4318.
	Endpoint string `json:"endpoint,omitempty"`
	// ServiceName is the service.name of the spans; "" = OTEL_SERVICE_NAME, else "dcc-flow".
	ServiceName string `json:"service_name,omitempty"`
	// QueueSize is how many ended spans may wait for export: 0 = 2,048; otherwise 1 to
	// 100,000 (a span waiting holds about 2 KB). Past it a span is dropped and counted.
	QueueSize int `json:"queue_size,omitempty"`
}

// check adds the problems of the tracing section to ps, each naming its field
// ("tracing.endpoint: …").
func (t *TracingConfig) check(ps *configProblems) {
	if t == nil {
		return
	}
	if err := t.config(nil).Check(); err != nil {
		*ps = append(*ps, "tracing."+err.Error())
	}
}

func (t *TracingConfig) config(environ func() []string) tracing.Config {
	c := tracing.Config{Enabled: t.Enabled, Endpoint: t.Endpoint, ServiceName: t.ServiceName, QueueSize: t.QueueSize,
		ServiceVersion: Version}
	if environ != nil {
		c.Getenv = func(k string) string { return getenvIn(environ(), k) }
	}
	return c
}

// getenvIn returns the value of k in env ("KEY=value" strings), "" when unset.
func getenvIn(env []string, k string) string {
	for i := len(env) - 1; i >= 0; i-- {
		kv := env[i]
		if len(kv) > len(k) && kv[len(k)] == '=' && kv[:len(k)] == k {
			return kv[len(k)+1:]
		}
	}
	return ""
}

// openTracing starts the tracer of the tracing section cfg (checked by Config.validate); nil
// when it is absent or not enabled.
func openTracing(cfg *TracingConfig, environ func() []string) (*tracing.Tracer, error) {
	if cfg == nil || !cfg.Enabled {
		return nil, nil
	}
	t, err := tracing.New(cfg.config(environ))
	if err != nil {
		return nil, run.Errorf(run.CodeInvalidRequest, "invalid engine config: tracing: %v", err)
	}
	return t, nil
}

// TracingStats counts the spans the engine's tracer ended: exported to the collector, dropped
// (the queue was full) and failed (the collector did not take them, or the engine closed
// first). Zero with tracing off.
type TracingStats struct {
	Exported, Dropped, Failed int64
}

// TracingStats returns the engine's span counts (dccflow_trace_spans_total).
func (e *Engine) TracingStats() TracingStats {
	s := e.tracer.Stats()
	return TracingStats{Exported: s.Exported, Dropped: s.Dropped, Failed: s.Failed}
}

// closeTracing exports the spans still queued (within 5 s, or what is left of ctx) and stops
// the tracer.
func (e *Engine) closeTracing(ctx context.Context) {
	_ = e.tracer.Shutdown(ctx)
}

// FlushTraces exports the spans of the runs ended so far, waiting until the collector took them
// or ctx ends; nothing with tracing off. Close does it too: this is for a caller that measures,
// or that wants the spans sent before a long pause.
func (e *Engine) FlushTraces(ctx context.Context) error {
	return e.tracer.Flush(ctx)
}
