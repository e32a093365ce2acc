package engine

import (
	"context"
	"net/http"

	"github.com/dcc-flow/dcc-flow/engine/internal/metrics"
	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// DefaultMetricsAddr is where ServeMetrics listens when no address is given.
const DefaultMetricsAddr = metrics.DefaultAddr

// Metrics returns the handler of the engine's Prometheus metrics in the text format
// (docs/operations/metrics.md). The first call enables them: the counters count the events written from
// then on (a metric is never read from the runs already in the database). Each request first
// reads the events written since the previous one, so a scrape right after a run ends counts
// it. The metrics are the engine's own: two engines in one process share none.
func (e *Engine) Metrics() (http.Handler, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	m, err := e.metrics.Enable(context.Background(), metricsSource{e}, e.newMetrics)
	if err != nil {
		if run.CodeOf(err) == run.CodeClosed {
			return nil, err
		}
		return nil, notFound("", err)
	}
	return e.metrics.Handler(m, metricsSource{e}), nil
}

// newMetrics makes the engine's metrics (metrics.Feed.Enable) and has the store report its
// group commits to them from now on (SQLite).
func (e *Engine) newMetrics() *metrics.Metrics {
	host := e.router.Host()
	cfg := metrics.Config{Resolve: metrics.SpecResolver(e.storedSpec), Queued: host.Queued, Lanes: []string{tools.LaneMain, tools.LaneWorker},
		Subscriptions: e.OpenSubscriptions}
	if e.remotes != nil && len(e.remotes.Queued()) > 0 {
		cfg.PoolQueued = e.remotes.Queued
	}
	if e.resGate != nil {
		cfg.Resources = e.resGate.Gauges
	}
	if em := e.ol.em; em != nil {
		cfg.OpenLineage = func() (int64, int64, int64) { return em.Delivered(), em.Dropped(), em.Failed() }
	}
	if t := e.tracer; t != nil {
		cfg.Spans = func() (int64, int64, int64) { s := t.Stats(); return s.Exported, s.Dropped, s.Failed }
	}
	m := metrics.New(cfg)
	if co, ok := e.store.(store.CommitObserver); ok {
		co.ObserveCommits(func(c store.Commit) { m.Commit(c.Batches, c.Duration) })
	}
	return m
}

// storedSpec reads a run's workflow name and spec (metrics.SpecResolver).
func (e *Engine) storedSpec(ctx context.Context, id string) (string, []byte, error) {
	rec, err := e.store.GetRun(ctx, id)
	return rec.Name, rec.SpecJSON, err
}

// metricsSource is the event stream the metrics read (metrics.Source): the store's, code closed
// once the engine is closed.
type metricsSource struct{ e *Engine }

func (s metricsSource) LastSeq(ctx context.Context) (uint64, error) {
	if s.e.isClosed() {
		return 0, errClosed()
	}
	return s.e.store.LastSeq(ctx)
}

func (s metricsSource) EventsAfter(ctx context.Context, after uint64, limit int) ([]run.Event, error) {
	return s.e.store.ListEvents(ctx, store.EventFilter{AfterSeq: after, Limit: limit})
}

// observeFire counts a scheduler fire once the metrics are enabled (schedule.WithFireObserver),
// and the lateness of a cron or interval fire (a webhook's has no slot).
func (e *Engine) observeFire(f schedule.Fire) {
	if m := e.metrics.On(); m != nil {
		m.Fire(f.ScheduleID, string(f.Kind))
		if f.Origin == schedule.OriginSchedule && !f.ScheduledAt.IsZero() {
			m.FireLate(f.ScheduleID, f.FiredAt.Sub(f.ScheduledAt))
		}
	}
}

// observeDelivery counts a webhook request answered once the metrics are enabled
// (schedule.WithDeliveryObserver).
func (e *Engine) observeDelivery(d schedule.Delivery) {
	if m := e.metrics.On(); m != nil {
		m.Delivery(d.ScheduleID, d.Status, d.Result)
	}
}

// MetricsServer serves the engine's metrics on GET /metrics.
type MetricsServer struct{ s *metrics.Server }

// ServeMetrics starts an HTTP server on addr ("" = DefaultMetricsAddr; port 0 picks a free
// port) answering GET /metrics with the engine's metrics (Metrics) and 404 elsewhere. A token
// makes every request need the header "Authorization: Bearer TOKEN" (401 without it). An
// address that is not loopback is refused (code invalid_request) without a token. Stop it with
// Close.
func (e *Engine) ServeMetrics(addr, token string) (*MetricsServer, error) {
	s, err := metrics.Serve(addr, token, e.Metrics)
	if err != nil {
		return nil, err
	}
	return &MetricsServer{s: s}, nil
}

// Addr is the address the server listens on, e.g. "127.0.0.1:9464".
func (s *MetricsServer) Addr() string { return s.s.Addr() }

// Close stops accepting requests and waits for the ones in progress, or until ctx ends.
// Closing twice is not an error.
func (s *MetricsServer) Close(ctx context.Context) error { return s.s.Close(ctx) }
