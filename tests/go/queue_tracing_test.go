package gotest

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Traces across the tool-call queue (docs/guide/tracing.md, docs/operations/cluster.md "The
// tool-call queue"): the call an engine queues for another carries the traceparent of its
// call span, and the tool on the engine that claims it gets it.

// spanSink is an OTLP/HTTP trace endpoint on 127.0.0.1 that keeps the spans it receives,
// decoded with the official OTLP protobuf types (a TracesData has the wire format of the
// ExportTraceServiceRequest).
type spanSink struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newSpanSink(t *testing.T) *spanSink {
	s := &spanSink{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req tracepb.TracesData
		if proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not OTLP protobuf", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				s.spans = append(s.spans, ss.Spans...)
			}
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// spanAttr returns the value of a span's string or int attribute as text ("" when absent).
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
		}
	}
	return ""
}

func (s *spanSink) all() []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*tracepb.Span(nil), s.spans...)
}

// An engine that traces and does not host `export` queues its calls for a second engine that
// does (and does not trace): each call the second engine's tool gets carries the traceparent of
// its call span in the first engine's trace, a retried step's second call its own.
func TestQueueCallCarriesTheTraceparentOfItsSpan(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	sink := newSpanSink(t)
	ctx := context.Background()
	orch, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 0.6,
		Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer orch.Close(ctx)

	worker, err := engine.Open(ctx, engine.Config{DB: db, LeaseSecs: 0.6})
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close(ctx)
	if err := worker.RegisterTool(flowtype.ToolInfo{Name: "export", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string][]string{} // the traceparents the tool got, by args.shot, in call order
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			cs, err := worker.Host().Pull(pctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 8, Timeout: 50 * time.Millisecond})
			if err != nil {
				return
			}
			for _, c := range cs {
				shot, _ := c.Args["shot"].(string)
				mu.Lock()
				got[shot] = append(got[shot], c.Traceparent)
				n := len(got[shot])
				mu.Unlock()
				res := flowtype.ToolResult{Output: map[string]any{"fbx": shot + ".fbx"}}
				if shot == "sh020" && n == 1 {
					res = flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "transient", Message: "licence busy"}}
				}
				_ = worker.Host().Complete(c.ID, res)
			}
		}
	}()
	defer func() { stop(); <-done }()

	s := mustSpec(t, `
name: q_traced
steps:
  - id: per
    kind: foreach
    items: [sh010, sh020]
    steps:
      - id: export
        tool: export
        args: {shot: "{{item}}"}
        retry: {max_attempts: 2, backoff: fixed, initial_delay_ms: 1, retry_on: [transient]}
`)
	id, err := orch.Submit(ctx, engine.StartRequest{Spec: s})
	if err != nil {
		t.Fatal(err)
	}
	if info, err := orch.Wait(ctx, id, 30*time.Second); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %+v %v", info, err)
	}
	if err := orch.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}

	// The call spans of the run, by the step instance of their attempt and its number.
	spans := sink.all()
	var runSpan *tracepb.Span
	attempts := map[string]*tracepb.Span{} // by span id
	for _, sp := range spans {
		switch {
		case sp.Name == "run q_traced":
			runSpan = sp
		case sp.Kind == tracepb.Span_SPAN_KIND_INTERNAL:
			attempts[hex.EncodeToString(sp.SpanId)] = sp
		}
	}
	if runSpan == nil {
		t.Fatalf("no run span among %d spans", len(spans))
	}
	want := map[string][]string{}
	for _, sp := range spans {
		if sp.Kind != tracepb.Span_SPAN_KIND_CLIENT {
			continue
		}
		a := attempts[hex.EncodeToString(sp.ParentSpanId)]
		if a == nil {
			t.Fatalf("call span %q has no attempt span for parent", sp.Name)
		}
		if hex.EncodeToString(sp.TraceId) != hex.EncodeToString(runSpan.TraceId) {
			t.Fatalf("call span %q is not in the run's trace", sp.Name)
		}
		shot := map[string]string{"per[0].export": "sh010", "per[1].export": "sh020"}[spanAttr(a, "dcc_flow.step.key")]
		n, _ := strconv.Atoi(spanAttr(a, "dcc_flow.attempt"))
		if shot == "" || n < 1 || n > 2 {
			t.Fatalf("attempt span %q: step key %q, attempt %d", a.Name, spanAttr(a, "dcc_flow.step.key"), n)
		}
		for len(want[shot]) < n {
			want[shot] = append(want[shot], "")
		}
		want[shot][n-1] = "00-" + hex.EncodeToString(sp.TraceId) + "-" + hex.EncodeToString(sp.SpanId) + "-01"
	}
	mu.Lock()
	defer mu.Unlock()
	if len(want["sh010"]) != 1 || len(want["sh020"]) != 2 {
		t.Fatalf("call spans: %v; want one for sh010, two for sh020 (its retry)", want)
	}
	for shot, tps := range want {
		if len(got[shot]) != len(tps) {
			t.Fatalf("%s: the tool on the other engine got %d calls, want %d", shot, len(got[shot]), len(tps))
		}
		for i, tp := range tps {
			if got[shot][i] != tp {
				t.Errorf("%s call %d: the tool on the other engine got traceparent %q; want its call span's %q", shot, i+1, got[shot][i], tp)
			}
		}
	}
}
