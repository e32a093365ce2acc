package tracing

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// captureClient is an otlptrace.Client keeping what the SDK's own exporter would send.
type captureClient struct{ got []*tracepb.ResourceSpans }

func (c *captureClient) Start(context.Context) error { return nil }
func (c *captureClient) Stop(context.Context) error  { return nil }
func (c *captureClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	c.got = append(c.got, rs...)
	return nil
}

// The request the encoder writes is, decoded by the official OTLP types (as a TracesData: the
// wire format of the ExportTraceServiceRequest), the very message the SDK's own OTLP exporter
// builds from the same spans: every attribute type, events, links,
// statuses, kinds, a remote parent, trace state and dropped counts.
func TestEncodingIsTheSDKExportersMessage(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(mem), sdktrace.WithRawSpanLimits(sdktrace.SpanLimits{
		AttributeCountLimit: 12, EventCountLimit: 2, LinkCountLimit: 1, AttributePerEventCountLimit: 4, AttributePerLinkCountLimit: 4,
		AttributeValueLengthLimit: -1}))
	tr := tp.Tracer("dcc-flow-test", trace.WithInstrumentationVersion("1.2.3"), trace.WithSchemaURL("https://opentelemetry.io/schemas/1.37.0"))
	ts, _ := trace.ParseTraceState("vendor=abc")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: TraceID("r9"), SpanID: RunSpanID("r9"),
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), remote)
	_, s := tr.Start(ctx, "everything", trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(
		trace.Link{SpanContext: remote, Attributes: []attribute.KeyValue{attribute.String("why", "resume")}},
		trace.Link{SpanContext: remote}), // over the limit: dropped, counted
		trace.WithAttributes(attribute.String("s", "é\x00"), attribute.String("empty", ""), attribute.Bool("b", true),
			attribute.Int64("i", -7), attribute.Float64("f", 2.5), attribute.StringSlice("ss", []string{"a", ""}),
			attribute.BoolSlice("bs", []bool{true, false}), attribute.Int64Slice("is", []int64{1, -1}),
			attribute.Float64Slice("fs", []float64{0.5}), attribute.StringSlice("none", nil)))
	s.AddEvent("opened", trace.WithTimestamp(time.Unix(1, 2)), trace.WithAttributes(attribute.Int("frame", 37)))
	s.AddEvent("saved")
	s.AddEvent("dropped")
	s.SetAttributes(attribute.Int("a1", 1), attribute.Int("a2", 2), attribute.Int("a3", 3)) // past 12: dropped
	s.RecordError(errors.New("boom"))
	s.SetStatus(codes.Error, "export failed")
	s.End()
	_, ok := tr.Start(context.Background(), "ok", trace.WithSpanKind(trace.SpanKindServer))
	ok.SetStatus(codes.Ok, "")
	ok.End()
	for _, k := range []trace.SpanKind{trace.SpanKindProducer, trace.SpanKindConsumer, trace.SpanKindInternal, trace.SpanKindUnspecified} {
		_, sp := tr.Start(context.Background(), k.String(), trace.WithSpanKind(k))
		sp.End()
	}
	spans := mem.GetSpans().Snapshots()
	if len(spans) != 6 {
		t.Fatalf("%d spans", len(spans))
	}

	client := &captureClient{}
	if err := otlptrace.NewUnstarted(client).ExportSpans(context.Background(), spans); err != nil {
		t.Fatal(err)
	}
	want := &tracepb.TracesData{ResourceSpans: client.got}
	var e encoder
	var got tracepb.TracesData
	if err := proto.Unmarshal(e.request(spans), &got); err != nil {
		t.Fatalf("the encoding is not an ExportTraceServiceRequest: %v", err)
	}
	if diff := cmpDiff(want, &got); diff != "" {
		t.Errorf("the encoding differs from the SDK exporter's message (-sdk +ours):\n%s", diff)
	}
	// The buffers are reused: a second batch encodes alike.
	var again tracepb.TracesData
	if err := proto.Unmarshal(e.request(spans), &again); err != nil || cmpDiff(want, &again) != "" {
		t.Errorf("a second encoding differs: %v", err)
	}
	var linked *tracepb.Span
	for _, sp := range got.ResourceSpans[0].ScopeSpans[0].Spans {
		if len(sp.Links) > 0 {
			linked = sp
		}
	}
	if linked == nil || linked.Links[0].TraceState != "vendor=abc" {
		t.Errorf("the link's trace state is not written: %v", linked)
	}
}

// cmpDiff is "" when a and b are equal, else both messages as text. A link's trace_state is
// left out: the SDK's exporter does not write it (the encoder does, as OTLP defines it).
func cmpDiff(a, b *tracepb.TracesData) string {
	b = proto.Clone(b).(*tracepb.TracesData)
	for _, rs := range b.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				for _, l := range sp.Links {
					l.TraceState = ""
				}
			}
		}
	}
	if proto.Equal(a, b) {
		return ""
	}
	return "sdk:  " + a.String() + "\nours: " + b.String()
}
