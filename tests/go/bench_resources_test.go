package gotest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The benchmarks of who goes first among the steps waiting for a scarce resource
// (docs/guide/resources.md "Who goes first"; the rows of docs/design/performance.md): engines
// declaring houdini with a small limit, whose host tool cook is answered by a goroutine of the
// benchmark after callMS (a licensed call), each call's start recorded.

// resBench is the engines of one benchmark and their hosts.
type resBench struct {
	b       *testing.B
	db      string // the PostgreSQL URL; "" for SQLite
	engines []*engine.Engine
	mu      sync.Mutex
	starts  []callStart
}

// callStart is one call of cook reaching its host: the run it works for and when.
type callStart struct {
	run, step string
	at        time.Time
}

// newResBench opens n engines on one new database (PostgreSQL when pg, else one SQLite file:
// n must be 1) declaring houdini with limit, and starts their hosts, each call taking callMS.
func newResBench(b *testing.B, pg bool, n, limit int, call time.Duration) *resBench {
	b.Helper()
	ctx, stop := context.WithCancel(context.Background())
	rb := &resBench{b: b}
	if pg {
		rb.db = pgtest.DB(b)
	}
	var hosts sync.WaitGroup
	for range n {
		db := rb.db
		if !pg {
			db = filepath.Join(b.TempDir(), "flow.db")
		}
		e, err := engine.Open(ctx, engine.Config{DB: db, StallAfterSecs: -1, Seed: 1, LeaseSecs: 30,
			Resources: map[string]engine.ResourceConfig{"houdini": {Limit: limit}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = e.Close(context.Background()) })
		if err := e.RegisterTool(flowtype.ToolInfo{Name: "cook", Lane: flowtype.LaneWorker}); err != nil {
			b.Fatal(err)
		}
		rb.engines = append(rb.engines, e)
		hosts.Add(1)
		go func() {
			defer hosts.Done()
			for ctx.Err() == nil {
				cs, err := e.Host().Pull(ctx, flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 16, Timeout: 100 * time.Millisecond})
				if err != nil {
					return
				}
				now := time.Now()
				rb.mu.Lock()
				for _, c := range cs {
					rb.starts = append(rb.starts, callStart{run: c.RunID, step: c.StepKey, at: now})
				}
				rb.mu.Unlock()
				for _, c := range cs {
					time.AfterFunc(call, func() { _ = e.Host().Complete(c.ID, flowtype.ToolResult{Output: map[string]any{"ok": true}}) })
				}
			}
		}()
	}
	b.Cleanup(func() { stop(); hosts.Wait() }) // before the engines close
	return rb
}

// submit starts src on engine i with priority prio and inputs.
func (rb *resBench) submit(i int, src string, prio int, in map[string]any) string {
	rb.b.Helper()
	id, err := rb.engines[i].Submit(context.Background(), engine.StartRequest{Spec: benchSpec(rb.b, src), Priority: &prio, Inputs: in})
	if err != nil {
		rb.b.Fatal(err)
	}
	return id
}

// waiting is the number of steps waiting for houdini: in the database's queue (PostgreSQL),
// else in the engine's.
func (rb *resBench) waiting() int {
	rb.b.Helper()
	ctx := context.Background()
	if rb.db != "" {
		conn, err := pgx.Connect(ctx, rb.db)
		if err != nil {
			rb.b.Fatal(err)
		}
		defer conn.Close(ctx)
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_waiters`).Scan(&n); err != nil {
			rb.b.Fatal(err)
		}
		return n
	}
	info, err := rb.engines[0].Resources(ctx)
	if err != nil {
		rb.b.Fatal(err)
	}
	return len(info.Resources[0].Queue)
}

// until polls cond every 2 ms for at most 30 s.
func (rb *resBench) until(what string, cond func() bool, state ...func() string) {
	rb.b.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			for _, f := range state {
				what += ": " + f()
			}
			rb.b.Fatalf("timed out waiting for %s", what)
		}
	}
}

// grantedBefore tracks which holders of houdini were granted before run id's step entered the
// queue. On PostgreSQL one snapshot of the database does (the step's waiter row and the slots
// in one statement: grants are transactions). On SQLite the listing's holders are the store's,
// taken a moment after the engine's scheduler granted them, so every poll until the step starts
// collects the holders whose grant time is not after the step's arrival in the queue (both on
// the engine's clock).
type grantedBefore struct {
	rb      *resBench
	id      string
	queued  bool
	since   time.Time // SQLite: when the step started to wait
	holders map[string]bool
}

// poll looks once (on PostgreSQL, until the step was seen waiting).
func (g *grantedBefore) poll() {
	rb := g.rb
	rb.b.Helper()
	ctx := context.Background()
	if g.holders == nil {
		g.holders = map[string]bool{}
	}
	if rb.db != "" {
		if g.queued {
			return
		}
		conn, err := pgx.Connect(ctx, rb.db)
		if err != nil {
			rb.b.Fatal(err)
		}
		defer conn.Close(ctx)
		var holders []string
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resource_waiters WHERE run_id = $1),
			array(SELECT run_id || '/' || label FROM resource_slots)`, g.id).Scan(&g.queued, &holders); err != nil {
			rb.b.Fatal(err)
		}
		if g.queued {
			for _, h := range holders {
				g.holders[h] = true
			}
		}
		return
	}
	info, err := rb.engines[0].Resources(ctx)
	if err != nil {
		rb.b.Fatal(err)
	}
	r := info.Resources[0]
	for _, q := range r.Queue {
		if strings.HasPrefix(q.Label, g.id+"/") && !g.queued {
			g.queued, g.since = true, q.Since
		}
	}
	if !g.queued {
		return
	}
	for _, h := range r.Holders {
		if !h.Since.After(g.since) {
			g.holders[h.RunID+"/"+h.StepKey] = true
		}
	}
}

// count is the number of calls that reached their hosts.
func (rb *resBench) count() int {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	return len(rb.starts)
}

// started returns when run id's first call reached its host (zero: not yet).
func (rb *resBench) started(id string) time.Time {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	for _, s := range rb.starts {
		if s.run == id {
			return s.at
		}
	}
	return time.Time{}
}

// finish cancels runs (those still going) and waits for every run of ids to end.
func (rb *resBench) finish(cancel []string, ids ...string) {
	rb.b.Helper()
	ctx := context.Background()
	for _, id := range cancel {
		for _, e := range rb.engines {
			_ = e.Cancel(ctx, id, "benchmark over")
		}
	}
	for _, id := range append(cancel, ids...) {
		for _, e := range rb.engines {
			if info, err := e.Status(ctx, id); err == nil && !info.Status.Terminal() {
				if _, err := e.Wait(ctx, id, 30*time.Second); err != nil {
					rb.b.Fatalf("run %s: %v", id, err)
				}
			}
		}
	}
	var last *engine.ResourcesInfo
	rb.until("every unit given back and nobody waiting", func() bool {
		info, err := rb.engines[0].Resources(ctx)
		last = info
		return err == nil && info.Resources[0].InUse == 0 && rb.waiting() == 0
	}, func() string { return fmt.Sprintf("%+v; %d waiting", last, rb.waiting()) })
	rb.mu.Lock()
	rb.starts = nil
	rb.mu.Unlock()
}

const resForeach = `
name: shots
fair_share: "{{inputs.show}}"
inputs: { show: string, items: array }
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 128
    steps:
      - { id: cook, tool: cook, args: { n: "{{item}}" }, resources: { houdini: 1 } }
`

const resOne = `
name: urgent
steps:
  - { id: cook, tool: cook, resources: { houdini: 1 } }
`

// BenchmarkResourcePriority: 50 low-priority items wait for houdini (limit 1, 50 ms calls) on
// one engine with a SQLite file; a run of priority 10 is submitted behind them. It reports how
// many low items started after its submission and before it (lows-after, the worst of b.N), how
// many of those did not hold their unit yet when it entered the queue (lows-after-queued; goal
// 0), and its wait from submission to its call (high-wait-ms, the worst).
func BenchmarkResourcePriority(b *testing.B) { benchResourcePriority(b, false) }

// BenchmarkPGResourcePriority: the same on PostgreSQL, the 50 items spread over two engines
// (25 each) and the high-priority run submitted on the second: one queue across engines.
func BenchmarkPGResourcePriority(b *testing.B) { benchResourcePriority(b, true) }

func benchResourcePriority(b *testing.B, pg bool) {
	n := 1
	if pg {
		n = 2
	}
	const limit, lows = 1, 50
	rb := newResBench(b, pg, n, limit, 50*time.Millisecond)
	worstAfter, worstQueued, worstWait := 0, 0, time.Duration(0)
	b.ResetTimer()
	for range b.N {
		var lowRuns []string
		for i := range n {
			lowRuns = append(lowRuns, rb.submit(i, resForeach, 0, map[string]any{"show": fmt.Sprintf("low%d", i), "items": numbers(lows / n)}))
		}
		rb.until("the low items in the queue", func() bool { return rb.waiting()+rb.count() == lows })
		submitted := time.Now()
		high := rb.submit(n-1, resOne, 10, nil)
		before := &grantedBefore{rb: rb, id: high}
		rb.until("the high-priority run's call", func() bool {
			before.poll()
			return !rb.started(high).IsZero()
		})
		at := rb.started(high)
		after, afterQueued := 0, 0
		rb.mu.Lock()
		for _, s := range rb.starts {
			if s.run != high && s.at.After(submitted) && s.at.Before(at) {
				after++
				if before.queued && !before.holders[s.run+"/"+s.step] {
					afterQueued++
				}
			}
		}
		rb.mu.Unlock()
		worstAfter, worstQueued, worstWait = max(worstAfter, after), max(worstQueued, afterQueued), max(worstWait, at.Sub(submitted))
		rb.finish(lowRuns, high)
	}
	b.StopTimer()
	b.ReportMetric(float64(worstAfter), "lows-after")
	b.ReportMetric(float64(worstQueued), "lows-after-queued")
	b.ReportMetric(float64(worstWait.Microseconds())/1e3, "high-wait-ms")
}

// BenchmarkResourceFairShare: shows A (100 items) and B (10 items) share houdini (limit 2,
// 50 ms calls) on one engine with a SQLite file; B is submitted once A's items wait. It reports
// B's time from submission to its end against B's alone, just before (ratio, the worst of b.N,
// and median-ratio; goal about 2: fair turns give B every other unit).
func BenchmarkResourceFairShare(b *testing.B) { benchResourceFairShare(b, false) }

// BenchmarkPGResourceFairShare: the same on PostgreSQL, A on one engine and B on another.
func BenchmarkPGResourceFairShare(b *testing.B) { benchResourceFairShare(b, true) }

func benchResourceFairShare(b *testing.B, pg bool) {
	n, on := 1, 0
	if pg {
		n, on = 2, 1
	}
	const limit = 2
	rb := newResBench(b, pg, n, limit, 50*time.Millisecond)
	timeB := func() (time.Duration, string) {
		t := time.Now()
		id := rb.submit(on, resForeach, 0, map[string]any{"show": "B", "items": numbers(10)})
		<-rb.engines[on].RunDone(id)
		d := time.Since(t)
		if info, err := rb.engines[on].Status(context.Background(), id); err != nil || info.Status != run.StatusCompleted {
			b.Fatalf("B's run: %+v, %v", info, err)
		}
		return d, id
	}
	var ratios []float64
	var alones, shareds []time.Duration
	b.ResetTimer()
	for range b.N {
		alone, b1 := timeB()
		rb.finish(nil, b1)
		a := rb.submit(0, resForeach, 0, map[string]any{"show": "A", "items": numbers(100)})
		rb.until("A's items in the queue", func() bool { return rb.waiting()+rb.count() == 100 })
		shared, b2 := timeB()
		rb.finish([]string{a}, b2)
		ratios = append(ratios, shared.Seconds()/alone.Seconds())
		alones, shareds = append(alones, alone), append(shareds, shared)
	}
	b.StopTimer()
	b.ReportMetric(slices.Max(ratios), "ratio")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
	b.ReportMetric(float64(slices.Max(alones).Microseconds())/1e3, "alone-ms")
	b.ReportMetric(float64(slices.Max(shareds).Microseconds())/1e3, "shared-ms")
}
