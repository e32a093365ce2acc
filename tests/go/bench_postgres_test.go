package gotest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The PostgreSQL figures of docs/design/performance.md, beside the SQLite ones of bench_durable_test.go:
// the same workloads on a database of a throwaway cluster (internal/pgtest: initdb on this
// machine, fsync off), every step durable. Without initdb they skip with a line that says so
// (scripts/bench.sh prints it in place of the rows).

// pgBenchFanout is the fan-out workflow of the PostgreSQL rows (as BenchmarkDurableFanout's).
const pgBenchFanout = `
name: fanout
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 256
    steps:
      - { id: s, tool: flow__echo, args: { v: "{{item}}" } }
`

// pgBenchEngines opens n engines on one new database of the package's cluster.
func pgBenchEngines(b *testing.B, n int) []*engine.Engine {
	b.Helper()
	db := pgtest.DB(b)
	engs := make([]*engine.Engine, n)
	for i := range engs {
		eng, err := engine.Open(context.Background(), engine.Config{DB: db, StallAfterSecs: -1, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = eng.Close(context.Background()) })
		engs[i] = eng
	}
	return engs
}

// BenchmarkPGSequentialSteps: per-step latency of sequential no-op steps on PostgreSQL, each
// step's completion committed before the next starts.
func BenchmarkPGSequentialSteps(b *testing.B) {
	const steps = 200
	var sb strings.Builder
	sb.WriteString("name: seq\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&sb, "  - { id: s%d, tool: flow__echo, args: { n: 1 } }\n", i)
	}
	eng := pgBenchEngines(b, 1)[0]
	s := benchSpec(b, sb.String())
	benchRun(b, eng, s, nil) // warm up: connections, caches
	var ids []string
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ids = append(ids, benchRun(b, eng, s, nil))
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*steps)/1000, "µs/step")
	b.StopTimer()
	checkCompleted(b, eng, ids)
}

// BenchmarkPGFanout: throughput of a wide foreach (5,000 no-op steps, concurrency 256) on
// PostgreSQL, one engine.
func BenchmarkPGFanout(b *testing.B) { pgBenchFanoutEngines(b, 1) }

// BenchmarkPGFanout3: three engines (in this process) on one database, each running the fan-out
// runs at the same time; steps/s is the sum over the three. Goal ≥ 20,000 steps/s.
func BenchmarkPGFanout3(b *testing.B) { pgBenchFanoutEngines(b, 3) }

func pgBenchFanoutEngines(b *testing.B, n int) {
	const items = 5000
	engs := pgBenchEngines(b, n)
	s := benchSpec(b, pgBenchFanout)
	in := map[string]any{"items": numbers(items)}
	for _, eng := range engs {
		benchRun(b, eng, s, map[string]any{"items": numbers(10)}) // warm up
	}
	ids := make([][]string, n)
	errs := make([]error, n)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i, eng := range engs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range b.N {
				id, err := eng.Submit(context.Background(), engine.StartRequest{Spec: s, Inputs: in})
				if err != nil {
					errs[i] = err
					return
				}
				<-eng.RunDone(id)
				ids[i] = append(ids[i], id)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(n*b.N*items)/time.Since(start).Seconds(), "steps/s")
	b.StopTimer()
	for i, eng := range engs {
		if errs[i] != nil {
			b.Fatalf("engine %d: %v", i, errs[i])
		}
		checkCompleted(b, eng, ids[i])
	}
}

// BenchmarkPGTakeover: how soon another engine continues the run of an orchestrator that died.
// Each iteration starts two engine processes (the cluster tests' helper, lease 1 s) on a new
// database; the first submits `seq` and is SIGKILLed while it runs its first step; the time is
// measured from the run's lease expiring (its lease_until, the server's clock on this machine)
// to the other engine's claim (its interrupted event: the first write of the run) and to the
// first step it starts of the resumed run. Reported: the mean and the worst over the iterations.
// Goal: the step within 1 s of the expiry.
func BenchmarkPGTakeover(b *testing.B) { benchContinued(b, false) }

// BenchmarkPGHandover is BenchmarkPGTakeover with the orchestrator closed (docs/operations/cluster.md,
// "Closing an engine") instead of killed: from the close to the other engine's claim and first
// step, whatever the lease.
func BenchmarkPGHandover(b *testing.B) { benchContinued(b, true) }

// benchContinued measures how soon another engine continues a run whose orchestrator stopped
// while it ran its first step: killed (SIGKILL; timed from the lease's expiry) or, with
// closed, closed (timed from the close).
func benchContinued(b *testing.B, closed bool) {
	var claim, step []time.Duration
	for range b.N {
		b.StopTimer()
		db := pgtest.DB(b)
		calls := filepath.Join(b.TempDir(), "calls")
		nodes := startNodes(b, db, calls, [][]string{nil, nil})
		a := nodes[0]
		id := strings.TrimPrefix(a.do("submit seq", "run "), "run ")
		deadline := time.Now().Add(10 * time.Second)
		for {
			if data, _ := os.ReadFile(calls); strings.Contains(string(data), a.id+" s1 ") {
				break // A runs s1
			}
			if time.Now().After(deadline) {
				b.Fatal("the first step never started")
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.StartTimer()
		var from time.Time // the lease's expiry, or the close
		if closed {
			from = time.Now()
			a.do("quit", "closed")
		} else {
			if err := a.cmd.Process.Kill(); err != nil { // SIGKILL
				b.Fatal(err)
			}
			_ = a.cmd.Wait()
			from = leaseUntil(b, db, id)
		}
		v := viewer(b, db)
		var claimedAt, steppedAt time.Time
		for claimedAt.IsZero() || steppedAt.IsZero() {
			if time.Now().After(from.Add(10 * time.Second)) {
				b.Fatalf("run %s not continued 10 s after its engine stopped (closed %v)", id, closed)
			}
			time.Sleep(5 * time.Millisecond)
			evs, err := v.EventsSince(0, 0)
			if err != nil {
				b.Fatal(err)
			}
			resumed := false
			for _, ev := range evs {
				if ev.RunID != id {
					continue
				}
				switch {
				case ev.Type == run.EventInterrupted && strings.Contains(string(ev.Detail), nodes[1].id):
					claimedAt = ev.Time
				case ev.Type == run.EventWorkflowResumed:
					resumed = true
				case resumed && ev.Type == run.EventStepEnter && steppedAt.IsZero():
					steppedAt = ev.Time
				}
			}
		}
		b.StopTimer()
		claim = append(claim, claimedAt.Sub(from))
		step = append(step, steppedAt.Sub(from))
		for _, nd := range nodes[1:] {
			nd.do("quit", "closed")
		}
		_ = v.Close(context.Background())
		b.StartTimer()
	}
	stats := func(ds []time.Duration) (mean, worst float64) {
		for _, d := range ds {
			ms := float64(d.Microseconds()) / 1000
			mean += ms / float64(len(ds))
			worst = max(worst, ms)
		}
		return mean, worst
	}
	cm, cw := stats(claim)
	sm, sw := stats(step)
	b.ReportMetric(cm, "claim-mean-ms")
	b.ReportMetric(cw, "claim-max-ms")
	b.ReportMetric(sm, "step-mean-ms")
	b.ReportMetric(sw, "step-max-ms")
}

// leaseUntil returns the run's lease_until (the server's clock).
func leaseUntil(b *testing.B, db, id string) time.Time {
	b.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	var at time.Time
	if err := conn.QueryRow(context.Background(), `SELECT lease_until FROM workflows WHERE id = $1`, id).Scan(&at); err != nil {
		b.Fatal(err)
	}
	return at
}
