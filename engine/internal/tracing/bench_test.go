package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkStepSpans is what tracing adds to one tool step: an attempt span and its call's span,
// started and ended, with the traceparent made, queued to an exporter that discards them.
func BenchmarkStepSpans(b *testing.B) {
	tr := newWithExporter(Config{Enabled: true, QueueSize: 1 << 20}, discard{})
	defer func() { _ = tr.Shutdown(context.Background()) }()
	r := tr.StartRun(RunInfo{ID: "r01a2067bb085b479b6224b5d06f4", Workflow: "bench"})
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		a := r.StartAttempt("per_file[3].export", "export", "maya__export_fbx", i+1)
		c := a.StartCall("maya__export_fbx", "")
		_ = c.Traceparent()
		c.End("", "", "")
		a.End("completed", "", "", "")
	}
}

// BenchmarkExportPerSpan is the export goroutine's work for one span: its OTLP protobuf
// encoding and the POST (to a loopback server that discards it), in batches of maxBatch.
func BenchmarkExportPerSpan(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	defer srv.Close()
	mem := tracetest.NewInMemoryExporter()
	tr := newWithExporter(Config{Enabled: true}, mem)
	r := tr.StartRun(RunInfo{ID: "r01a2067bb085b479b6224b5d06f4", Workflow: "bench"})
	for i := range maxBatch / 2 {
		a := r.StartAttempt("per_file[3].export", "export", "maya__export_fbx", i+1)
		a.StartCall("maya__export_fbx", "").End("", "", "")
		a.End("completed", "", "", "")
	}
	_ = tr.Flush(context.Background())
	spans := mem.GetSpans().Snapshots()
	_ = tr.Shutdown(context.Background())
	s, _ := settings(Config{Endpoint: srv.URL}, func(string) string { return "" })
	exp := newExporter(s)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := exp.ExportSpans(context.Background(), spans); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans))/1000, "µs/span")
}
