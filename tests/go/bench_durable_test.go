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

// The durable figures of docs/design/performance.md: the same workloads on a SQLite file, every step
// durable.

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
//
// It also reports how much the database grows per 1,000 steps (step rows, events, indexes):
// the file's size after a close (which checkpoints the WAL into it and removes the WAL) before
// and after the timed runs. Counting the live WAL instead would measure where its reuse cycle
// happened to stand, not growth.
func BenchmarkDurableSequentialSteps(b *testing.B) {
	const steps = 200
	var sb strings.Builder
	sb.WriteString("name: seq\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&sb, "  - { id: s%d, tool: flow__echo, args: { n: 1 } }\n", i)
	}
	db := filepath.Join(b.TempDir(), "flow.db")
	open := func() *engine.Engine {
		eng, err := engine.Open(context.Background(), engine.Config{DB: db, StallAfterSecs: -1, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		return eng
	}
	eng := open()
	s := benchSpec(b, sb.String())
	benchRun(b, eng, s, nil) // warm up: schema, caches
	if err := eng.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	before := dbSize(db)
	eng = open()
	defer eng.Close(context.Background())
	var ids []string
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ids = append(ids, benchRun(b, eng, s, nil))
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*steps)/1000, "µs/step")
	b.StopTimer()
	checkCompleted(b, eng, ids)
	if err := eng.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	if _, err := os.Stat(db + "-wal"); err == nil {
		b.Fatalf("%s-wal is still there after Close: the size would not count it", db)
	}
	b.ReportMetric(float64(dbSize(db)-before)/float64(b.N*steps)*1000/1024, "KiB/1k-steps")
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
