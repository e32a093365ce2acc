package gotest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The PostgreSQL figures of docs/performance.md, beside the SQLite ones of bench_durable_test.go:
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
