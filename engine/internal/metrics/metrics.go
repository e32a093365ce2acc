// Package metrics turns the engine's event stream into Prometheus metrics (docs/operations/metrics.md).
//
// A Metrics owns its own registry: several engines in one process never share a series. It is
// fed events in Seq order by Observe (the engine reads them from its store when scraped), fires
// by Fire and FireLate (the scheduler's observer), webhook requests by Delivery, database
// commits by Commit (the store's observer), and reads the host-call and worker-pool queue
// depths when scraped. Label
// values are bounded: run ids are never a label, and each label (workflow, tool, schedule)
// keeps at most MaxLabelValues distinct values, later ones being counted under OtherLabel.
package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// MaxLabelValues is the most distinct values one label (workflow, tool, schedule) takes; the
// values seen after it are reported as OtherLabel.
const MaxLabelValues = 500

// OtherLabel is the label value of the workflows, tools and schedules past MaxLabelValues.
const OtherLabel = "_other"

// maxRuns bounds the runs whose step and attempt state is kept between events; past it the
// state of every run is dropped (their later attempts are still counted, without a duration).
const maxRuns = 10000

// StepInfo is what a spec says of one step id.
type StepInfo struct {
	Kind string // the spec step kind: "tool", "foreach", …
	Tool string // the tool of a tool or tool_remote step, else ""
}

// RunInfo is what the metrics need to know of a run: its workflow and its steps by spec id.
type RunInfo struct {
	Workflow string
	Steps    map[string]StepInfo
}

// Resolver looks a run up; an error leaves the run's events labelled with empty values.
type Resolver func(ctx context.Context, runID string) (RunInfo, error)

// Config wires a Metrics to its engine.
type Config struct {
	Resolve Resolver
	// Queued returns the host calls waiting to be pulled in a lane; nil reports none.
	Queued func(lane string) int
	Lanes  []string
	// PoolQueued returns the calls waiting for a worker, by worker pool (docs/guide/pools.md), read at
	// each scrape; nil reports no pools.
	PoolQueued func() map[string]int
	// Subscriptions returns the open event subscriptions (the dashboard's event streams, MCP
	// readers), read at each scrape; nil leaves the gauge out.
	Subscriptions func() int
	// OpenLineage returns the counts of the engine's OpenLineage events (delivered, dropped
	// because the queue was full, failed to send or write), read at each scrape; nil leaves
	// dccflow_openlineage_events_total out (OpenLineage off).
	OpenLineage func() (delivered, dropped, failed int64)
	// Spans returns the counts of the engine's trace spans (exported, dropped because the
	// queue was full, failed to export), read at each scrape; nil leaves
	// dccflow_trace_spans_total out (tracing off).
	Spans func() (exported, dropped, failed int64)
	// Resources returns the engine's scarce resources (docs/guide/resources.md), read at each
	// scrape; nil leaves the dccflow_resource_* metrics out (none declared).
	Resources func() []ResourceGauge
	// MaxLabelValues overrides the package constant when > 0 (tests).
	MaxLabelValues int
}

// Metrics is the collector of one engine. Its methods are safe for concurrent use.
type Metrics struct {
	reg     *prometheus.Registry
	resolve Resolver

	runsStarted    *prometheus.CounterVec
	runsEnded      *prometheus.CounterVec
	attempts       *prometheus.CounterVec
	attemptSeconds *prometheus.HistogramVec
	retries        *prometheus.CounterVec
	fires          *prometheus.CounterVec
	fireLateness   *prometheus.HistogramVec
	deliveries     *prometheus.CounterVec
	commitSeconds  prometheus.Histogram
	resourceWait   *prometheus.HistogramVec // nil without declared resources
	commitBatches  prometheus.Histogram

	mu        sync.Mutex
	runs      map[string]*runState
	workflows bounded
	tools     bounded
	schedules bounded
}

type runState struct {
	info   RunInfo
	starts map[string]time.Time // the start of the attempt in progress, by step instance key
}

// New returns a Metrics with its own registry.
func New(cfg Config) *Metrics {
	limit := cfg.MaxLabelValues
	if limit <= 0 {
		limit = MaxLabelValues
	}
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		resolve: cfg.Resolve,
		runsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dccflow_runs_started_total",
			Help: "Runs started, by workflow."}, []string{"workflow"}),
		runsEnded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dccflow_runs_ended_total",
			Help: "Runs that reached a terminal status (completed, failed, cancelled, interrupted), by workflow and status."},
			[]string{"workflow", "status"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dccflow_step_attempts_total",
			Help: "Step attempts that ended, by tool, step kind and outcome (a step status, or retried)."},
			[]string{"tool", "kind", "outcome"}),
		attemptSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dccflow_step_attempt_duration_seconds",
			Help:    "Duration of the attempts of tool steps, by tool.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}}, []string{"tool"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dccflow_step_retries_total",
			Help: "Retries scheduled after a failed attempt, by tool."}, []string{"tool"}),
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dccflow_schedule_fires_total",
			Help: "Scheduler fires, by schedule and kind (fired, skipped, failed)."}, []string{"schedule", "kind"}),
		fireLateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "dccflow_schedule_fire_lateness_seconds",
			Help:    "How long after its slot each cron or interval fire was handled (jitter and catch-up included), by schedule.",
			Buckets: []float64{0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 60, 300, 3600}}, []string{"schedule"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dccflow_webhook_deliveries_total",
			Help: "Webhook requests answered, by schedule (\"\" for an unknown path), HTTP status code and result (enqueued, duplicate or the error code)."},
			[]string{"schedule", "code", "result"}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dccflow_db_commit_duration_seconds",
			Help:    "Duration of each database transaction committed (SQLite group commit: statements, checkpoint and sync).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}}),
		commitBatches: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dccflow_db_commit_batches",
			Help:    "Write batches grouped into each database transaction committed (group commit).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}}),
		runs:      map[string]*runState{},
		workflows: newBounded(limit),
		tools:     newBounded(limit),
		schedules: newBounded(limit),
	}
	m.reg.MustRegister(m.runsStarted, m.runsEnded, m.attempts, m.attemptSeconds, m.retries, m.fires,
		m.fireLateness, m.deliveries, m.commitSeconds, m.commitBatches)
	if cfg.PoolQueued != nil {
		m.reg.MustRegister(poolCollector{queued: cfg.PoolQueued})
	}
	if cfg.Resources != nil {
		m.resourceWait = newResourceWait()
		m.reg.MustRegister(resourceCollector{read: cfg.Resources}, m.resourceWait)
	}
	// The Go runtime's own (go_goroutines, go_threads, go_memstats_*): a server whose goroutines
	// or heap grow at rest leaks (scripts/soak_net.py reads go_goroutines).
	m.reg.MustRegister(collectors.NewGoCollector())
	if cfg.Subscriptions != nil {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dccflow_event_subscriptions",
			Help: "Open subscriptions to the event stream (the dashboard's live pages, MCP readers); 0 at rest."},
			func() float64 { return float64(cfg.Subscriptions()) }))
	}
	if cfg.OpenLineage != nil {
		for i, outcome := range []string{"delivered", "dropped", "failed"} {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "dccflow_openlineage_events_total",
				Help:        "OpenLineage events by outcome: delivered (to every place configured), dropped (the queue was full), failed (not sent or written).",
				ConstLabels: prometheus.Labels{"outcome": outcome}},
				func() float64 {
					d, r, f := cfg.OpenLineage()
					return float64([]int64{d, r, f}[i])
				}))
		}
	}
	if cfg.Spans != nil {
		for i, outcome := range []string{"exported", "dropped", "failed"} {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "dccflow_trace_spans_total",
				Help:        "Trace spans by outcome: exported (the collector took them), dropped (the export queue was full), failed (not exported).",
				ConstLabels: prometheus.Labels{"outcome": outcome}},
				func() float64 {
					x, d, f := cfg.Spans()
					return float64([]int64{x, d, f}[i])
				}))
		}
	}
	if cfg.Queued != nil {
		for _, lane := range cfg.Lanes {
			m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "dccflow_host_queue_depth",
				Help: "Host tool calls waiting to be pulled, by lane.", ConstLabels: prometheus.Labels{"lane": lane}},
				func() float64 { return float64(cfg.Queued(lane)) }))
		}
	}
	return m
}

// Registry is the metrics' own registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format; errors are answered 500.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}

// Fire counts one scheduler fire of kind ("fired", "skipped", "failed").
func (m *Metrics) Fire(scheduleID, kind string) {
	m.mu.Lock()
	id := m.schedules.value(scheduleID)
	m.mu.Unlock()
	m.fires.WithLabelValues(id, kind).Inc()
}

// FireLate records how long after its slot a cron or interval fire was handled; a negative d
// (a clock stepped back) counts as 0.
func (m *Metrics) FireLate(scheduleID string, d time.Duration) {
	m.mu.Lock()
	id := m.schedules.value(scheduleID)
	m.mu.Unlock()
	m.fireLateness.WithLabelValues(id).Observe(max(d, 0).Seconds())
}

// Delivery counts one webhook request answered with HTTP status code: scheduleID is "" for a
// path no schedule has, result "enqueued", "duplicate" or the reply's error code.
func (m *Metrics) Delivery(scheduleID string, code int, result string) {
	m.mu.Lock()
	id := scheduleID
	if id != "" {
		id = m.schedules.value(id)
	}
	m.mu.Unlock()
	m.deliveries.WithLabelValues(id, strconv.Itoa(code), result).Inc()
}

// Commit records one database transaction committed: its write batches and its duration.
func (m *Metrics) Commit(batches int, d time.Duration) {
	m.commitSeconds.Observe(d.Seconds())
	m.commitBatches.Observe(float64(batches))
}

// poolDepth describes dccflow_pool_queue_depth.
var poolDepth = prometheus.NewDesc("dccflow_pool_queue_depth",
	"Tool calls waiting for a worker, by worker pool.", []string{"pool"}, nil)

// poolCollector reads the queue depth of every worker pool at each scrape (the pools are fixed
// when the engine opens, so their names bound the label).
type poolCollector struct{ queued func() map[string]int }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolDepth }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for pool, n := range c.queued() {
		m, err := prometheus.NewConstMetric(poolDepth, prometheus.GaugeValue, float64(n), pool)
		if err != nil { // a pool name that is not UTF-8: the scrape reports it, nothing panics
			m = prometheus.NewInvalidMetric(poolDepth, err)
		}
		ch <- m
	}
}

// Observe counts one event; events must come in Seq order.
func (m *Metrics) Observe(ctx context.Context, ev run.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Type {
	case run.EventWorkflowStarted:
		rs := m.runLocked(ctx, ev.RunID)
		m.runsStarted.WithLabelValues(rs.info.Workflow).Inc()
	case run.EventWorkflowResumed:
		m.runLocked(ctx, ev.RunID)
	case run.EventWorkflowTerminal, run.EventInterrupted:
		rs := m.runLocked(ctx, ev.RunID)
		m.runsEnded.WithLabelValues(rs.info.Workflow, ev.Status).Inc()
		delete(m.runs, ev.RunID) // a resumed run is looked up again
	case run.EventStepEnter:
		if ev.Attempt > 0 {
			m.runLocked(ctx, ev.RunID).starts[ev.StepKey] = ev.Time
		}
	case run.EventStepRetry:
		rs := m.runLocked(ctx, ev.RunID)
		st := m.stepLocked(rs, ev.StepKey)
		m.endAttemptLocked(rs, ev, st, "retried")
		m.retries.WithLabelValues(st.Tool).Inc()
		// The next attempt starts when the retry delay ends.
		var d struct {
			DelayMs int64 `json:"delay_ms"`
		}
		_ = json.Unmarshal(ev.Detail, &d)
		rs.starts[ev.StepKey] = ev.Time.Add(time.Duration(d.DelayMs) * time.Millisecond)
	case run.EventStepExit:
		if ev.Attempt == 0 { // cached, skipped or a control step: no attempt was made
			return
		}
		rs := m.runLocked(ctx, ev.RunID)
		m.endAttemptLocked(rs, ev, m.stepLocked(rs, ev.StepKey), ev.Status)
		delete(rs.starts, ev.StepKey)
	}
}

func (m *Metrics) endAttemptLocked(rs *runState, ev run.Event, st StepInfo, outcome string) {
	m.attempts.WithLabelValues(st.Tool, st.Kind, outcome).Inc()
	start, ok := rs.starts[ev.StepKey]
	if ok && st.Tool != "" && !ev.Time.Before(start) {
		m.attemptSeconds.WithLabelValues(st.Tool).Observe(ev.Time.Sub(start).Seconds())
	}
}

// runLocked returns the state of run id, looking the run up the first time it is seen.
func (m *Metrics) runLocked(ctx context.Context, id string) *runState {
	if rs := m.runs[id]; rs != nil {
		return rs
	}
	var info RunInfo
	if m.resolve != nil {
		info, _ = m.resolve(ctx, id)
	}
	info.Workflow = m.workflows.value(info.Workflow)
	if len(m.runs) >= maxRuns {
		clear(m.runs)
	}
	rs := &runState{info: info, starts: map[string]time.Time{}}
	m.runs[id] = rs
	return rs
}

// stepLocked returns the spec's step of an instance key ("per_shot[2].render" → "render"),
// its tool bounded.
func (m *Metrics) stepLocked(rs *runState, key string) StepInfo {
	st := rs.info.Steps[StepID(key)]
	if st.Tool != "" {
		st.Tool = m.tools.value(st.Tool)
	}
	return st
}

// StepID returns the spec step id of a step instance key: "per_shot[2].render" → "render",
// "per_shot[2]" → "per_shot", "export" → "export".
func StepID(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		key = key[i+1:]
	}
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i]
	}
	return key
}

// bounded hands out at most limit distinct label values, then OtherLabel.
type bounded struct {
	limit int
	seen  map[string]struct{}
}

func newBounded(limit int) bounded { return bounded{limit: limit, seen: map[string]struct{}{}} }

func (b *bounded) value(v string) string {
	if _, ok := b.seen[v]; ok {
		return v
	}
	if len(b.seen) >= b.limit {
		return OtherLabel
	}
	b.seen[v] = struct{}{}
	return v
}
