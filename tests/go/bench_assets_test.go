package gotest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
)

// The asset figures of docs/design/performance.md (docs/guide/assets.md): the content cache of an
// unchanged foreach against its first run in the same process, and a 10-deep lineage query.

// serveSleeping answers the host calls of lane on workers goroutines, each after sleep, with the
// output file of the call's "out" argument written (and reported) when it has one.
func serveSleeping(b *testing.B, eng *engine.Engine, workers int, sleep time.Duration) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	host := eng.Host()
	for range workers {
		puller, err := host.OpenPuller("")
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer host.ClosePuller(puller)
			pull := flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 50 * time.Millisecond, Puller: puller}
			for ctx.Err() == nil {
				calls, err := host.Pull(ctx, pull)
				if err != nil {
					return
				}
				for _, c := range calls {
					time.Sleep(sleep)
					res := flowtype.ToolResult{OutputJSON: []byte(`{"ok":true}`)}
					if out, ok := c.Args["out"].(string); ok {
						_ = os.WriteFile(out, []byte(out), 0o644)
						res.Files = []flowtype.FileUse{{Path: out, Role: flowtype.FileWrite}}
					}
					_ = host.Complete(c.ID, res)
				}
			}
		}()
	}
	b.Cleanup(func() { cancel(); wg.Wait() })
}

// BenchmarkCacheForeach1000: a foreach of 1,000 items (concurrency 8) whose calls take 20 ms,
// each reading its own input file and writing its own output, on a SQLite file; then the same
// run again with nothing changed, every item served from the content cache. Reports both and
// their ratio. Goal: the rerun at least 20× faster.
func BenchmarkCacheForeach1000(b *testing.B) { benchCacheForeach(b, 1000) }

// BenchmarkCacheForeach100: the same with 100 items (a tenth of the first run's calls, and of
// the rerun's lookups).
func BenchmarkCacheForeach100(b *testing.B) { benchCacheForeach(b, 100) }

func benchCacheForeach(b *testing.B, items int) {
	dir := b.TempDir()
	for i := range items {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("in%04d.exr", i)), []byte(fmt.Sprint("frame ", i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	list := make([]string, items)
	for i := range list {
		list[i] = fmt.Sprintf("%q", fmt.Sprintf("%04d", i)) // a string: YAML reads 0001 as a number
	}
	text := fmt.Sprintf(`
name: frames
steps:
  - id: each
    kind: foreach
    items: [%s]
    concurrency: 8
    steps:
      - id: frame
        tool: frame
        args: {out: "%s/out{{item}}.exr"}
        reads: "%s/in{{item}}.exr"
        cache: true
`, strings.Join(list, ", "), filepath.ToSlash(dir), filepath.ToSlash(dir))
	var first, rerun time.Duration
	for range b.N {
		eng, _ := benchEngineDB(b)
		if err := eng.RegisterTool(flowtype.ToolInfo{Name: "frame", Lane: flowtype.LaneWorker}); err != nil {
			b.Fatal(err)
		}
		serveSleeping(b, eng, 8, 20*time.Millisecond)
		s := benchSpec(b, text)
		start := time.Now()
		id1 := benchRun(b, eng, s, nil)
		first += time.Since(start)
		stopProfile := rerunProfile(b)
		start = time.Now()
		id2 := benchRun(b, eng, s, nil)
		rerun += time.Since(start)
		stopProfile()
		checkCompleted(b, eng, []string{id1, id2})
		if st, _ := eng.Steps(context.Background(), id2); len(st) > 0 {
			for _, x := range st {
				if x.Kind == "tool" && !x.Cached {
					why := ""
					if evs, err := eng.PollEvents(context.Background(), engine.EventQuery{RunID: id2, Max: 100000}, 0); err == nil {
						for _, e := range evs {
							if e.StepKey == x.Key && e.Type == "step_enter" {
								why = string(e.Detail)
							}
						}
					}
					b.Fatalf("%s of the rerun was not served from the cache: %s", x.Key, why)
				}
			}
		}
	}
	b.ReportMetric(first.Seconds()/float64(b.N), "first-s")
	b.ReportMetric(rerun.Seconds()/float64(b.N), "rerun-s")
	b.ReportMetric(first.Seconds()/rerun.Seconds(), "x-faster")
}

// rerunProfiles counts the profiles rerunProfile started.
var rerunProfiles int

// rerunProfile starts a CPU profile of the rerun alone into the file DCC_FLOW_RERUN_CPUPROFILE
// names (go test's -cpuprofile covers the first run too); the function it returns stops it.
// The reruns after the first go to PATH.2, PATH.3… (`go tool pprof` merges the files it is
// given: one rerun is ~100 ms, too few samples alone). Without the variable it does nothing.
func rerunProfile(b *testing.B) func() {
	path := os.Getenv("DCC_FLOW_RERUN_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	if rerunProfiles++; rerunProfiles > 1 {
		path = fmt.Sprintf("%s.%d", path, rerunProfiles)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }
}

// BenchmarkLineage10Deep: the lineage of a file made by the last of a chain of 10 steps, each
// reading the file the step before wrote, on a SQLite file: ms per query at depth 10.
func BenchmarkLineage10Deep(b *testing.B) {
	const depth = 10
	dir := b.TempDir()
	eng, _ := benchEngineDB(b)
	if err := eng.RegisterTool(flowtype.ToolInfo{Name: "step", Lane: flowtype.LaneWorker}); err != nil {
		b.Fatal(err)
	}
	serveSleeping(b, eng, 1, 0)
	if err := os.WriteFile(filepath.Join(dir, "f0"), []byte("source"), 0o644); err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString("name: chain\nsteps:\n")
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&sb, "  - {id: s%d, tool: step, args: {out: %q}, reads: %q}\n", i, filepath.Join(dir, fmt.Sprint("f", i)), filepath.Join(dir, fmt.Sprint("f", i-1)))
	}
	checkCompleted(b, eng, []string{benchRun(b, eng, benchSpec(b, sb.String()), nil)})
	target := filepath.Join(dir, fmt.Sprint("f", depth))
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		n, err := eng.Lineage(ctx, target, depth)
		if err != nil {
			b.Fatal(err)
		}
		levels := 0
		for m := n.Made; m != nil && len(m.Inputs) > 0; m = m.Inputs[0].Made {
			levels++
		}
		if levels != depth {
			b.Fatalf("lineage %d deep; want %d", levels, depth)
		}
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/query")
}

// BenchmarkFreshEngineCachedOutput: what a cached step whose output is large costs a new
// process — each `dcc-flow run` — and what `dcc-flow stale` costs it. A first engine on a SQLite
// file runs a step (cache: true) whose tool writes DCC_FLOW_BENCH_OUTPUT_MB MiB (default 400);
// 2 s later, fresh engines one after another (the timer stopped while each opens and closes)
// each run it again, served from the cache, or ask Engine.Stale about the output. Reports
// the first fresh run and the median of the 5 after it (and the same for Stale on a database
// of its own): the output's record is racy (hashed as the tool wrote it), so a fresh engine
// reads it once, 2 s or more after it was written, and confirms it in the store; those after it
// trust its stat.
func BenchmarkFreshEngineCachedOutput(b *testing.B) {
	mb := 400
	if v := os.Getenv("DCC_FLOW_BENCH_OUTPUT_MB"); v != "" {
		if _, err := fmt.Sscan(v, &mb); err != nil || mb <= 0 {
			b.Fatalf("DCC_FLOW_BENCH_OUTPUT_MB=%q: want a number of MiB", v)
		}
	}
	const later = 5
	var firstRun, laterRun, firstStale, laterStale []time.Duration
	for range b.N {
		dir := b.TempDir()
		out := filepath.Join(dir, "shot.bin")
		s := benchSpec(b, fmt.Sprintf("name: bake\nsteps:\n  - {id: bake, tool: dcc__bake, args: {out: %q}, cache: true}\n", filepath.ToSlash(out)))
		for _, stale := range []bool{false, true} {
			db := filepath.Join(b.TempDir(), "flow.db")
			open := func(serve bool) *engine.Engine {
				eng, err := engine.Open(context.Background(), engine.Config{DB: db, StallAfterSecs: -1, Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				if err := eng.RegisterTool(flowtype.ToolInfo{Name: "dcc__bake", Lane: flowtype.LaneWorker}); err != nil {
					b.Fatal(err)
				}
				if serve {
					go func() {
						calls, err := eng.Host().Pull(context.Background(), flowtype.PullRequest{Lanes: []string{flowtype.LaneWorker}, Max: 1, Timeout: 10 * time.Second})
						if err != nil || len(calls) == 0 {
							return
						}
						f, err := os.Create(out)
						if err == nil {
							chunk := make([]byte, 1<<20)
							for i := range chunk {
								chunk[i] = byte(i * 7)
							}
							for range mb {
								_, _ = f.Write(chunk)
							}
							err = f.Close()
						}
						res := flowtype.ToolResult{Output: map[string]any{"out": out}, Files: []flowtype.FileUse{{Path: out, Role: flowtype.FileWrite}}}
						if err != nil {
							res = flowtype.ToolResult{Error: &flowtype.ToolError{Kind: "error", Message: err.Error()}}
						}
						_ = eng.Host().Complete(calls[0].ID, res)
					}()
				}
				return eng
			}
			b.StopTimer()
			eng := open(true)
			checkCompleted(b, eng, []string{benchRun(b, eng, s, nil)})
			_ = eng.Close(context.Background())
			fi, err := os.Stat(out)
			if err != nil {
				b.Fatal(err)
			}
			for time.Since(fi.ModTime()) < 2*time.Second+10*time.Millisecond { // past the racy window
				time.Sleep(10 * time.Millisecond)
			}
			var times []time.Duration
			for i := 0; i <= later; i++ {
				eng := open(false)
				b.StartTimer()
				start := time.Now()
				if stale {
					if st, err := eng.Stale(context.Background(), []string{out}); err != nil || len(st) != 0 {
						b.Fatalf("Stale = %+v, %v; want nothing stale", st, err)
					}
				} else {
					id := benchRun(b, eng, s, nil)
					took := time.Since(start)
					if st, err := eng.Steps(context.Background(), id); err != nil || len(st) != 1 || !st[0].Cached {
						b.Fatalf("fresh run %d: steps %+v, %v; want the step served from the cache", i, st, err)
					}
					start = start.Add(time.Since(start) - took) // the check is not timed
				}
				times = append(times, time.Since(start))
				b.StopTimer()
				_ = eng.Close(context.Background())
			}
			rest := append([]time.Duration(nil), times[1:]...)
			slices.Sort(rest)
			if stale {
				firstStale, laterStale = append(firstStale, times[0]), append(laterStale, rest[len(rest)/2])
			} else {
				firstRun, laterRun = append(firstRun, times[0]), append(laterRun, rest[len(rest)/2])
			}
		}
		_ = os.Remove(out)
	}
	ms := func(ds []time.Duration) float64 {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return float64(sum.Microseconds()) / 1000 / float64(len(ds))
	}
	b.ReportMetric(ms(firstRun), "first-run-ms")
	b.ReportMetric(ms(laterRun), "later-run-ms")
	b.ReportMetric(ms(firstStale), "first-stale-ms")
	b.ReportMetric(ms(laterStale), "later-stale-ms")
}
