package gotest

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// The benchmarks behind `make bench` (scripts/bench.sh runs each once, in its own process, and
// prints the figures table). Each reports a figure of docs/design/performance.md as a custom metric.

func benchEngine(b *testing.B) *engine.Engine {
	b.Helper()
	eng, err := engine.Open(context.Background(), engine.Config{StallAfterSecs: -1, Seed: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = eng.Close(context.Background()) })
	return eng
}

func benchSpec(b *testing.B, text string) *spec.Spec {
	b.Helper()
	s, err := spec.ParseString(text)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		b.Fatal(err)
	}
	return s
}

// benchRun runs a spec and waits for its terminal record (RunDone), then checks it completed.
// The timing the benchmarks report covers Submit to RunDone; the status check is outside it.
func benchRun(b *testing.B, eng *engine.Engine, s *spec.Spec, inputs map[string]any) string {
	b.Helper()
	id, err := eng.Submit(context.Background(), engine.StartRequest{Spec: s, Inputs: inputs})
	if err != nil {
		b.Fatal(err)
	}
	<-eng.RunDone(id)
	return id
}

func checkCompleted(b *testing.B, eng *engine.Engine, ids []string) {
	b.Helper()
	runs, err := eng.Runs(context.Background(), engine.RunFilter{Statuses: []run.Status{run.StatusCompleted}})
	if err != nil {
		b.Fatal(err)
	}
	done := map[string]bool{}
	for _, r := range runs {
		done[r.ID] = true
	}
	for _, id := range ids {
		if !done[id] {
			info, _ := eng.Status(context.Background(), id)
			b.Fatalf("run %s did not complete: %+v", id, info)
		}
	}
}

// BenchmarkSequentialNoopSteps: executor overhead per sequential no-op step (flow__echo with
// literal args), in-memory store, events and step records included. Goal ≤ 2 µs/step.
func BenchmarkSequentialNoopSteps(b *testing.B) {
	const steps = 1000
	var sb strings.Builder
	sb.WriteString("name: seq\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&sb, "  - { id: s%d, tool: flow__echo, args: { n: 1 } }\n", i)
	}
	eng := benchEngine(b)
	s := benchSpec(b, sb.String())
	ids := []string{benchRun(b, eng, s, nil)} // compiles and caches the plan
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		ids = append(ids, benchRun(b, eng, s, nil))
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*steps)/1000, "µs/step")
	b.StopTimer()
	checkCompleted(b, eng, ids)
}

// BenchmarkFanout: throughput of a foreach of no-op steps with concurrency 64.
func BenchmarkFanout(b *testing.B) {
	const items = 20000
	eng := benchEngine(b)
	s := benchSpec(b, `
name: fanout
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 64
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

// BenchmarkForeach100k: a foreach of 100,000 items (concurrency 8, one no-op step each), from
// start to the final run record. Goal ≤ 2 s and peak RSS ≤ 200 MB: run it alone in its process
// (-test.bench '^BenchmarkForeach100k$' -test.benchtime 1x) for the RSS figure to mean it.
func BenchmarkForeach100k(b *testing.B) {
	const items = 100000
	eng := benchEngine(b)
	s := benchSpec(b, `
name: big
steps:
  - { id: list, tool: flow__echo, args: { n: 100000 } }
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 8
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
	b.ReportMetric(time.Since(start).Seconds()/float64(b.N), "s/run")
	b.ReportMetric(peakRSSMB(), "peak-RSS-MB")
	b.StopTimer()
	checkCompleted(b, eng, ids)
	if runs, _ := eng.Runs(context.Background(), engine.RunFilter{Limit: 1}); runs[0].Progress.Completed != items+2 {
		b.Fatalf("progress %+v", runs[0].Progress)
	}
}

// BenchmarkCancel1000InFlight: latency from Cancel to the terminal record of a run with 1,000
// step instances in flight (host calls nobody answers). Goal p99 ≤ 5 ms.
func BenchmarkCancel1000InFlight(b *testing.B) {
	const inFlight = 1000
	eng := benchEngine(b)
	if err := eng.RegisterTool(flowtype.ToolInfo{Name: "hold"}); err != nil {
		b.Fatal(err)
	}
	s := benchSpec(b, `
name: held
steps:
  - id: each
    kind: foreach
    items: "{{inputs.items}}"
    concurrency: 1000
    steps:
      - { id: s, tool: hold }
`)
	in := map[string]any{"items": numbers(inFlight)}
	ctx := context.Background()
	trials := max(b.N, 50)
	var lat []time.Duration
	b.ResetTimer()
	for range trials {
		id, err := eng.Submit(ctx, engine.StartRequest{Spec: s, Inputs: in})
		if err != nil {
			b.Fatal(err)
		}
		for eng.Host().Pending() < inFlight {
			time.Sleep(100 * time.Microsecond)
		}
		start := time.Now()
		if err := eng.Cancel(ctx, id, "bench"); err != nil {
			b.Fatal(err)
		}
		<-eng.RunDone(id)
		lat = append(lat, time.Since(start))
		if info, err := eng.Status(ctx, id); err != nil || info.Status != run.StatusCancelled {
			b.Fatalf("%v %+v", err, info)
		}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// BenchmarkHostToolRoundTrip: a sequential flow of host tool steps answered by a Go host that
// completes each call and pulls the next, as the C ABI does for Python (dccflow_calls_complete
// with "next"): the Go part of the ≤ 25 µs Python round trip.
func BenchmarkHostToolRoundTrip(b *testing.B) {
	const steps = 1000
	var sb strings.Builder
	sb.WriteString("name: host\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&sb, "  - { id: s%d, tool: py__step, args: { n: %d } }\n", i, i)
	}
	eng := benchEngine(b)
	if err := eng.RegisterTool(flowtype.ToolInfo{Name: "py__step"}); err != nil {
		b.Fatal(err)
	}
	s := benchSpec(b, sb.String())
	ctx := context.Background()
	host := eng.Host()
	out := flowtype.ToolResult{OutputJSON: []byte(`{"ok":true}`)}
	puller, err := host.OpenPuller("")
	if err != nil {
		b.Fatal(err)
	}
	defer host.ClosePuller(puller)
	var ids []string
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		id, err := eng.Submit(ctx, engine.StartRequest{Spec: s})
		if err != nil {
			b.Fatal(err)
		}
		pull := flowtype.PullRequest{Lanes: []string{flowtype.LaneMain}, Max: 1, Timeout: time.Second, Puller: puller}
		calls, err := host.Pull(ctx, pull)
		for n := 1; err == nil && len(calls) == 1; n++ {
			if err = host.Complete(calls[0].ID, out); err != nil || n == steps {
				break
			}
			calls, err = host.Pull(ctx, pull)
		}
		if err != nil {
			b.Fatal(err)
		}
		<-eng.RunDone(id)
		ids = append(ids, id)
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*steps)/1000, "µs/step")
	b.StopTimer()
	checkCompleted(b, eng, ids)
}

// BenchmarkLockedThreadHandoff is the floor under a Python tool step, without the engine: a
// goroutine locked to its OS thread (as a cgo callback from a Python thread is) hands a value to
// an ordinary goroutine and waits for the answer, as complete-and-next does for each step. Each
// round trip parks and wakes the locked thread twice (runtime.stoplockedm / startlockedm: an OS
// thread switch each way), whatever the engine does in between.
func BenchmarkLockedThreadHandoff(b *testing.B) {
	ping, pong := make(chan int), make(chan int)
	go func() {
		for v := range ping {
			pong <- v + 1
		}
	}()
	defer close(ping)
	done := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for i := range b.N {
			ping <- i
			if <-pong != i+1 {
				panic("lost a handoff")
			}
		}
	}()
	<-done
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N)/1000, "µs/round-trip")
}

func numbers(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = float64(i)
	}
	return out
}
