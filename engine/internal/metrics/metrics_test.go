package metrics

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

func resolver(workflow string) Resolver {
	return func(_ context.Context, id string) (RunInfo, error) {
		return RunInfo{Workflow: workflow, Steps: map[string]StepInfo{
			"render": {Kind: "tool", Tool: "maya.render"}, "per_shot": {Kind: "foreach"}, "gate": {Kind: "approve"},
		}}, nil
	}
}

func TestObserveCountsRunsAttemptsRetriesAndDurations(t *testing.T) {
	t.Parallel()
	m := New(Config{Resolve: resolver("nightly")})
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(d time.Duration, typ, key, status string, attempt int, detail string) run.Event {
		e := run.Event{Time: t0.Add(d), RunID: "r1", Type: typ, StepKey: key, Status: status, Attempt: attempt}
		if detail != "" {
			e.Detail = []byte(detail)
		}
		return e
	}
	for _, e := range []run.Event{
		ev(0, run.EventWorkflowStarted, "", "running", 0, ""),
		ev(0, run.EventStepEnter, "per_shot[0].render", "running", 1, ""),
		ev(2*time.Second, run.EventStepRetry, "per_shot[0].render", "retrying", 2, `{"delay_ms":1000}`),
		ev(7*time.Second, run.EventStepExit, "per_shot[0].render", "completed", 2, ""), // 4 s after the delay
		ev(8*time.Second, run.EventStepExit, "per_shot", "completed", 0, ""),           // no attempt
		ev(9*time.Second, run.EventWorkflowTerminal, "", "completed", 0, ""),
	} {
		m.Observe(ctx, e)
	}
	checks := []struct {
		name string
		got  float64
		want float64
	}{
		{"started", testutil.ToFloat64(m.runsStarted.WithLabelValues("nightly")), 1},
		{"ended completed", testutil.ToFloat64(m.runsEnded.WithLabelValues("nightly", "completed")), 1},
		{"attempts retried", testutil.ToFloat64(m.attempts.WithLabelValues("maya.render", "tool", "retried")), 1},
		{"attempts completed", testutil.ToFloat64(m.attempts.WithLabelValues("maya.render", "tool", "completed")), 1},
		{"retries", testutil.ToFloat64(m.retries.WithLabelValues("maya.render")), 1},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.attempts); n != 2 {
		t.Errorf("attempt series: %d, want 2 (the foreach made no attempt)", n)
	}
	// The two attempts took 2 s and 4 s: the histogram's sum is 6 and both are ≤ 5 s.
	want := `
# HELP dccflow_step_attempt_duration_seconds Duration of the attempts of tool steps, by tool.
# TYPE dccflow_step_attempt_duration_seconds histogram
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="0.01"} 0
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="0.05"} 0
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="0.1"} 0
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="0.5"} 0
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="1"} 0
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="5"} 2
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="10"} 2
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="30"} 2
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="60"} 2
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="300"} 2
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="900"} 2
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="3600"} 2
dccflow_step_attempt_duration_seconds_bucket{tool="maya.render",le="+Inf"} 2
dccflow_step_attempt_duration_seconds_sum{tool="maya.render"} 6
dccflow_step_attempt_duration_seconds_count{tool="maya.render"} 2
`
	if err := testutil.CollectAndCompare(m.attemptSeconds, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if len(m.runs) != 0 {
		t.Errorf("the ended run's state is kept: %d runs", len(m.runs))
	}
}

func TestLabelValuesAreBounded(t *testing.T) {
	t.Parallel()
	var n int
	m := New(Config{MaxLabelValues: 3, Resolve: func(_ context.Context, id string) (RunInfo, error) {
		n++
		return RunInfo{Workflow: fmt.Sprintf("wf%d", n)}, nil
	}})
	for i := range 50 {
		id := fmt.Sprintf("run-%d", i)
		m.Observe(context.Background(), run.Event{RunID: id, Type: run.EventWorkflowStarted, Status: "running"})
		m.Observe(context.Background(), run.Event{RunID: id, Type: run.EventWorkflowTerminal, Status: "failed"})
		m.Fire(fmt.Sprintf("sched-%d", i), "fired")
	}
	if got := testutil.CollectAndCount(m.runsStarted); got != 4 {
		t.Errorf("runs_started series: %d, want 4 (3 workflows and %s)", got, OtherLabel)
	}
	if got := testutil.ToFloat64(m.runsEnded.WithLabelValues(OtherLabel, "failed")); got != 47 {
		t.Errorf("runs ended under %s: %v, want 47", OtherLabel, got)
	}
	if got := testutil.CollectAndCount(m.fires); got != 4 {
		t.Errorf("fires series: %d, want 4", got)
	}
	// No series carries a run id.
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body := rec.Body.String(); strings.Contains(body, "run-") || !strings.Contains(body, `dccflow_schedule_fires_total{kind="fired",schedule="_other"} 47`) {
		t.Errorf("scrape:\n%s", body)
	}
}

func TestQueueDepthIsReadAtScrape(t *testing.T) {
	t.Parallel()
	depth := map[string]int{"main": 3, "worker": 0}
	m := New(Config{Queued: func(l string) int { return depth[l] }, Lanes: []string{"main", "worker"}})
	want := `
# HELP dccflow_host_queue_depth Host tool calls waiting to be pulled, by lane.
# TYPE dccflow_host_queue_depth gauge
dccflow_host_queue_depth{lane="main"} 3
dccflow_host_queue_depth{lane="worker"} 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "dccflow_host_queue_depth"); err != nil {
		t.Fatal(err)
	}
}

func TestOpenLineageCountsAreReadAtScrape(t *testing.T) {
	t.Parallel()
	var delivered, dropped, failed int64 = 7, 2, 1
	m := New(Config{OpenLineage: func() (int64, int64, int64) { return delivered, dropped, failed }})
	want := func() string {
		return fmt.Sprintf(`
# HELP dccflow_openlineage_events_total OpenLineage events by outcome: delivered (to every place configured), dropped (the queue was full), failed (not sent or written).
# TYPE dccflow_openlineage_events_total counter
dccflow_openlineage_events_total{outcome="delivered"} %d
dccflow_openlineage_events_total{outcome="dropped"} %d
dccflow_openlineage_events_total{outcome="failed"} %d
`, delivered, dropped, failed)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want()), "dccflow_openlineage_events_total"); err != nil {
		t.Fatal(err)
	}
	delivered, failed = 9, 4
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want()), "dccflow_openlineage_events_total"); err != nil {
		t.Fatal(err)
	}
	// Off: no series.
	if n, err := testutil.GatherAndCount(New(Config{}).Registry(), "dccflow_openlineage_events_total"); err != nil || n != 0 {
		t.Fatalf("%d series without OpenLineage (%v)", n, err)
	}
}

func TestPoolQueueDepthIsReadAtScrape(t *testing.T) {
	t.Parallel()
	depth := map[string]int{"maya": 2, "houdini": 0}
	m := New(Config{PoolQueued: func() map[string]int { return depth }})
	want := `
# HELP dccflow_pool_queue_depth Tool calls waiting for a worker, by worker pool.
# TYPE dccflow_pool_queue_depth gauge
dccflow_pool_queue_depth{pool="houdini"} 0
dccflow_pool_queue_depth{pool="maya"} 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "dccflow_pool_queue_depth"); err != nil {
		t.Fatal(err)
	}
	depth = map[string]int{"maya": 5, "houdini": 1}
	if n, _ := testutil.GatherAndCount(m.Registry(), "dccflow_pool_queue_depth"); n != 2 {
		t.Fatalf("%d pool series gathered, want 2", n)
	}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(strings.NewReplacer(`"houdini"} 0`, `"houdini"} 1`, `"maya"} 2`, `"maya"} 5`).Replace(want)),
		"dccflow_pool_queue_depth"); err != nil {
		t.Fatalf("the second scrape did not read the depths again: %v", err)
	}
	// Without PoolQueued (an engine without pools) the family is absent.
	if n, _ := testutil.GatherAndCount(New(Config{}).Registry(), "dccflow_pool_queue_depth"); n != 0 {
		t.Fatalf("%d pool series without pools", n)
	}
}

func TestDeliveriesLatenessAndCommits(t *testing.T) {
	t.Parallel()
	m := New(Config{MaxLabelValues: 1})
	m.Delivery("on_push", 202, "enqueued")
	m.Delivery("on_push", 202, "enqueued")
	m.Delivery("on_push", 401, "invalid_signature")
	m.Delivery("", 404, "unknown_webhook")       // an unknown path is no schedule
	m.Delivery("on_tag", 200, "duplicate")       // past MaxLabelValues
	m.FireLate("nightly", 1500*time.Millisecond) // ≤ 5 s
	m.FireLate("nightly", -time.Second)          // a clock stepped back: 0
	m.Commit(1, 2*time.Millisecond)
	m.Commit(37, 30*time.Millisecond)
	want := `
# HELP dccflow_webhook_deliveries_total Webhook requests answered, by schedule ("" for an unknown path), HTTP status code and result (enqueued, duplicate or the error code).
# TYPE dccflow_webhook_deliveries_total counter
dccflow_webhook_deliveries_total{code="202",result="enqueued",schedule="on_push"} 2
dccflow_webhook_deliveries_total{code="401",result="invalid_signature",schedule="on_push"} 1
dccflow_webhook_deliveries_total{code="404",result="unknown_webhook",schedule=""} 1
dccflow_webhook_deliveries_total{code="200",result="duplicate",schedule="_other"} 1
# HELP dccflow_schedule_fire_lateness_seconds How long after its slot each cron or interval fire was handled (jitter and catch-up included), by schedule.
# TYPE dccflow_schedule_fire_lateness_seconds histogram
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="0.005"} 1
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="0.01"} 1
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="0.05"} 1
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="0.1"} 1
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="0.5"} 1
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="1"} 1
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="5"} 2
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="30"} 2
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="60"} 2
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="300"} 2
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="3600"} 2
dccflow_schedule_fire_lateness_seconds_bucket{schedule="_other",le="+Inf"} 2
dccflow_schedule_fire_lateness_seconds_sum{schedule="_other"} 1.5
dccflow_schedule_fire_lateness_seconds_count{schedule="_other"} 2
# HELP dccflow_db_commit_batches Write batches grouped into each database transaction committed (group commit).
# TYPE dccflow_db_commit_batches histogram
dccflow_db_commit_batches_bucket{le="1"} 1
dccflow_db_commit_batches_bucket{le="2"} 1
dccflow_db_commit_batches_bucket{le="4"} 1
dccflow_db_commit_batches_bucket{le="8"} 1
dccflow_db_commit_batches_bucket{le="16"} 1
dccflow_db_commit_batches_bucket{le="32"} 1
dccflow_db_commit_batches_bucket{le="64"} 2
dccflow_db_commit_batches_bucket{le="128"} 2
dccflow_db_commit_batches_bucket{le="256"} 2
dccflow_db_commit_batches_bucket{le="512"} 2
dccflow_db_commit_batches_bucket{le="+Inf"} 2
dccflow_db_commit_batches_sum 38
dccflow_db_commit_batches_count 2
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "dccflow_webhook_deliveries_total",
		"dccflow_schedule_fire_lateness_seconds", "dccflow_db_commit_batches"); err != nil {
		t.Fatal(err)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "dccflow_db_commit_duration_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() < 0.0319 || h.GetSampleSum() > 0.0321 {
				t.Fatalf("commit durations: %d samples, sum %v; want 2 and 0.032", h.GetSampleCount(), h.GetSampleSum())
			}
			return
		}
	}
	t.Fatal("no dccflow_db_commit_duration_seconds family")
}

func TestStepID(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]string{"export": "export", "per_shot[2].render": "render", "per_shot[2]": "per_shot",
		"outer[1].inner[2].leaf": "leaf"} {
		if got := StepID(key); got != want {
			t.Errorf("StepID(%q) = %q, want %q", key, got, want)
		}
	}
}

// The cost of what the engine calls outside scrapes: a commit, a fire's lateness, a delivery
// (docs/operations/metrics.md).
func BenchmarkObserveOutsideScrapes(b *testing.B) {
	m := New(Config{})
	b.Run("Commit", func(b *testing.B) {
		for range b.N {
			m.Commit(3, time.Millisecond)
		}
	})
	b.Run("FireLate", func(b *testing.B) {
		for range b.N {
			m.FireLate("nightly", time.Second)
		}
	})
	b.Run("Delivery", func(b *testing.B) {
		for range b.N {
			m.Delivery("on_push", 202, "enqueued")
		}
	})
}
