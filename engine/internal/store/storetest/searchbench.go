package storetest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The database BenchmarkSearch searches: SearchRuns runs of SearchStepsPerRun step instances
// each (one attempt per step; a failed step has two).
const (
	SearchRuns        = 100_000
	SearchStepsPerRun = 10
)

// searchT0 is when the first run of FillSearch was created; run i was created i seconds later.
var searchT0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

// FillSearch writes the database of BenchmarkSearch into an empty store, in batches of 500
// runs: run i has inputs {"shot": "sh%04d" (1,000 shots), "seq": "sq%02d", "frame": i % 240};
// its workflow (one of 20) calls 3 of 50 tools, those of pool "maya" on one of 200 worker
// processes "maya/PID"; every 20th run fails at its last step after a first attempt that failed
// too (a worker_lost with "exit status 139" every 100th run, else a timeout then an error),
// every 50th skips a step.
func FillSearch(tb testing.TB, s store.Store) {
	tb.Helper()
	ctx := context.Background()
	spec := json.RawMessage(`{"name":"bench","steps":[]}`)
	const batch = 500
	for base := 0; base < SearchRuns; base += batch {
		b := &store.Batch{}
		for i := base; i < base+batch; i++ {
			id := fmt.Sprintf("r%06d", i)
			at := searchT0.Add(time.Duration(i) * time.Second)
			failed := i%20 == 0
			r := store.Run{ID: id, Name: fmt.Sprintf("wf%02d", i%20), SpecJSON: spec, SpecHash: "h",
				Inputs: json.RawMessage(fmt.Sprintf(`{"shot":"sh%04d","seq":"sq%02d","frame":%d}`, i%1000, i%37, i%240)),
				Status: run.StatusCompleted, Origin: "local", CreatedAt: at, UpdatedAt: at, FinishedAt: at.Add(time.Minute),
				Progress: run.Progress{Completed: SearchStepsPerRun, Total: SearchStepsPerRun}}
			if failed {
				r.Status = run.StatusFailed
			}
			b.CreateRuns = append(b.CreateRuns, r)
			for j := range SearchStepsPerRun {
				key := fmt.Sprintf("step%d", j)
				tool := fmt.Sprintf("tool%02d", (i%20*3+j%3)%50)
				if j%3 == 0 {
					tool = "maya." + tool
				}
				worker := ""
				if j%3 == 0 {
					worker = fmt.Sprintf("maya/%d", 1000+(i*7+j)%200)
				}
				st := store.Step{RunID: id, Key: key, StepID: key, Kind: "tool", Status: run.StepCompleted, Attempt: 1,
					StartedAt: at, FinishedAt: at.Add(time.Second), UpdatedAt: at.Add(time.Second), Insert: true}
				a := store.Attempt{RunID: id, StepKey: key, Attempt: 1, Tool: tool, Status: run.StepCompleted, Worker: worker,
					Host: "farm01", PID: 4242, StartedAt: at, FinishedAt: at.Add(time.Second)}
				switch {
				case failed && j == SearchStepsPerRun-1:
					first := a
					first.Status, first.ErrorKind, first.ErrorMessage = run.StepFailed, run.KindTimeout, fmt.Sprintf("%s timed out after 600s", tool)
					b.Attempts = append(b.Attempts, first)
					kind, msg := run.KindError, fmt.Sprintf("RuntimeError: cannot open /show/sq%02d/sh%04d/comp.nk", i%37, i%1000)
					if i%100 == 0 {
						kind, msg = run.KindWorkerLost, fmt.Sprintf("worker %s lost: exit status 139", worker)
					}
					a.Attempt, a.Status, a.ErrorKind, a.ErrorMessage = 2, run.StepFailed, kind, msg
					st.Attempt, st.Status, st.ErrorKind, st.ErrorMessage = 2, run.StepFailed, kind, msg
				case i%50 == 0 && j == SearchStepsPerRun-2:
					st.Status, st.ErrorMessage = run.StepSkipped, "condition was false"
				}
				b.Steps = append(b.Steps, st)
				b.Attempts = append(b.Attempts, a)
			}
		}
		if err := s.Write(ctx, b); err != nil {
			tb.Fatalf("fill: %v", err)
		}
	}
}

// SearchMix are the searches BenchmarkSearch times, each listing a page of 50 newest first as
// the dashboard and `dcc-flow runs` do; a few match thousands of runs, a few none.
func SearchMix() []store.RunFilter {
	in := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	end := searchT0.Add(SearchRuns * time.Second)
	mix := []store.RunFilter{
		{Inputs: in("shot", "sh0123")},                                    // 100 runs
		{Inputs: in("shot", "sh0123", "seq", "sq12")},                     // a few
		{Inputs: in("frame", "17")},                                       // 417 runs
		{Inputs: in("shot", "sh9999")},                                    // none
		{Tool: "tool07"},                                                  // ~5,000 runs
		{Tool: "maya.tool33", Inputs: in("shot", "sh0480")},               // combined
		{StepStatuses: []run.StepStatus{run.StepFailed}},                  // 5,000 runs
		{StepStatuses: []run.StepStatus{run.StepSkipped, run.StepFailed}}, // 7,000 runs
		{StepStatuses: []run.StepStatus{run.StepCompleted}},               // every run: walks the newest
		{ErrorKind: run.KindWorkerLost},                                   // 1,000 runs
		{ErrorKind: run.KindTimeout, Since: end.Add(-2 * time.Hour)},      // the last 2 hours
		{ErrorText: "exit status 139"},                                    // 1,000 runs
		{ErrorText: "SH0123/COMP"},                                        // a few, ignoring case
		{ErrorText: "no such text"},                                       // none: reads every failure
		{Worker: "maya/1042"},                                             // ~1,500 runs
		{Worker: "maya", Until: end.Add(-24 * time.Hour)},                 // a pool, an old window
		{Statuses: []run.Status{run.StatusFailed}, ErrorKind: run.KindError, Inputs: in("seq", "sq05")},
		{Since: end.Add(-time.Hour), Until: end.Add(-30 * time.Minute)}, // a time range alone
	}
	for i := range mix {
		mix[i].Limit = 50
	}
	return mix
}

// BenchmarkSearch times each search of SearchMix on s (filled by FillSearch) b.N times over
// and reports the p50 and p99 of all of them (p50-ms, p99-ms) and the slowest search's p99
// (worst-p99-ms). The goal is p99 under 100 ms (docs/design/performance.md).
func BenchmarkSearch(b *testing.B, s store.Store) {
	ctx := context.Background()
	mix := SearchMix()
	for _, f := range mix { // warm the cache, and check each search finds what it should
		if _, err := s.ListRuns(ctx, f); err != nil {
			b.Fatalf("ListRuns(%+v): %v", f, err)
		}
	}
	var all []time.Duration
	per := make([][]time.Duration, len(mix))
	b.ResetTimer()
	for range b.N {
		for j, f := range mix {
			t := time.Now()
			if _, err := s.ListRuns(ctx, f); err != nil {
				b.Fatal(err)
			}
			d := time.Since(t)
			all = append(all, d)
			per[j] = append(per[j], d)
		}
	}
	b.StopTimer()
	pct := func(ds []time.Duration, p float64) float64 {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return float64(ds[min(len(ds)-1, int(float64(len(ds))*p))]) / 1e6
	}
	order := make([]int, len(per)) // the searches, slowest p99 first
	for j := range order {
		order[j] = j
	}
	slices.SortFunc(order, func(x, y int) int { return cmp.Compare(pct(per[y], 0.99), pct(per[x], 0.99)) })
	worst := pct(per[order[0]], 0.99)
	for _, j := range order[:min(5, len(order))] {
		f := mix[j]
		f.Limit = 0
		b.Logf("p99 %7.2f ms: %s", pct(per[j], 0.99), describeFilter(f))
	}
	b.ReportMetric(pct(all, 0.50), "p50-ms")
	b.ReportMetric(pct(all, 0.99), "p99-ms")
	b.ReportMetric(worst, "worst-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// describeFilter is f's fields that are set, for a benchmark's log.
func describeFilter(f store.RunFilter) string {
	var parts []string
	add := func(name string, v any, set bool) {
		if set {
			parts = append(parts, fmt.Sprintf("%s=%v", name, v))
		}
	}
	add("statuses", f.Statuses, len(f.Statuses) > 0)
	add("inputs", f.Inputs, len(f.Inputs) > 0)
	add("tool", f.Tool, f.Tool != "")
	add("step_statuses", f.StepStatuses, len(f.StepStatuses) > 0)
	add("error_kind", f.ErrorKind, f.ErrorKind != "")
	add("worker", f.Worker, f.Worker != "")
	add("error_text", f.ErrorText, f.ErrorText != "")
	add("since", f.Since.Format(time.RFC3339), !f.Since.IsZero())
	add("until", f.Until.Format(time.RFC3339), !f.Until.IsZero())
	return strings.Join(parts, " ")
}
