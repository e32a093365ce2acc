package gotest

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Issue 33, defect 2: a fan-out of sub-workflows had no total bound. Every per-step limit
// held, yet 20 items four levels deep started 168,420 runs, all live at once, and the process
// ran out of memory. A tree of runs (a run started on its own and every run below it) is now
// bounded as a whole: max_tree_runs, max_tree_instances, max_tree_parallel (docs/reference/limits.md).

// fanOut registers the workflows of a chain: level `levels` is a leaf (flow__echo), every level
// above it a foreach over `items` items, `conc` at a time, each item running the next level as
// a sub-workflow. It returns the top level's spec text (topItems items), for a run.
func fanOut(b *testBundle, levels, topItems, items, conc int, onAnyFail string) string {
	b.t.Helper()
	b.register(fmt.Sprintf("name: lvl%d\nsteps:\n  - {id: leaf, tool: flow__echo, args: {v: 1}}\n", levels))
	for k := levels - 1; k >= 1; k-- {
		b.register(fanOutLevel(k, items, conc, onAnyFail))
	}
	return fanOutLevel(0, topItems, conc, onAnyFail)
}

// fanOutLevel is level k of fanOut: a foreach over n items running level k+1.
func fanOutLevel(k, n, conc int, onAnyFail string) string {
	list := make([]string, n)
	for i := range list {
		list[i] = fmt.Sprint(i)
	}
	return fmt.Sprintf("name: lvl%d\nsteps:\n  - id: each\n    kind: foreach\n    items: [%s]\n    concurrency: %d\n    on_any_fail: %s\n"+
		"    steps:\n      - {id: down, kind: workflow, workflow: lvl%d}\n", k, strings.Join(list, ", "), conc, onAnyFail, k+1)
}

// settle waits until no run of the engine is running and the goroutines are back near base.
func settle(b *testBundle, base int) []engine.RunInfo {
	b.t.Helper()
	var runs []engine.RunInfo
	b.waitFor("every run to end", func() bool {
		var err error
		if runs, err = b.eng.Runs(b.ctx, engine.RunFilter{}); err != nil {
			b.t.Fatalf("Runs: %v", err)
		}
		for _, r := range runs {
			if !r.Terminal {
				return false
			}
		}
		return true
	})
	b.waitFor(fmt.Sprintf("the goroutines to return near %d", base), func() bool { return runtime.NumGoroutine() <= base+10 })
	return runs
}

// TestSubflowRedteamTreeRunsLimit: past max_tree_runs no child run starts: the workflow step
// that would start it fails with limit_exceeded naming the setting, and the failure goes up
// as any other (on_any_fail continue lets the siblings finish; the top run's on_failure runs).
// With continue at every level the count is exact whatever the timing: the top run, its 10
// children and 39 of their 100 children.
func TestSubflowRedteamTreeRunsLimit(t *testing.T) {
	base := runtime.NumGoroutine()
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxTreeRuns = 50 }))
	top := fanOut(b, 2, 10, 10, 10, "continue")
	top += "on_failure:\n  - {id: alert, tool: flow__echo, args: {kind: \"{{run.error.kind}}\"}}\n"
	info := b.run(top, nil)
	if info.Status != run.StatusFailed || info.Error == nil || info.Error.Kind != "limit_exceeded" {
		t.Fatalf("top: %s %+v", info.Status, info.Error)
	}
	mustContain(t, "the top run's error", info.Error.Message, "max_tree_runs", "limit of 50", "51 runs")
	if alert := b.steps(info.ID)["on_failure.alert"]; alert.Status != run.StepCompleted || jsonOf(t, alert.Output) != `{"kind":"limit_exceeded"}` {
		t.Fatalf("on_failure: %+v", alert)
	}
	runs := settle(b, base)
	if len(runs) != 50 {
		t.Fatalf("the tree holds %d runs; the limit is 50", len(runs))
	}
	// Every workflow step either started its child (which completed, or failed on a
	// refusal below it) or was refused; which ones depends on the timing, the counts do not.
	started, refused, steps := 0, 0, 0
	for _, r := range runs {
		for key, st := range b.steps(r.ID) {
			if st.StepID != "down" {
				continue
			}
			steps++
			switch {
			case st.Status == run.StepCompleted:
				started++
			case st.Status == run.StepFailed && st.Error != nil && st.Error.Kind == "limit_exceeded" && strings.Contains(st.Error.Message, "child run"):
				started++ // its child failed on a refusal under it
			case st.Status == run.StepFailed && st.Error != nil && st.Error.Kind == "limit_exceeded" && strings.Contains(st.Error.Message, "starting workflow"):
				refused++
				mustContain(t, "the refused step's error", st.Error.Message, "limit of 50", "engine config max_tree_runs",
					"raise max_tree_runs (up to 10,000,000)")
			default:
				t.Fatalf("step %s of %s: %s %+v", key, r.ID, st.Status, st.Error)
			}
		}
	}
	if started != 49 || refused != steps-49 || refused == 0 {
		t.Fatalf("workflow steps: %d started a child, %d were refused, of %d; want 49 started, the others refused", started, refused, steps)
	}
	// The default lets the same tree run.
	b2 := setup(t)
	if info := b2.run(fanOut(b2, 2, 10, 10, 10, "continue"), nil); info.Status != run.StatusCompleted {
		t.Fatalf("default max_tree_runs: %s %+v", info.Status, info.Error)
	}
	for _, v := range []int{-1, 10_000_001} {
		if _, err := engine.Open(context.Background(), engine.Config{MaxTreeRuns: v}); codeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "max_tree_runs") {
			t.Fatalf("max_tree_runs %d: %v", v, err)
		}
	}
}

// TestSubflowRedteamTreeRunsLimitAborts: with on_any_fail abort (the default) the first
// refusal cancels the siblings in flight, down the tree; nothing stays running, and the
// goroutines go back to where they were.
func TestSubflowRedteamTreeRunsLimitAborts(t *testing.T) {
	base := runtime.NumGoroutine()
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxTreeRuns = 50 }))
	info := b.run(fanOut(b, 3, 10, 10, 10, "abort"), nil)
	if info.Status != run.StatusFailed || info.Error == nil || info.Error.Kind != "limit_exceeded" {
		t.Fatalf("top: %s %+v", info.Status, info.Error)
	}
	mustContain(t, "the top run's error", info.Error.Message, "max_tree_runs", "limit of 50")
	if runs := settle(b, base); len(runs) > 50 {
		t.Fatalf("the tree holds %d runs; the limit is 50", len(runs))
	}
}

// TestSubflowRedteamTreeRunsCountAcrossResume: a resumed tree goes on counting the runs it
// started before (they are counted from the database), so resuming cannot start max_tree_runs
// more.
func TestSubflowRedteamTreeRunsCountAcrossResume(t *testing.T) {
	db := filepath.Join(t.TempDir(), "flow.db")
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxTreeRuns = 4; c.DB = db }))
	b.register("name: kid\nsteps:\n  - {id: a, tool: flow__echo}\n")
	top := `
name: top
steps:
  - id: kids
    kind: foreach
    items: [1, 2, 3]
    steps:
      - {id: k, kind: workflow, workflow: kid}
  - {id: more, kind: workflow, workflow: kid, depends_on: [kids]}
`
	info := b.run(top, nil)
	if info.Status != run.StatusFailed || info.Error.StepKey != "more" || info.Error.Kind != "limit_exceeded" {
		t.Fatalf("top: %s %+v", info.Status, info.Error)
	}
	mustContain(t, "the error", info.Error.Message, "5 runs", "limit of 4", "max_tree_runs")
	// The same engine (the tree's counts went with its last run) and another one on the file.
	for _, eng := range []*engine.Engine{b.eng, nil} {
		c := b
		if eng == nil {
			if err := b.eng.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			c = setup(t, withConfig(func(c *engine.Config) { c.MaxTreeRuns = 4; c.DB = db }))
			c.register("name: kid\nsteps:\n  - {id: a, tool: flow__echo}\n")
		}
		if _, err := c.eng.Resume(c.ctx, info.ID, engine.ResumeOptions{}); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		again := c.wait(info.ID)
		if again.Status != run.StatusFailed || again.Error.StepKey != "more" || again.Error.Kind != "limit_exceeded" {
			t.Fatalf("resumed top: %s %+v", again.Status, again.Error)
		}
		if kids := c.status(info.ID).Children; len(kids) != 3 {
			t.Fatalf("the resume started a child run past the limit: %+v", kids)
		}
	}
}

// TestSubflowRedteamTreeInstancesLimit: a foreach that would bring the step instances its
// tree planned past max_tree_instances fails before any iteration; one that fits runs.
func TestSubflowRedteamTreeInstancesLimit(t *testing.T) {
	// Each lvl1 run plans 1 + 10 instances: the top run 1 + 8, then 8 × 11 = 97 in all; 10
	// items at the top would make 121.
	for _, tc := range []struct {
		items int
		want  run.Status
	}{{8, run.StatusCompleted}, {10, run.StatusFailed}} {
		c := setup(t, withConfig(func(c *engine.Config) { c.MaxTreeInstances = 100 }))
		list := make([]string, tc.items)
		for i := range list {
			list[i] = fmt.Sprint(i)
		}
		c.register("name: lvl2\nsteps:\n  - {id: leaf, tool: flow__echo}\n")
		c.register("name: lvl1\nsteps:\n  - id: each\n    kind: foreach\n    items: [0,1,2,3,4,5,6,7,8,9]\n    steps:\n      - {id: e, tool: flow__echo}\n")
		info := c.run(fmt.Sprintf("name: top\nsteps:\n  - id: each\n    kind: foreach\n    items: [%s]\n    concurrency: 4\n    steps:\n      - {id: down, kind: workflow, workflow: lvl1}\n",
			strings.Join(list, ", ")), nil)
		if info.Status != tc.want {
			t.Fatalf("%d items: %s %+v", tc.items, info.Status, info.Error)
		}
		if tc.want == run.StatusFailed {
			if info.Error.Kind != "limit_exceeded" {
				t.Fatalf("%d items: %+v", tc.items, info.Error)
			}
			mustContain(t, "the error", info.Error.Message, "engine config max_tree_instances", "limit of 100", "raise max_tree_instances")
		}
	}
	if _, err := engine.Open(context.Background(), engine.Config{MaxTreeInstances: 1_000_000_001}); codeOf(err) != run.CodeInvalidRequest || !strings.Contains(err.Error(), "max_tree_instances") {
		t.Fatalf("max_tree_instances past its ceiling: %v", err)
	}
}

// TestSubflowRedteamTreeParallelBoundsWhatIsLive: foreach workers beyond the first of each
// foreach take a slot of the tree's max_tree_parallel, without waiting: 3 children of 20
// blocking tool calls each, all asked to run at once (60 calls), hold at most 1 + 4 calls at
// a time with max_tree_parallel 4, and the run completes.
func TestSubflowRedteamTreeParallelBoundsWhatIsLive(t *testing.T) {
	b := setup(t, withConfig(func(c *engine.Config) { c.MaxTreeParallel = 4 }))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "hold", Lane: flowtype.LaneMain}); err != nil {
		t.Fatal(err)
	}
	// The calls are held until 5 are in flight at once (or the test's time is up): every
	// worker the bound allows is then waiting in a call, and more would be seen.
	gate := make(chan struct{})
	var in atomic.Int32
	var opened atomic.Bool
	srv := b.serve(flowtype.LaneMain, func(flowtype.PendingCall) flowtype.ToolResult {
		if in.Add(1) >= 5 && opened.CompareAndSwap(false, true) {
			close(gate)
		}
		select {
		case <-gate:
		case <-b.ctx.Done():
		}
		in.Add(-1)
		return output(map[string]any{"ok": true})
	})
	top := fanOutLevel(0, 3, 3, "abort")
	b.register("name: lvl1\nsteps:\n  - id: each\n    kind: foreach\n    items: [" + strings.Repeat("0, ", 19) + "0]\n    concurrency: 20\n" +
		"    steps:\n      - {id: down, tool: hold}\n")
	info := b.run(top, nil)
	if info.Status != run.StatusCompleted {
		t.Fatalf("top: %s %+v", info.Status, info.Error)
	}
	if got := srv.calls.Load(); got != 60 {
		t.Fatalf("calls: %d", got)
	}
	if got := srv.maxSeen.Load(); got != 5 {
		t.Fatalf("%d calls in flight at once; max_tree_parallel 4 allows the first worker of each live foreach and 4 more: 5", got)
	}
}

// TestSubflowRedteamTreeModerateFanOutStaysSmall: 3 × 20 × 20 sub-workflows (1,263 runs, 20
// at a time at every level) with the default limits complete in a few seconds with the
// goroutines and memory bounded by max_tree_parallel, not by the product of the fan-outs.
func TestSubflowRedteamTreeModerateFanOutStaysSmall(t *testing.T) {
	base := runtime.NumGoroutine()
	b := setup(t)
	top := fanOut(b, 3, 3, 20, 20, "abort")
	var peakG, peakHeap atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			if g := uint64(runtime.NumGoroutine()); g > peakG.Load() {
				peakG.Store(g)
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peakHeap.Load() {
				peakHeap.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	info := b.run(top, nil)
	close(stop)
	<-sampled
	if info.Status != run.StatusCompleted {
		t.Fatalf("top: %s %+v", info.Status, info.Error)
	}
	runs := settle(b, base)
	if len(runs) != 1+3+60+1200 {
		t.Fatalf("runs: %d", len(runs))
	}
	t.Logf("1,264 runs in %s; peak goroutines %d, peak heap in use %d MB", time.Since(start).Round(time.Millisecond), peakG.Load(), peakHeap.Load()>>20)
	// max_tree_parallel (1,000) bounds the workers; without it, 1,200 leaf runs and 1,263
	// foreach workers would be live at once.
	if g := peakG.Load(); g > uint64(base)+2500 {
		t.Fatalf("peak goroutines %d (base %d)", g, base)
	}
	if h := peakHeap.Load(); h > 200<<20 {
		t.Fatalf("peak heap in use %d MB", h>>20)
	}
}
