package engine_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// scrape GETs the engine's metrics and parses them with the Prometheus text parser.
func scrape(t *testing.T, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing the scrape: %v", err)
	}
	return fams
}

// value returns the value of the series of family name with exactly these labels, -1 if absent.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(labels) {
			continue
		}
		for _, l := range m.GetLabel() {
			if labels[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return -1
}

func mustSpec(t *testing.T, text string) *spec.Spec {
	t.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The counters match the runs the test made: parsed from the text format, with the retried
// attempt, the failed run and the attempt durations.
func TestMetricsCountTheRunsMade(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	// A run before the metrics are enabled is not counted.
	ok := mustSpec(t, "name: ingest\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")
	if _, err := e.Run(ctx, engine.StartRequest{Spec: ok}); err != nil {
		t.Fatal(err)
	}
	h, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if info, err := e.Run(ctx, engine.StartRequest{Spec: ok}); err != nil || info.Status != run.StatusCompleted {
			t.Fatalf("run: %v %+v", err, info)
		}
	}
	flaky := mustSpec(t, `name: publish
steps:
  - id: per_shot
    kind: foreach
    items: [1, 2]
    steps:
      - {id: push, tool: flow__fail, args: {times: 1, kind: transient}, retry: {max_attempts: 2, initial_delay_ms: 1}}
`)
	if info, err := e.Run(ctx, engine.StartRequest{Spec: flaky}); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("flaky run: %v %+v", err, info)
	}
	broken := mustSpec(t, "name: publish\nsteps: [{id: push, tool: flow__fail, args: {times: 5, kind: fatal}}]")
	if info, err := e.Run(ctx, engine.StartRequest{Spec: broken}); err != nil || info.Status != run.StatusFailed {
		t.Fatalf("broken run: %v %+v", err, info)
	}

	fams := scrape(t, h)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"dccflow_runs_started_total", map[string]string{"workflow": "ingest"}, 3},
		{"dccflow_runs_started_total", map[string]string{"workflow": "publish"}, 2},
		{"dccflow_runs_ended_total", map[string]string{"workflow": "ingest", "status": "completed"}, 3},
		{"dccflow_runs_ended_total", map[string]string{"workflow": "publish", "status": "completed"}, 1},
		{"dccflow_runs_ended_total", map[string]string{"workflow": "publish", "status": "failed"}, 1},
		{"dccflow_step_attempts_total", map[string]string{"tool": "flow__echo", "kind": "tool", "outcome": "completed"}, 3},
		{"dccflow_step_attempts_total", map[string]string{"tool": "flow__fail", "kind": "tool", "outcome": "retried"}, 2},
		{"dccflow_step_attempts_total", map[string]string{"tool": "flow__fail", "kind": "tool", "outcome": "completed"}, 2},
		{"dccflow_step_attempts_total", map[string]string{"tool": "flow__fail", "kind": "tool", "outcome": "failed"}, 1},
		{"dccflow_step_retries_total", map[string]string{"tool": "flow__fail"}, 2},
		{"dccflow_step_attempt_duration_seconds", map[string]string{"tool": "flow__echo"}, 3},
		{"dccflow_step_attempt_duration_seconds", map[string]string{"tool": "flow__fail"}, 5},
		{"dccflow_host_queue_depth", map[string]string{"lane": "main"}, 0},
	} {
		if got := value(fams, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetValue(), "run_") || l.GetName() == "run_id" {
					t.Errorf("%s has a run label %s=%s", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
}

// Two engines in one process have their own registries: a run of one is not counted by the other.
func TestMetricsOfTwoEnginesAreSeparate(t *testing.T) {
	ctx := context.Background()
	var hs [2]http.Handler
	var es [2]*engine.Engine
	for i := range es {
		e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		if hs[i], err = e.Metrics(); err != nil {
			t.Fatal(err)
		}
		es[i] = e
	}
	if _, err := es[0].Run(ctx, engine.StartRequest{Spec: mustSpec(t, "name: one\nsteps: [{id: a, tool: flow__echo}]")}); err != nil {
		t.Fatal(err)
	}
	if got := value(scrape(t, hs[0]), "dccflow_runs_ended_total", map[string]string{"workflow": "one", "status": "completed"}); got != 1 {
		t.Errorf("engine 0 counted %v runs, want 1", got)
	}
	if got := value(scrape(t, hs[1]), "dccflow_runs_ended_total", map[string]string{"workflow": "one", "status": "completed"}); got != -1 {
		t.Errorf("engine 1 counted engine 0's run: %v", got)
	}
}

// The host-call queue depth is read at scrape time, per lane.
func TestMetricsQueueDepth(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.RegisterTool(flowtype.ToolInfo{Name: "maya__export", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	h, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 { // two runs, each with one call queued on the main lane
		id, err := e.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: q\nsteps: [{id: a, tool: maya__export}]")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for deadline := time.Now().Add(10 * time.Second); value(scrape(t, h), "dccflow_host_queue_depth", map[string]string{"lane": "main"}) != 2; {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth never reached 2: %v", value(scrape(t, h), "dccflow_host_queue_depth", map[string]string{"lane": "main"}))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := value(scrape(t, h), "dccflow_host_queue_depth", map[string]string{"lane": "worker"}); got != 0 {
		t.Errorf("worker lane depth %v, want 0", got)
	}
	for _, id := range ids {
		if err := e.Cancel(ctx, id, "done"); err != nil {
			t.Fatal(err)
		}
	}
}

// ServeMetrics refuses an address that is not loopback without a token, and with a token
// answers 401 to a scraper that does not send it.
func TestServeMetricsTokenAndLoopback(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if _, err := e.ServeMetrics("0.0.0.0:0", ""); run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "token") {
		t.Fatalf("off loopback without a token: %v", err)
	}
	ms, err := e.ServeMetrics("127.0.0.1:0", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close(ctx)
	get := func(path, auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+ms.Addr()+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code, _ := get("/metrics", "Bearer wrong"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code, body := get("/metrics", "Bearer s3cret"); code != http.StatusOK || !strings.Contains(body, "dccflow_host_queue_depth") {
		t.Errorf("with the token: %d %s", code, body)
	}
	if code, _ := get("/other", "Bearer s3cret"); code != http.StatusNotFound {
		t.Errorf("another path: %d, want 404", code)
	}
}

// Every scheduler fire is counted by schedule and kind: here a webhook delivery that starts a run.
func TestMetricsCountScheduleFires(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.Register(mustSpec(t, "name: hook\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")); err != nil {
		t.Fatal(err)
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "on_push", Workflow: "hook", Enabled: true,
		Trigger: flowtype.ScheduleTrigger{Kind: "webhook", Path: "/push"}}); err != nil {
		t.Fatal(err)
	}
	mh, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	wh, err := e.WebhookHandler()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rec := httptest.NewRecorder()
		wh.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(`{"n": 1}`)))
		if rec.Code != http.StatusAccepted {
			t.Fatalf("delivery: %d %s", rec.Code, rec.Body)
		}
	}
	for _, bad := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/push", nil),                           // 405
		httptest.NewRequest(http.MethodPost, "/nowhere", strings.NewReader(`{}`)),   // 404
		httptest.NewRequest(http.MethodPost, "/push", strings.NewReader(`{"n": 1`)), // 400
	} {
		wh.ServeHTTP(httptest.NewRecorder(), bad)
	}
	fams := scrape(t, mh)
	if got := value(fams, "dccflow_schedule_fires_total", map[string]string{"schedule": "on_push", "kind": "fired"}); got != 2 {
		t.Errorf("fires: %v, want 2", got)
	}
	// Every delivery by schedule, HTTP status and result; a webhook fire has no lateness.
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"schedule": "on_push", "code": "202", "result": "enqueued"}, 2},
		{map[string]string{"schedule": "on_push", "code": "405", "result": "method_not_allowed"}, 1},
		{map[string]string{"schedule": "", "code": "404", "result": "unknown_webhook"}, 1},
		{map[string]string{"schedule": "on_push", "code": "400", "result": "invalid_json"}, 1},
	} {
		if got := value(fams, "dccflow_webhook_deliveries_total", c.labels); got != c.want {
			t.Errorf("dccflow_webhook_deliveries_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if n := len(fams["dccflow_webhook_deliveries_total"].GetMetric()); n != 4 {
		t.Errorf("%d delivery series, want 4", n)
	}
	if f := fams["dccflow_schedule_fire_lateness_seconds"]; f != nil && len(f.GetMetric()) != 0 {
		t.Errorf("a webhook fire has a lateness: %v", f)
	}
}

// An interval fire handled 2 s after its slot (the engine's clock is a stub) is observed as 2 s
// late.
func TestMetricsScheduleFireLateness(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 2, 1, 0, 0, 0, time.UTC)
	clk := engine.NewStubClock(t0)
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1}, engine.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if err := e.Register(mustSpec(t, "name: tick\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]")); err != nil {
		t.Fatal(err)
	}
	if err := e.Schedule(flowtype.ScheduleSpec{ID: "every10", Workflow: "tick", Enabled: true,
		Trigger: flowtype.ScheduleTrigger{Kind: "interval", Every: "10s"}}); err != nil {
		t.Fatal(err)
	}
	h, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.StartScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.StopScheduler(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) { // the schedule's timer, for its slot
		if when, ok := clk.Next(); ok && when.Equal(t0.Add(10*time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the interval schedule never armed its timer for t0 + 10 s")
		}
	}
	clk.Advance(12 * time.Second) // 2 s past the slot
	var late *dto.Histogram
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if f := scrape(t, h)["dccflow_schedule_fire_lateness_seconds"]; f != nil && len(f.GetMetric()) == 1 {
			late = f.GetMetric()[0].GetHistogram()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no fire lateness after the interval's slot passed")
		}
	}
	if late.GetSampleCount() != 1 || late.GetSampleSum() != 2 {
		t.Fatalf("lateness: %d fires, %v s in all; want 1 fire 2 s late", late.GetSampleCount(), late.GetSampleSum())
	}
	if got := value(scrape(t, h), "dccflow_schedule_fire_lateness_seconds", map[string]string{"schedule": "every10"}); got != 1 {
		t.Fatalf("lateness of every10: %v fires, want 1", got)
	}
}

// The SQLite store's commits are observed from when the metrics are enabled: each with its
// duration and its batches (a run's writes). The memory store commits nothing.
func TestMetricsDatabaseCommits(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1, DB: filepath.Join(t.TempDir(), "flow.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	h, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if got := value(scrape(t, h), "dccflow_db_commit_duration_seconds", map[string]string{}); got != 0 {
		t.Fatalf("%v commits before any write since enabling", got)
	}
	ok := mustSpec(t, "name: ingest\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}, {id: b, tool: flow__echo, args: {value: 2}}]")
	if info, err := e.Run(ctx, engine.StartRequest{Spec: ok}); err != nil || info.Status != run.StatusCompleted {
		t.Fatalf("run: %v %+v", err, info)
	}
	fams := scrape(t, h)
	commits := value(fams, "dccflow_db_commit_duration_seconds", map[string]string{})
	if commits < 2 { // at least the run's creation and its end
		t.Fatalf("%v commits observed for a run of two steps", commits)
	}
	if got := value(fams, "dccflow_db_commit_batches", map[string]string{}); got != commits {
		t.Fatalf("%v batch observations for %v commits", got, commits)
	}
	d := fams["dccflow_db_commit_duration_seconds"].GetMetric()[0].GetHistogram()
	if d.GetSampleSum() <= 0 {
		t.Fatalf("commit durations sum to %v s", d.GetSampleSum())
	}
	b := fams["dccflow_db_commit_batches"].GetMetric()[0].GetHistogram()
	if b.GetSampleSum() < commits {
		t.Fatalf("%v batches in %v commits", b.GetSampleSum(), commits)
	}
	t.Logf("%v commits, %.3f ms on average, %v batches", commits, d.GetSampleSum()/commits*1000, b.GetSampleSum())

	mem, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close(ctx)
	mh, err := mem.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Run(ctx, engine.StartRequest{Spec: ok}); err != nil {
		t.Fatal(err)
	}
	if got := value(scrape(t, mh), "dccflow_db_commit_duration_seconds", map[string]string{}); got != 0 {
		t.Fatalf("the memory store observed %v commits", got)
	}
}

// The calls waiting for a worker of a pool: two runs behind a one-worker pool whose worker
// never finishes starting (a command that is no MCP server) wait both, until cancelled.
func TestMetricsPoolQueueDepth(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the stand-in worker is the POSIX sleep command")
	}
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1, Remotes: map[string]engine.RemoteConfig{
		"farm": {Command: []string{"sleep", "60"}, Workers: 1, StartTimeoutSecs: 60}}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	h, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	depth := func() float64 {
		return value(scrape(t, h), "dccflow_pool_queue_depth", map[string]string{"pool": "farm"})
	}
	if got := depth(); got != 0 {
		t.Fatalf("depth before any call: %v, want 0", got)
	}
	var ids []string
	for range 2 {
		id, err := e.Submit(ctx, engine.StartRequest{Spec: mustSpec(t, "name: q\nsteps: [{id: a, kind: tool_remote, dcc: farm, tool: export}]")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for deadline := time.Now().Add(10 * time.Second); depth() != 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pool queue depth never reached 2: %v", depth())
		}
	}
	for _, id := range ids {
		if err := e.Cancel(ctx, id, "done"); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); depth() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("pool queue depth after cancelling: %v, want 0", depth())
		}
	}
}

// An idle scrape (no event since the previous one) of an engine on SQLite whose every metric
// family has series: docs/operations/metrics.md quotes its cost.
func BenchmarkMetricsScrapeIdle(b *testing.B) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1, DB: filepath.Join(b.TempDir(), "flow.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(ctx)
	h, err := e.Metrics()
	if err != nil {
		b.Fatal(err)
	}
	for i := range 20 {
		s, err := spec.ParseString(fmt.Sprintf("name: wf%d\nsteps: [{id: a, tool: flow__echo, args: {value: 1}}]", i))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := e.Run(ctx, engine.StartRequest{Spec: s}); err != nil {
			b.Fatal(err)
		}
	}
	get := func() int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("GET /metrics: %d", rec.Code)
		}
		return rec.Body.Len()
	}
	size := get() // catches up with the 20 runs
	b.ResetTimer()
	for range b.N {
		get()
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}

// dccflow_event_subscriptions counts the subscriptions open at the scrape: up while readers
// hold them, back to 0 once they are closed (twice is harmless).
func TestMetricsEventSubscriptions(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	h, err := e.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, h)
	if got := value(fams, "dccflow_event_subscriptions", map[string]string{}); got != 0 {
		t.Fatalf("%v subscriptions at rest", got)
	}
	if got := value(fams, "go_goroutines", map[string]string{}); got < 1 { // the Go runtime's own metrics
		t.Fatalf("go_goroutines %v", got)
	}
	var subs []*engine.Subscription
	for i := range 3 {
		s, err := e.Subscribe(ctx, engine.EventQuery{FromSeq: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if got := value(scrape(t, h), "dccflow_event_subscriptions", map[string]string{}); got != 3 || e.OpenSubscriptions() != 3 {
		t.Fatalf("%v (%d) subscriptions with 3 open", got, e.OpenSubscriptions())
	}
	for _, s := range subs {
		s.Close()
		s.Close()
	}
	if got := value(scrape(t, h), "dccflow_event_subscriptions", map[string]string{}); got != 0 || e.OpenSubscriptions() != 0 {
		t.Fatalf("%v (%d) subscriptions after closing them all", got, e.OpenSubscriptions())
	}
}

// Issue #33 item 3, for metrics: a weak token is refused off loopback; wrong tokens are
// throttled (429), so the token cannot be guessed at thousands of tries a second.
func TestRedteamMetricsTokenStrengthAndThrottle(t *testing.T) {
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{StallAfterSecs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if ms, err := e.ServeMetrics("0.0.0.0:0", "a"); err == nil {
		ms.Close(ctx)
		t.Fatal("a one-character token accepted off loopback")
	} else if run.CodeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "weak token") {
		t.Fatalf("weak token: %v", err)
	}
	ms, err := e.ServeMetrics("127.0.0.1:0", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close(ctx)
	last := 0
	for range 8 {
		req, _ := http.NewRequest(http.MethodGet, "http://"+ms.Addr()+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer guess")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		last = resp.StatusCode
	}
	if last != http.StatusTooManyRequests {
		t.Fatalf("8 wrong tokens: last answered %d, want 429", last)
	}
}
