package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/dcc-flow/dcc-flow/engine/internal/httpauth"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/metrics"
	"github.com/dcc-flow/dcc-flow/engine/internal/schedule"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// DefaultMetricsAddr is where ServeMetrics listens when no address is given.
const DefaultMetricsAddr = "127.0.0.1:9464"

// metricsEventBatch is how many events one read of the stream takes while a scrape catches up.
const metricsEventBatch = 1024

// metricsState is the engine's Prometheus metrics, created on first use (docs/operations/metrics.md).
type metricsState struct {
	mu    sync.Mutex // held while a scrape catches up with the stream
	m     *metrics.Metrics
	after uint64 // the Seq of the last event observed
	// on is m once set: the scheduler's fire observer reads it without waiting for a scrape
	// that is catching up.
	on atomic.Pointer[metrics.Metrics]
}

// Metrics returns the handler of the engine's Prometheus metrics in the text format
// (docs/operations/metrics.md). The first call enables them: the counters count the events written from
// then on (a metric is never read from the runs already in the database). Each request first
// reads the events written since the previous one, so a scrape right after a run ends counts
// it. The metrics are the engine's own: two engines in one process share none.
func (e *Engine) Metrics() (http.Handler, error) {
	m, err := e.enableMetrics()
	if err != nil {
		return nil, err
	}
	inner := m.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := e.catchUpMetrics(r.Context()); err != nil {
			status := http.StatusInternalServerError
			if run.CodeOf(err) == run.CodeClosed {
				status = http.StatusServiceUnavailable
			}
			http.Error(w, "dcc-flow metrics: reading the event stream: "+err.Error(), status)
			return
		}
		inner.ServeHTTP(w, r)
	}), nil
}

func (e *Engine) enableMetrics() (*metrics.Metrics, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	st := &e.metrics
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m != nil {
		return st.m, nil
	}
	seq, err := e.store.LastSeq(context.Background())
	if err != nil {
		return nil, notFound("", err)
	}
	host := e.router.Host()
	cfg := metrics.Config{Resolve: e.metricsRunInfo, Queued: host.Queued, Lanes: []string{tools.LaneMain, tools.LaneWorker},
		Subscriptions: e.OpenSubscriptions}
	if e.remotes != nil && len(e.remotes.Queued()) > 0 {
		cfg.PoolQueued = e.remotes.Queued
	}
	m := metrics.New(cfg)
	if co, ok := e.store.(store.CommitObserver); ok { // SQLite: its group commits, from now on
		co.ObserveCommits(func(c store.Commit) { m.Commit(c.Batches, c.Duration) })
	}
	st.m, st.after = m, seq
	st.on.Store(m)
	return m, nil
}

// catchUpMetrics observes the events written since the last scrape, up to the last one
// written when it starts.
func (e *Engine) catchUpMetrics(ctx context.Context) error {
	if e.isClosed() {
		return errClosed()
	}
	st := &e.metrics
	st.mu.Lock()
	defer st.mu.Unlock()
	last, err := e.store.LastSeq(ctx)
	if err != nil {
		return err
	}
	for st.after < last {
		evs, err := e.store.ListEvents(ctx, store.EventFilter{AfterSeq: st.after, Limit: metricsEventBatch})
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		for _, ev := range evs {
			st.m.Observe(ctx, ev)
			st.after = ev.Seq
		}
	}
	return nil
}

// observeFire counts a scheduler fire once the metrics are enabled (schedule.WithFireObserver),
// and the lateness of a cron or interval fire (a webhook's has no slot).
func (e *Engine) observeFire(f schedule.Fire) {
	if m := e.metrics.on.Load(); m != nil {
		m.Fire(f.ScheduleID, string(f.Kind))
		if f.Origin == schedule.OriginSchedule && !f.ScheduledAt.IsZero() {
			m.FireLate(f.ScheduleID, f.FiredAt.Sub(f.ScheduledAt))
		}
	}
}

// observeDelivery counts a webhook request answered once the metrics are enabled
// (schedule.WithDeliveryObserver).
func (e *Engine) observeDelivery(d schedule.Delivery) {
	if m := e.metrics.on.Load(); m != nil {
		m.Delivery(d.ScheduleID, d.Status, d.Result)
	}
}

// metricsRunInfo reads a run's workflow name and the kind and tool of each of its steps.
func (e *Engine) metricsRunInfo(ctx context.Context, id string) (metrics.RunInfo, error) {
	rec, err := e.store.GetRun(ctx, id)
	if err != nil {
		return metrics.RunInfo{}, err
	}
	info := metrics.RunInfo{Workflow: rec.Name, Steps: map[string]metrics.StepInfo{}}
	sp, err := spec.Parse(rec.SpecJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + id})
	if err != nil {
		return info, err
	}
	var walk func([]*spec.Step)
	walk = func(steps []*spec.Step) {
		for _, s := range steps {
			info.Steps[s.ID] = metrics.StepInfo{Kind: string(s.Kind), Tool: s.Tool}
			walk(s.Steps)
			walk(s.Then)
			walk(s.Else)
		}
	}
	walk(sp.Steps)
	walk(sp.OnFailure)
	return info, nil
}

// MetricsServer serves the engine's metrics on GET /metrics.
type MetricsServer struct {
	srv  *http.Server
	ln   net.Listener
	addr string
}

// ServeMetrics starts an HTTP server on addr ("" = DefaultMetricsAddr; port 0 picks a free
// port) answering GET /metrics with the engine's metrics (Metrics) and 404 elsewhere. A token
// makes every request need the header "Authorization: Bearer TOKEN" (401 without it). An
// address that is not loopback is refused (code invalid_request) without a token. Stop it with
// Close.
func (e *Engine) ServeMetrics(addr, token string) (*MetricsServer, error) {
	if addr == "" {
		addr = DefaultMetricsAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("metrics address %q: %v; write HOST:PORT, e.g. %s", addr, err, DefaultMetricsAddr)}
	}
	if !isLoopbackHost(host) && token == "" {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf(
			"refusing to serve metrics on %s, which is not a loopback address, without a token: serve them on 127.0.0.1 or give a token (dcc-flow serve --token), which scrapers send as \"Authorization: Bearer TOKEN\"", addr)}
	}
	if !isLoopbackHost(host) {
		if err := httpauth.CheckToken("metrics", addr, token); err != nil {
			return nil, &run.Error{Code: run.CodeInvalidRequest, Message: err.Error()}
		}
	}
	h, err := e.Metrics()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("cannot listen for metrics on %s: %v", addr, err), Err: err}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", requireBearer(token, h))
	ms := &MetricsServer{
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 120 * time.Second, MaxHeaderBytes: 64 << 10},
		ln: ln, addr: ln.Addr().String(),
	}
	go func() { _ = ms.srv.Serve(ln) }()
	return ms, nil
}

// requireBearer answers 401 to a request without "Authorization: Bearer token", and 429 with
// Retry-After to an address throttled for wrong tokens (httpauth.Throttle); an empty token lets
// every request through.
func requireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	throttle := httpauth.NewThrottle(time.Now)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok, wait := throttle.Bearer(r, token)
		if wait > 0 {
			w.Header().Set("Retry-After", httpauth.RetryAfter(wait))
			http.Error(w, "dcc-flow metrics: too many wrong tokens from this address; try again later", http.StatusTooManyRequests)
			return
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dcc-flow metrics"`)
			http.Error(w, "dcc-flow metrics: send Authorization: Bearer TOKEN", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Addr is the address the server listens on, e.g. "127.0.0.1:9464".
func (s *MetricsServer) Addr() string { return s.addr }

// Close stops accepting requests and waits for the ones in progress, or until ctx ends.
// Closing twice is not an error.
func (s *MetricsServer) Close(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	_ = s.ln.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}
