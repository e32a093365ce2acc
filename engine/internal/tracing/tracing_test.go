package tracing

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/dcc-flow/dcc-flow/internal/leakcheck"
)

// Every goroutine the tests start (the queues' export goroutines) must be gone when they end.
func TestMain(m *testing.M) { os.Exit(leakcheck.Main(m)) }

// Tracing off is a nil *Tracer: the executor's calls on it allocate nothing.
func TestOffAllocatesNothing(t *testing.T) {
	tr, err := New(Config{})
	if err != nil || tr != nil {
		t.Fatalf("New of a disabled config: %v, %v", tr, err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		r := tr.StartRun(RunInfo{ID: "r1", Workflow: "w"})
		a := r.StartAttempt("per_file[3].export", "export", "maya__export", 2)
		c := a.StartCall("maya__export", "")
		if c.Traceparent() != "" {
			t.Fatal("a traceparent with tracing off")
		}
		c.End("", "", "")
		a.End("completed", "", "", "")
		r.End("completed", "", "")
	})
	if allocs != 0 {
		t.Errorf("tracing off allocates %v times per step", allocs)
	}
	if s := tr.Stats(); s != (Stats{}) || tr.Flush(context.Background()) != nil || tr.Shutdown(context.Background()) != nil {
		t.Error("a nil tracer's Stats, Flush or Shutdown did something")
	}
}

// The ids derive from the run: the same in every engine, distinct across runs, steps and
// attempts; a traceparent reads back.
func TestIDsAreDerived(t *testing.T) {
	first, again := TraceID("r1"), TraceID("r1")
	att, attAgain := AttemptSpanID("r1", "a", 1), AttemptSpanID("r1", "a", 1)
	if first != again || first == TraceID("r2") || att != attAgain {
		t.Error("TraceID is not a function of the run id")
	}
	seen := map[string]bool{}
	for _, id := range []string{RunSpanID("r1").String(), RunSpanID("r2").String(), AttemptSpanID("r1", "a", 1).String(),
		AttemptSpanID("r1", "a", 2).String(), AttemptSpanID("r1", "b", 1).String(), AttemptSpanID("r2", "a", 1).String()} {
		if seen[id] {
			t.Errorf("span id %s twice", id)
		}
		seen[id] = true
	}
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	sc, ok := ParseTraceparent(tp)
	if !ok || Traceparent(sc) != tp {
		t.Errorf("ParseTraceparent(%q) = %v %v", tp, sc, ok)
	}
	for _, bad := range []string{"", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz"} {
		if _, ok := ParseTraceparent(bad); ok {
			t.Errorf("ParseTraceparent(%q) accepted", bad)
		}
	}
}

// A run's spans: the first execution's span has the derived ids and no parent, a child run's
// is under its parent run's span, a resumed execution's under the first one's; an attempt's
// span has its derived id, its call a child of it.
func TestSpanTree(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tr := newWithExporter(Config{Enabled: true, ServiceName: "svc"}, mem)
	r := tr.StartRun(RunInfo{ID: "r1", Workflow: "w"})
	a := r.StartAttempt("s", "s", "tool", 1)
	c := a.StartCall("tool", "maya")
	c.End("maya/123", "", "")
	a.End("completed", "maya/123", "", "")
	r.End("completed", "", "")
	kid := tr.StartRun(RunInfo{ID: "r2", Workflow: "child", Root: "r1", Parent: "r1"})
	kid.End("failed", "fatal", "boom")
	again := tr.StartRun(RunInfo{ID: "r1", Workflow: "w", Resumed: true})
	again.End("completed", "", "")
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }() // after the checks: it clears mem
	spans := map[string]tracetest.SpanStub{}
	for _, s := range mem.GetSpans() {
		if s.Name == "run w" && s.Parent.IsValid() {
			continue // the resumed execution's, below
		}
		spans[s.Name] = s
	}
	if len(spans) != 4 || len(mem.GetSpans()) != 5 {
		t.Fatalf("spans %v", mem.GetSpans())
	}
	run, att, call := spans["run w"], spans["s"], spans["execute_tool tool"]
	if run.SpanContext.TraceID() != TraceID("r1") || run.SpanContext.SpanID() != RunSpanID("r1") || run.Parent.IsValid() {
		t.Errorf("run span %v", run.SpanContext)
	}
	if att.SpanContext.SpanID() != AttemptSpanID("r1", "s", 1) || att.Parent.SpanID() != RunSpanID("r1") {
		t.Errorf("attempt span %v parent %v", att.SpanContext, att.Parent)
	}
	if call.Parent.SpanID() != att.SpanContext.SpanID() || call.SpanContext.SpanID() == att.SpanContext.SpanID() {
		t.Errorf("call span %v parent %v", call.SpanContext, call.Parent)
	}
	if c.Traceparent() != Traceparent(call.SpanContext) {
		t.Errorf("traceparent %q", c.Traceparent())
	}
	// The attempt's and the call's spans (made when they end) are the run span's kind of span:
	// the same resource and scope, their kinds, attributes in order, times.
	for _, s := range []tracetest.SpanStub{att, call} {
		if s.Resource != run.Resource || s.InstrumentationScope != run.InstrumentationScope || s.Resource == nil ||
			!s.Resource.Equal(run.Resource) || s.InstrumentationScope.Name != "github.com/dcc-flow/dcc-flow/engine" {
			t.Errorf("span %q: resource %v scope %v; want the run span's %v %v", s.Name, s.Resource, s.InstrumentationScope,
				run.Resource, run.InstrumentationScope)
		}
		if s.StartTime.IsZero() || s.EndTime.Before(s.StartTime) || s.Status.Code != codes.Unset {
			t.Errorf("span %q: times %v-%v status %v", s.Name, s.StartTime, s.EndTime, s.Status)
		}
	}
	if att.SpanKind != trace.SpanKindInternal || call.SpanKind != trace.SpanKindClient || call.StartTime.Before(att.StartTime) {
		t.Errorf("kinds %v %v, starts %v %v", att.SpanKind, call.SpanKind, att.StartTime, call.StartTime)
	}
	if got := attrText(att.Attributes); got != "cicd.pipeline.task.name=s dcc_flow.step.key=s dcc_flow.attempt=1 gen_ai.tool.name=tool "+
		"cicd.pipeline.task.run.result=success cicd.worker.id=maya/123" {
		t.Errorf("attempt attributes %s", got)
	}
	if got := attrText(call.Attributes); got != "gen_ai.operation.name=execute_tool gen_ai.tool.name=tool dcc_flow.remote=maya cicd.worker.id=maya/123" {
		t.Errorf("call attributes %s", got)
	}
	child := spans["run child"]
	if child.SpanContext.TraceID() != TraceID("r1") || child.Parent.SpanID() != RunSpanID("r1") || child.SpanContext.SpanID() != RunSpanID("r2") {
		t.Errorf("child run span %v parent %v", child.SpanContext, child.Parent)
	}
	var resumed tracetest.SpanStub
	for _, s := range mem.GetSpans() {
		if s.Name == "run w" && s.Parent.IsValid() {
			resumed = s
		}
	}
	if resumed.SpanContext.TraceID() != TraceID("r1") || resumed.Parent.SpanID() != RunSpanID("r1") || resumed.SpanContext.SpanID() == RunSpanID("r1") {
		t.Errorf("resumed run span %v parent %v", resumed.SpanContext, resumed.Parent)
	}
	if got := tr.Stats(); got.Exported != 5 {
		t.Errorf("stats %+v", got)
	}
}

func attrText(kvs []attribute.KeyValue) string {
	var parts []string
	for _, kv := range kvs {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, " ")
}

// A failed attempt and call: error.type and an error status with the message.
func TestFailedAttemptSpans(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	tr := newWithExporter(Config{Enabled: true}, mem)
	r := tr.StartRun(RunInfo{ID: "r1", Workflow: "w"})
	a := r.StartAttempt("s", "s", "tool", 2)
	a.StartCall("tool", "").End("", "transient", "licence busy")
	a.End("failed", "", "transient", "licence busy")
	r.End("failed", "transient", "licence busy")
	if err := tr.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	got := map[string]string{}
	for _, s := range mem.GetSpans() {
		got[s.Name] = attrText(s.Attributes) + " | " + s.Status.Code.String() + " " + s.Status.Description
	}
	want := map[string]string{
		"s": "cicd.pipeline.task.name=s dcc_flow.step.key=s dcc_flow.attempt=2 gen_ai.tool.name=tool " +
			"cicd.pipeline.task.run.result=failure error.type=transient | Error licence busy",
		"execute_tool tool": "gen_ai.operation.name=execute_tool gen_ai.tool.name=tool error.type=transient | Error licence busy",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("span %q: %s\nwant %s", name, got[name], w)
		}
	}
}

// blockingExporter blocks every export until released.
type blockingExporter struct {
	release chan struct{}
	once    sync.Once
}

func (b *blockingExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *blockingExporter) Shutdown(context.Context) error {
	b.once.Do(func() { close(b.release) })
	return nil
}

// Behind an exporter that never returns, ending spans never waits: past the queue they are
// dropped and counted, and Shutdown within its context counts the rest failed.
func TestFullQueueDrops(t *testing.T) {
	exp := &blockingExporter{release: make(chan struct{})}
	tr := newWithExporter(Config{Enabled: true, QueueSize: 4}, exp)
	for i := 0; i < 100; i++ {
		r := tr.StartRun(RunInfo{ID: "r"})
		r.End("completed", "", "")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no time left: the stuck export is cancelled
	_ = tr.Shutdown(ctx)
	s := tr.Stats()
	if s.Dropped == 0 || s.Exported != 0 || s.Dropped+s.Failed != 100 {
		t.Errorf("stats %+v: want drops and all 100 spans dropped or failed", s)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, c := range []Config{{Endpoint: "ftp://x"}, {Endpoint: "http://"}, {QueueSize: MaxQueueSize + 1}, {ServiceName: "a\x00"}} {
		if c.Check() == nil {
			t.Errorf("%+v passed", c)
		}
	}
	if err := (Config{Endpoint: "https://collector:4318/v1/traces", QueueSize: 1}).Check(); err != nil {
		t.Error(err)
	}
}
