package engine_test

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// otlpSink is an OTLP/HTTP trace endpoint on 127.0.0.1 that decodes each request with the
// official OTLP protobuf types and keeps its spans and the service.name of their resources. A
// request is decoded as a TracesData, the message OTLP defines with the wire format of the
// ExportTraceServiceRequest (field 1, repeated ResourceSpans): the collector package's type
// would bring gRPC into go.mod.
type otlpSink struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string
	paths   []string
}

func newOTLPSink(t *testing.T) *otlpSink {
	s := &otlpSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req tracepb.TracesData
		if r.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not OTLP protobuf", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.paths = append(s.paths, r.URL.Path)
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					s.service = append(s.service, kv.GetValue().GetStringValue())
				}
			}
			for _, ss := range rs.ScopeSpans {
				s.spans = append(s.spans, ss.Spans...)
			}
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf") // an empty ExportTraceServiceResponse
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *otlpSink) all() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracepb.Span(nil), s.spans...)
}

// spanAttr returns the value of a span's attribute as text ("" when absent).
func spanAttr(sp *tracepb.Span, key string) string {
	for _, kv := range sp.Attributes {
		if kv.Key != key {
			continue
		}
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			return strconv.FormatBool(v.BoolValue)
		}
	}
	return ""
}

func hexID(b []byte) string { return hex.EncodeToString(b) }

// pullOne pulls one host call within 10 s.
func pullOne(t *testing.T, e *engine.Engine) flowtype.PendingCall {
	t.Helper()
	calls, err := e.Host().Pull(context.Background(), flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Timeout: 10 * time.Second})
	if err != nil || len(calls) != 1 {
		t.Fatalf("pull: %v %v", calls, err)
	}
	return calls[0]
}

// A run is one trace: the run's span, under it a span per attempt of each tool step (a retried
// step has two), under each its tool call's span, whose traceparent the host tool gets; the
// spans reach an OTLP/HTTP endpoint as protobuf, with the configured service name.
func TestTracingRunIsOneTrace(t *testing.T) {
	sink := newOTLPSink(t)
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.srv.URL, ServiceName: "studio-flow"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "maya__export", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString(`
name: export_shot
steps:
  - id: export
    tool: maya__export
    args: {shot: sh010}
    retry: {max_attempts: 2, backoff: fixed, initial_delay_ms: 1, retry_on: [transient]}
  - {id: report, tool: flow__echo, args: {value: "{{export.path}}"}}
`)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	first := pullOne(t, e)
	if err := e.Host().Complete(first.ID, flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "transient", Message: "licence busy"}}); err != nil {
		t.Fatal(err)
	}
	second := pullOne(t, e)
	if err := e.Host().Complete(second.ID, flowtype.ToolResult{Output: map[string]any{"path": "/x.fbx"}}); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	if err := e.Close(ctx); err != nil { // exports the queued spans
		t.Fatal(err)
	}

	spans := sink.all()
	byID := map[string]*tracepb.Span{}
	for _, sp := range spans {
		byID[hexID(sp.SpanId)] = sp
	}
	var runSpan *tracepb.Span
	attempts := map[string][]*tracepb.Span{} // by step id
	calls := map[string]*tracepb.Span{}      // by parent (attempt) span id
	for _, sp := range spans {
		switch {
		case sp.Name == "run export_shot":
			runSpan = sp
		case sp.Kind == tracepb.Span_SPAN_KIND_CLIENT:
			calls[hexID(sp.ParentSpanId)] = sp
		default:
			attempts[sp.Name] = append(attempts[sp.Name], sp)
		}
	}
	if runSpan == nil || len(runSpan.ParentSpanId) != 0 || spanAttr(runSpan, "cicd.pipeline.run.id") != id ||
		spanAttr(runSpan, "cicd.pipeline.result") != "success" {
		t.Fatalf("no root run span with the run id and result success: %v", spans)
	}
	if len(spans) != 1+3+3 || len(attempts["export"]) != 2 || len(attempts["report"]) != 1 {
		t.Fatalf("want the run, 3 attempts (export twice, report) and 3 calls; got %d spans: %v", len(spans), spans)
	}
	for _, sp := range spans {
		if hexID(sp.TraceId) != hexID(runSpan.TraceId) {
			t.Errorf("span %q is in trace %x, not the run's %x", sp.Name, sp.TraceId, runSpan.TraceId)
		}
	}
	results := map[string]string{}
	for step, list := range attempts {
		for _, a := range list {
			if hexID(a.ParentSpanId) != hexID(runSpan.SpanId) {
				t.Errorf("attempt span %s is not a child of the run span", step)
			}
			n := spanAttr(a, "dcc_flow.attempt")
			results[step+"#"+n] = spanAttr(a, "cicd.pipeline.task.run.result")
			c := calls[hexID(a.SpanId)]
			if c == nil {
				t.Fatalf("attempt %s#%s has no call span", step, n)
			}
			if spanAttr(c, "gen_ai.operation.name") != "execute_tool" {
				t.Errorf("call span %q: gen_ai.operation.name %q", c.Name, spanAttr(c, "gen_ai.operation.name"))
			}
			if step == "export" {
				pc := first
				if n == "2" {
					pc = second
				}
				want := "00-" + hexID(c.TraceId) + "-" + hexID(c.SpanId) + "-01"
				if pc.Traceparent != want {
					t.Errorf("attempt %s: the host call's traceparent is %q, want its call span's %q", n, pc.Traceparent, want)
				}
			}
		}
	}
	if results["export#1"] != "failure" || results["export#2"] != "success" || results["report#1"] != "success" {
		t.Errorf("attempt results: %v", results)
	}
	for _, a := range attempts["export"] {
		if spanAttr(a, "dcc_flow.attempt") == "1" && spanAttr(a, "error.type") != "transient" {
			t.Errorf("the failed attempt's error.type is %q, want transient", spanAttr(a, "error.type"))
		}
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, name := range sink.service {
		if name != "studio-flow" {
			t.Errorf("service.name %q, want studio-flow", name)
		}
	}
	for _, p := range sink.paths {
		if p != "/v1/traces" {
			t.Errorf("exported to path %q, want /v1/traces", p)
		}
	}
	if st := e.TracingStats(); st.Exported != int64(len(spans)) || st.Dropped != 0 || st.Failed != 0 {
		t.Errorf("stats %+v, want %d exported", st, len(spans))
	}
}

// /metrics counts the spans by outcome (dccflow_trace_spans_total), only with tracing on.
func TestTracingSpansAreInTheMetrics(t *testing.T) {
	sink := newOTLPSink(t)
	ctx := context.Background()
	for _, on := range []bool{false, true} {
		cfg := engine.Config{}
		if on {
			cfg.Tracing = &engine.TracingConfig{Enabled: true, Endpoint: sink.srv.URL}
		}
		e, err := engine.Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		h, err := e.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		s, _ := spec.ParseString("name: m\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
		id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Wait(ctx, id, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := e.FlushTraces(ctx); err != nil {
			t.Fatal(err)
		}
		fams := scrape(t, h)
		exported := value(fams, "dccflow_trace_spans_total", map[string]string{"outcome": "exported"})
		switch {
		case !on && fams["dccflow_trace_spans_total"] != nil:
			t.Error("dccflow_trace_spans_total with tracing off")
		case on && (exported != 3 || value(fams, "dccflow_trace_spans_total", map[string]string{"outcome": "dropped"}) != 0 ||
			value(fams, "dccflow_trace_spans_total", map[string]string{"outcome": "failed"}) != 0):
			t.Errorf("with tracing on: exported %v (want 3: the run, its attempt and its call)", exported)
		}
		_ = e.Close(ctx)
	}
}

// A resumed run continues its trace: the resumed execution's span is in the same trace, a child
// of the first execution's, and the attempts it makes are under it.
func TestTracingResumeKeepsTheTrace(t *testing.T) {
	sink := newOTLPSink(t)
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "render", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString(`
name: turntable
steps:
  - {id: beauty, tool: render, args: {pass: beauty}}
`)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	c := pullOne(t, e)
	_ = e.Host().Complete(c.ID, flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "fatal", Message: "out of licences"}})
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusFailed {
		t.Fatalf("first execution: %+v %v", info, err)
	}
	if _, err := e.Resume(ctx, id, engine.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	c2 := pullOne(t, e)
	_ = e.Host().Complete(c2.ID, flowtype.ToolResult{Output: 1})
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("resumed execution: %+v %v", info, err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var runs []*tracepb.Span
	attempts := map[string]*tracepb.Span{}
	for _, sp := range sink.all() {
		switch {
		case sp.Name == "run turntable":
			runs = append(runs, sp)
		case sp.Name == "beauty":
			attempts[spanAttr(sp, "dcc_flow.attempt")] = sp
		}
	}
	if len(runs) != 2 || len(attempts) != 2 {
		t.Fatalf("want 2 run spans and attempts 1 and 2; got %d runs, attempts %v", len(runs), attempts)
	}
	firstRun, resumed := runs[0], runs[1]
	if spanAttr(firstRun, "dcc_flow.run.resumed") == "true" {
		firstRun, resumed = resumed, firstRun
	}
	if hexID(resumed.TraceId) != hexID(firstRun.TraceId) || hexID(resumed.ParentSpanId) != hexID(firstRun.SpanId) ||
		spanAttr(resumed, "dcc_flow.run.resumed") != "true" {
		t.Errorf("the resumed execution's span is not a child of the first one in its trace: first %v, resumed %v", firstRun, resumed)
	}
	if hexID(attempts["1"].ParentSpanId) != hexID(firstRun.SpanId) || hexID(attempts["2"].ParentSpanId) != hexID(resumed.SpanId) {
		t.Errorf("attempt 1 must be under the first execution, attempt 2 under the resumed one")
	}
	if spanAttr(firstRun, "cicd.pipeline.result") != "failure" || spanAttr(firstRun, "error.type") != "fatal" {
		t.Errorf("the first execution's span: result %q error.type %q", spanAttr(firstRun, "cicd.pipeline.result"), spanAttr(firstRun, "error.type"))
	}
}

// A sub-workflow's child run is in its parent's trace: its run span is a child of the parent
// run's, and its attempts are under it.
func TestTracingChildRunIsInItsParentsTrace(t *testing.T) {
	sink := newOTLPSink(t)
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	child, err := spec.ParseString("name: publish_asset\nsteps:\n  - {id: export, tool: flow__echo, args: {value: 1}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(child); err != nil {
		t.Fatal(err)
	}
	parent, err := spec.ParseString("name: nightly\nsteps:\n  - {id: hero, kind: workflow, workflow: publish_asset}\n")
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: parent})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	named := map[string]*tracepb.Span{}
	for _, sp := range sink.all() {
		named[sp.Name] = sp
	}
	top, kid, export := named["run nightly"], named["run publish_asset"], named["export"]
	if top == nil || kid == nil || export == nil {
		t.Fatalf("spans %v", sink.all())
	}
	if hexID(kid.TraceId) != hexID(top.TraceId) || hexID(kid.ParentSpanId) != hexID(top.SpanId) ||
		spanAttr(kid, "dcc_flow.run.parent_id") != id {
		t.Errorf("the child run's span is not under its parent's: parent %v, child %v", top, kid)
	}
	if hexID(export.ParentSpanId) != hexID(kid.SpanId) || hexID(export.TraceId) != hexID(top.TraceId) {
		t.Errorf("the child's attempt is not under the child run's span")
	}
}

// A collector that takes the connection and never answers slows no run: with an export timeout
// of 60 s (OTEL_EXPORTER_OTLP_TIMEOUT, through the engine's environment) and the export of a
// first run's spans stuck, 100 runs end well within it — a run that waited for that export
// would take it whole — the spans past the small queue are dropped and counted, and the engine
// closes within its context. So with a port where nothing listens.
func TestTracingDeadCollectorSlowsNoRun(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hung.Close()
	defer close(release)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + l.Addr().String()
	_ = l.Close()
	environ := func() []string { return []string{"OTEL_EXPORTER_OTLP_TIMEOUT=60000"} }

	const runs = 100
	for _, endpoint := range []string{hung.URL, refused} {
		ctx := context.Background()
		e, err := engine.Open(ctx, engine.Config{Tracing: &engine.TracingConfig{Enabled: true, Endpoint: endpoint, QueueSize: 8}},
			engine.WithEnviron(environ))
		if err != nil {
			t.Fatal(err)
		}
		s, err := spec.ParseString("name: quick\nsteps:\n  - {id: a, tool: flow__echo, args: {value: 1}}\n  - {id: b, tool: flow__echo, args: {value: 2}}\n")
		if err != nil {
			t.Fatal(err)
		}
		// The first run's spans: their export is under way (stuck, for the hung collector) when
		// the others run.
		first, err := e.Submit(ctx, engine.StartRequest{Spec: s})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Wait(ctx, first, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		fctx, fcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_ = e.FlushTraces(fctx)
		fcancel()
		start := time.Now()
		for i := 0; i < runs; i++ {
			id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
			if err != nil {
				t.Fatal(err)
			}
			if info, err := e.Wait(ctx, id, 30*time.Second); err != nil || info.Status != run.StatusCompleted {
				t.Fatalf("%s: run %d: %+v %v", endpoint, i, info, err)
			}
		}
		if took := time.Since(start); took >= 30*time.Second {
			t.Errorf("%s: %d runs took %v: runs waited for the collector", endpoint, runs, took)
		}
		// The runs have ended: Close waits for the collector only as long as its context lets it.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		closeStart := time.Now()
		_ = e.Close(cctx)
		cancel()
		if took := time.Since(closeStart); took > 20*time.Second {
			t.Errorf("%s: close took %v", endpoint, took)
		}
		st := e.TracingStats()
		if st.Exported != 0 || st.Dropped+st.Failed != (runs+1)*5 {
			t.Errorf("%s: stats %+v: want none exported and all %d spans dropped or failed", endpoint, st, (runs+1)*5)
		}
		if endpoint == hung.URL && st.Dropped == 0 {
			t.Errorf("%s: a queue of 8 behind a hung collector dropped no span: %+v", endpoint, st)
		}
	}
}

// A bad tracing section fails Open naming the field.
func TestTracingConfigProblems(t *testing.T) {
	for cfg, want := range map[*engine.TracingConfig]string{
		{Enabled: true, Endpoint: "collector:4318"}: "tracing.endpoint: must be an http:// or https:// URL",
		{QueueSize: -1}:       "tracing.queue_size: must be 0 (the default, 2048) or 1 to 100000; got -1",
		{ServiceName: "a\nb"}: "tracing.service_name: must not contain a line break",
	} {
		_, err := engine.Open(context.Background(), engine.Config{Tracing: cfg})
		if err == nil || run.CodeOf(err) != run.CodeInvalidRequest || !containsText(err.Error(), want) {
			t.Errorf("%+v: got %v, want invalid_request with %q", *cfg, err, want)
		}
	}
}

func containsText(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A wait for scarce resources is an event of the attempt's span ("resources acquired", with what
// the step asked for and how long it waited), and the call's span starts when the units are
// held: two renders on one GPU, the second waiting for the first.
func TestTracingResourceWaitIsAnEventOfTheAttempt(t *testing.T) {
	sink := newOTLPSink(t)
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.srv.URL},
		Resources: map[string]engine.ResourceConfig{"gpu": {Limit: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	// On the worker lane: the main lane runs one call at a time, so the second would not wait
	// for the GPU but for the main thread.
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "render", Lane: flowtype.LaneWorker}); err != nil {
		t.Fatal(err)
	}
	s, err := spec.ParseString(`
name: two_renders
steps:
  - {id: a, tool: render, args: {shot: sh010}, resources: {gpu: 1}}
  - {id: b, tool: render, args: {shot: sh020}, resources: {gpu: 1}, depends_on: []}
`)
	if err != nil {
		t.Fatal(err)
	}
	id, err := e.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	pull := func() flowtype.PendingCall {
		calls, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 10 * time.Second})
		if err != nil || len(calls) != 1 {
			t.Fatalf("pull: %v %v", calls, err)
		}
		return calls[0]
	}
	first := pull()
	// The other step waits for the GPU meanwhile (its progress says so): a wait of at least
	// the 20 ms the first holds it after that.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		st, err := e.Status(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		waiting := false
		for _, x := range st.Steps {
			waiting = waiting || x.Progress != nil && strings.Contains(x.Progress.Message, "waiting for gpu")
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no step waits for the GPU: %+v", st.Steps)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if err := e.Host().Complete(first.ID, flowtype.ToolResult{Output: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	second := pull()
	if err := e.Host().Complete(second.ID, flowtype.ToolResult{Output: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if info, err := e.Wait(ctx, id, 10*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	calls := map[string]*tracepb.Span{} // by parent (attempt) span id
	var attempts []*tracepb.Span
	for _, sp := range sink.all() {
		switch {
		case sp.Kind == tracepb.Span_SPAN_KIND_CLIENT:
			calls[hexID(sp.ParentSpanId)] = sp
		case sp.Name == "a" || sp.Name == "b":
			attempts = append(attempts, sp)
		}
	}
	if len(attempts) != 2 {
		t.Fatalf("attempt spans: %v", attempts)
	}
	var longest float64
	for _, at := range attempts {
		if len(at.Events) != 1 || at.Events[0].Name != "resources acquired" {
			t.Fatalf("attempt %s: events %v; want one resources acquired", at.Name, at.Events)
		}
		ev := at.Events[0]
		var what string
		var waited float64
		for _, kv := range ev.Attributes {
			switch kv.Key {
			case "dcc_flow.resources":
				what = kv.GetValue().GetStringValue()
			case "dcc_flow.resources.wait_ms":
				waited = kv.GetValue().GetDoubleValue()
			}
		}
		if what != "gpu ×1" {
			t.Errorf("attempt %s: dcc_flow.resources %q", at.Name, what)
		}
		longest = max(longest, waited)
		call := calls[hexID(at.SpanId)]
		if call == nil || call.StartTimeUnixNano != ev.TimeUnixNano || ev.TimeUnixNano < at.StartTimeUnixNano {
			t.Errorf("attempt %s (start %d, event %d): its call span %v starts when the units are held", at.Name, at.StartTimeUnixNano, ev.TimeUnixNano, call)
		}
	}
	if longest < 20 {
		t.Errorf("the second render waited %.3f ms by its event; want at least the 20 ms the first held the GPU", longest)
	}
}

// A content-cache lookup is an event of the run's span: "cache miss" with why on the first run,
// "cache hit" naming the attempt it was served from on the second (whose step makes no attempt,
// so no span of its own).
func TestTracingCacheLookupsAreEventsOfTheRun(t *testing.T) {
	sink := newOTLPSink(t)
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, err := spec.ParseString("name: cached\nsteps:\n  - {id: build, tool: flow__echo, args: {value: sh010}, cache: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		info, err := e.Run(ctx, engine.StartRequest{Spec: s})
		if err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run: %+v %v", info, err)
		}
		ids = append(ids, info.ID)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	events := map[string]*tracepb.Span_Event{} // by run id
	attempts := 0
	for _, sp := range sink.all() {
		if sp.Name == "build" {
			attempts++
		}
		if sp.Name != "run cached" {
			continue
		}
		if len(sp.Events) != 1 {
			t.Fatalf("run span %s: events %v; want one", spanAttr(sp, "cicd.pipeline.run.id"), sp.Events)
		}
		events[spanAttr(sp, "cicd.pipeline.run.id")] = sp.Events[0]
	}
	attr := func(ev *tracepb.Span_Event, key string) string {
		for _, kv := range ev.GetAttributes() {
			if kv.Key == key {
				if s := kv.GetValue().GetStringValue(); s != "" {
					return s
				}
				return strconv.FormatInt(kv.GetValue().GetIntValue(), 10)
			}
		}
		return ""
	}
	miss, hit := events[ids[0]], events[ids[1]]
	if miss == nil || miss.Name != "cache miss" || attr(miss, "dcc_flow.step.key") != "build" || attr(miss, "dcc_flow.cache.reason") != "no earlier run with this key" {
		t.Errorf("first run's event: %v", miss)
	}
	if hit == nil || hit.Name != "cache hit" || attr(hit, "dcc_flow.cache.run_id") != ids[0] || attr(hit, "dcc_flow.cache.step_key") != "build" || attr(hit, "dcc_flow.cache.attempt") != "1" {
		t.Errorf("second run's event: %v", hit)
	}
	if attempts != 1 {
		t.Errorf("%d attempt spans of build; want 1 (the hit makes none)", attempts)
	}
}
