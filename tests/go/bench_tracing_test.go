package gotest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
)

// BenchmarkTracingOverhead is the cost of tracing a step (docs/guide/tracing.md; goal ≤ 5
// µs/step): runs of 1,000 sequential no-op steps (BenchmarkSequentialNoopSteps's) on two engines,
// one with tracing off and one with tracing on exporting to an OTLP/HTTP endpoint on loopback that
// reads and discards the requests, one run of each in turn so that the load of the machine
// weighs on both alike. Reported per step: the wall time of each (off-µs/step, on-µs/step) and
// their difference (overhead-µs/step); and the CPU time of the process (getrusage; -1 where
// missing) during each, the traced run's counted until its spans are exported
// (off-cpu-µs/step, on-cpu-µs/step, overhead-cpu-µs/step: what tracing costs the machine,
// the export goroutine's work included, which a second core hides from the wall time).
// dropped-share is the share of spans the export queue dropped (none expected).
func BenchmarkTracingOverhead(b *testing.B) {
	const steps = 1000
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer sink.Close()
	var sb strings.Builder
	sb.WriteString("name: seq\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&sb, "  - { id: s%d, tool: flow__echo, args: { n: 1 } }\n", i)
	}
	s := benchSpec(b, sb.String())
	off := benchEngine(b)
	on, err := engine.Open(context.Background(), engine.Config{StallAfterSecs: -1, Seed: 1,
		Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.URL, QueueSize: 8 * steps}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = on.Close(context.Background()) })
	ctx := context.Background()
	offIDs := []string{benchRun(b, off, s, nil)} // compile and cache the plans
	onIDs := []string{benchRun(b, on, s, nil)}
	_ = on.FlushTraces(ctx)
	before := on.TracingStats()
	var offWall, onWall, offCPU, onCPU time.Duration
	b.ResetTimer()
	for range b.N {
		c0, t0 := cpuTime(), time.Now()
		offIDs = append(offIDs, benchRun(b, off, s, nil))
		offWall += time.Since(t0)
		c1, t1 := cpuTime(), time.Now()
		offCPU += c1 - c0
		onIDs = append(onIDs, benchRun(b, on, s, nil))
		onWall += time.Since(t1)
		if err := on.FlushTraces(ctx); err != nil {
			b.Fatal(err)
		}
		onCPU += cpuTime() - c1
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N*steps) / 1000 }
	b.ReportMetric(per(offWall), "off-µs/step")
	b.ReportMetric(per(onWall), "on-µs/step")
	b.ReportMetric(per(onWall-offWall), "overhead-µs/step")
	if cpuTime() >= 0 {
		b.ReportMetric(per(offCPU), "off-cpu-µs/step")
		b.ReportMetric(per(onCPU), "on-cpu-µs/step")
		b.ReportMetric(per(onCPU-offCPU), "overhead-cpu-µs/step")
	}
	after := on.TracingStats()
	b.ReportMetric(float64(after.Dropped-before.Dropped)/float64(b.N*(2*steps+1)), "dropped-share")
	checkCompleted(b, off, offIDs)
	checkCompleted(b, on, onIDs)
}
