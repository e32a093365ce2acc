package metrics

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// EventBatch is how many events one read of the stream takes while a scrape catches up.
const EventBatch = 1024

// Source is the event stream a Feed reads: the engine's store, behind the engine's closed check.
type Source interface {
	// LastSeq returns the Seq of the latest event, 0 when there is none.
	LastSeq(ctx context.Context) (uint64, error)
	// EventsAfter returns up to limit events with Seq > after, in order.
	EventsAfter(ctx context.Context, after uint64, limit int) ([]run.Event, error)
}

// Feed is the metrics of one engine, made on first use (Enable), and the place in the event
// stream they have observed up to. Its methods are safe for concurrent use.
type Feed struct {
	mu    sync.Mutex // held while a scrape catches up with the stream
	m     *Metrics
	after uint64 // the Seq of the last event observed
	// on is m once set: the scheduler's observers read it without waiting for a scrape that is
	// catching up.
	on atomic.Pointer[Metrics]
}

// Enable returns the feed's Metrics, making them with build on the first call: they count the
// events written after src's last one then (a metric is never read from the events already
// written). An error reading src leaves the metrics off.
func (f *Feed) Enable(ctx context.Context, src Source, build func() *Metrics) (*Metrics, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m != nil {
		return f.m, nil
	}
	seq, err := src.LastSeq(ctx)
	if err != nil {
		return nil, err
	}
	m := build()
	f.m, f.after = m, seq
	f.on.Store(m)
	return m, nil
}

// On returns the Metrics once enabled, else nil; it does not wait for a catch-up.
func (f *Feed) On() *Metrics { return f.on.Load() }

// CatchUp observes the events written since the last catch-up, up to the last one written when
// it starts, reading EventBatch at a time. Called before Enable it does nothing.
func (f *Feed) CatchUp(ctx context.Context, src Source) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		return nil
	}
	last, err := src.LastSeq(ctx)
	if err != nil {
		return err
	}
	for f.after < last {
		evs, err := src.EventsAfter(ctx, f.after, EventBatch)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			return nil
		}
		for _, ev := range evs {
			f.m.Observe(ctx, ev)
			f.after = ev.Seq
		}
	}
	return nil
}

// Handler serves the metrics in the text format, each request first catching up with src (so a
// scrape right after a run ends counts it). A catch-up that fails answers 503 when its error has
// code closed (the engine is closed), else 500, naming the error.
func (f *Feed) Handler(m *Metrics, src Source) http.Handler {
	inner := m.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f.CatchUp(r.Context(), src); err != nil {
			status := http.StatusInternalServerError
			if run.CodeOf(err) == run.CodeClosed {
				status = http.StatusServiceUnavailable
			}
			http.Error(w, "dcc-flow metrics: reading the event stream: "+err.Error(), status)
			return
		}
		inner.ServeHTTP(w, r)
	})
}

// SpecResolver is the Resolver of runs whose workflow name and spec (canonical JSON) get reads:
// the kind and tool of each step, its branches, bodies and on_failure steps included. A spec
// that does not parse leaves the run's steps unknown (the error is returned with the name).
func SpecResolver(get func(ctx context.Context, id string) (name string, specJSON []byte, err error)) Resolver {
	return func(ctx context.Context, id string) (RunInfo, error) {
		name, specJSON, err := get(ctx, id)
		if err != nil {
			return RunInfo{}, err
		}
		info := RunInfo{Workflow: name, Steps: map[string]StepInfo{}}
		sp, err := spec.Parse(specJSON, spec.Options{Format: spec.FormatJSON, Source: "run " + id})
		if err != nil {
			return info, err
		}
		var walk func([]*spec.Step)
		walk = func(steps []*spec.Step) {
			for _, s := range steps {
				info.Steps[s.ID] = StepInfo{Kind: string(s.Kind), Tool: s.Tool}
				walk(s.Steps)
				walk(s.Then)
				walk(s.Else)
			}
		}
		walk(sp.Steps)
		walk(sp.OnFailure)
		return info, nil
	}
}
