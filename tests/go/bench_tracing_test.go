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

// BenchmarkSequentialNoopStepsTraced is BenchmarkSequentialNoopSteps with tracing on
// (docs/guide/tracing.md): every step is an attempt span and a call span, exported to an
// OTLP/HTTP endpoint on loopback that reads and discards them. Its µs/step less
// BenchmarkSequentialNoopSteps's is the cost of tracing a step (goal ≤ 5 µs); the spans the
// export queue dropped are reported too (dropped-spans: the exporter, on the other core, fell
// behind; dropping costs the run nothing).
func BenchmarkSequentialNoopStepsTraced(b *testing.B) {
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
	eng, err := engine.Open(context.Background(), engine.Config{StallAfterSecs: -1, Seed: 1,
		Tracing: &engine.TracingConfig{Enabled: true, Endpoint: sink.URL}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Close(context.Background()) })
	s := benchSpec(b, sb.String())
	ids := []string{benchRun(b, eng, s, nil)} // compiles and caches the plan
	before := eng.TracingStats()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ids = append(ids, benchRun(b, eng, s, nil))
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*steps)/1000, "µs/step")
	b.StopTimer()
	after := eng.TracingStats()
	b.ReportMetric(float64(after.Dropped-before.Dropped)/float64(b.N*(2*steps+1)), "dropped-share")
	checkCompleted(b, eng, ids)
}
