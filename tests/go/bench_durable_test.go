package gotest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
)

// The durable figures of DESIGN §10: the same workloads on a SQLite file, every step durable.

func benchEngineDB(b *testing.B) (*engine.Engine, string) {
	b.Helper()
	db := filepath.Join(b.TempDir(), "flow.db")
	eng, err := engine.Open(context.Background(), engine.Config{DB: db, StallAfterSecs: -1, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Close(context.Background()) })
	return eng, db
}

// dbSize is the size of the database file and its WAL.
func dbSize(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal"} {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// BenchmarkDurableSequentialSteps: per-step overhead of sequential no-op steps on a SQLite file,
// each step's completion committed before the next starts. Goal ≤ 80 µs/step.
func BenchmarkDurableSequentialSteps(b *testing.B) {
	const steps = 200
	var sb strings.Builder
	sb.WriteString("name: seq\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&sb, "  - { id: s%d, tool: flow__echo, args: { n: 1 } }\n", i)
	}
	eng, db := benchEngineDB(b)
	s := benchSpec(b, sb.String())
	ids := []string{benchRun(b, eng, s, nil)}
	before := dbSize(db)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ids = append(ids, benchRun(b, eng, s, nil))
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*steps)/1000, "µs/step")
	b.ReportMetric(float64(dbSize(db)-before)/float64(b.N*steps)*1000/1024, "KiB/1k-steps")
	b.StopTimer()
	checkCompleted(b, eng, ids)
}

// BenchmarkDurableFanout: throughput of a wide foreach on a SQLite file (group commit).
// Goal ≥ 50,000 steps/s.
func BenchmarkDurableFanout(b *testing.B) {
	const items = 5000
	eng, _ := benchEngineDB(b)
	s := benchSpec(b, `
name: fanout
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 256
    steps:
      - { id: s, tool: flow__echo, args: { v: "{{item}}" } }
`)
	in := map[string]any{"items": numbers(items)}
	var ids []string
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ids = append(ids, benchRun(b, eng, s, in))
	}
	b.ReportMetric(float64(b.N*items)/time.Since(start).Seconds(), "steps/s")
	b.StopTimer()
	checkCompleted(b, eng, ids)
}
