package gotest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
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

// rerunProfile starts a CPU profile of the rerun alone into the file DCC_FLOW_RERUN_CPUPROFILE
// names (go test's -cpuprofile covers the first run too); the function it returns stops it.
// Without the variable it does nothing.
func rerunProfile(b *testing.B) func() {
	path := os.Getenv("DCC_FLOW_RERUN_CPUPROFILE")
	if path == "" {
		return func() {}
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
