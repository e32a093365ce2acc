package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func mustOp(tb testing.TB, h uint64, fn op, in string) map[string]any {
	tb.Helper()
	out, rc := dispatch(h, []byte(in), fn)
	if rc != rcOK {
		tb.Fatalf("rc %d: %s", rc, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		tb.Fatal(err)
	}
	return m
}

// BenchmarkHostStepRoundTrip drives a sequential foreach of host tool calls the way Python does:
// one calls_complete (with next) crossing per step, JSON included, but from an ordinary
// goroutine. The exports take every caller for a cgo callback, locked to its thread, and meet the
// run's goroutine halfway (flowtype.PullRequest.LockedThread): from a goroutine that is not
// locked, that spin only holds a processor. BenchmarkHostStepRoundTripLocked stands for Python.
func BenchmarkHostStepRoundTrip(b *testing.B) { benchHostStepRoundTrip(b, false) }

// BenchmarkHostStepRoundTripLocked is BenchmarkHostStepRoundTrip from a goroutine locked to its
// OS thread, as a cgo callback from a Python thread is: the thread switches of a Python step.
func BenchmarkHostStepRoundTripLocked(b *testing.B) { benchHostStepRoundTrip(b, true) }

func benchHostStepRoundTrip(b *testing.B, locked bool) {
	if locked {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			benchHostStepRoundTrip(b, false)
		}()
		<-done
		return
	}
	h := uint64(mustOp(b, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
	defer dispatch(h, nil, opEngineClose)
	mustOp(b, h, opToolRegister, `{"name": "noop", "lane": "main"}`)
	items := make([]string, b.N)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	specText := `{"name":"seq","steps":[{"id":"each","kind":"foreach","items":"{{inputs.items}}","steps":[{"id":"noop","tool":"noop"}]}]}`
	sub, _ := json.Marshal(map[string]any{"spec": specText, "inputs": map[string]any{"items": json.RawMessage("[" + strings.Join(items, ",") + "]")}})
	runID := mustOp(b, h, opRunSubmit, string(sub))["run_id"].(string)
	nextReq := fmt.Sprintf(`{"lanes":["main"],"max":16,"timeout_ms":1000,"run_id":%q}`, runID)
	b.ResetTimer()
	res := mustOp(b, h, opCallsNext, nextReq)
	done := 0
	for done < b.N {
		calls, _ := res["calls"].([]any)
		if len(calls) == 0 {
			if run, _ := res["run"].(map[string]any); run["terminal"] == true {
				break
			}
			res = mustOp(b, h, opCallsNext, nextReq)
			continue
		}
		id := calls[0].(map[string]any)["call_id"].(float64)
		res = mustOp(b, h, opCallsComplete, fmt.Sprintf(`{"call_id":%d,"output":null,"next":%s}`, int64(id), nextReq))
		done++
	}
	b.StopTimer()
	if done != b.N {
		b.Fatalf("completed %d of %d calls", done, b.N)
	}
}

// BenchmarkDispatchSmall measures the fixed cost of one small JSON export on the Go side.
func BenchmarkDispatchSmall(b *testing.B) {
	h := uint64(mustOp(b, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
	defer dispatch(h, nil, opEngineClose)
	in := []byte(`{"call_id":5}`)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		dispatch(h, in, opCallCancelled)
	}
}

// BenchmarkHostFanoutCompleteMany drives a foreach of host tool calls (concurrency 8) the way 4
// serve_tools threads do: each puller takes up to 8 ready calls in one calls_next, answers them
// in one calls_complete_many that also waits for its next calls, JSON included. It reports the
// Go side's µs per call; run it with -cpuprofile for the engine's breakdown of the Python
// fan-out (docs/design/performance.md). The b.N calls are runs of at most fanoutRunItems items,
// one after another (a foreach takes at most 100,000: a longer -benchtime would ask for more).
func BenchmarkHostFanoutCompleteMany(b *testing.B) {
	const fanoutRunItems = 50_000
	h := uint64(mustOp(b, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
	defer dispatch(h, nil, opEngineClose)
	mustOp(b, h, opToolRegister, `{"name": "add_one", "lane": "worker"}`)
	specText := `{"name":"fan","steps":[{"id":"each","kind":"foreach","items":"{{inputs.items}}","concurrency":8,` +
		`"steps":[{"id":"f","tool":"add_one","args":{"x":"{{item}}"}}]}]}`
	var subs []string
	for first := 0; first < b.N; first += fanoutRunItems {
		items := make([]string, min(fanoutRunItems, b.N-first))
		for i := range items {
			items[i] = fmt.Sprint(first + i)
		}
		sub, _ := json.Marshal(map[string]any{"spec": specText, "inputs": map[string]any{"items": json.RawMessage("[" + strings.Join(items, ",") + "]")}})
		subs = append(subs, string(sub))
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	var answered atomic.Int64
	for w := 0; w < 4; w++ {
		puller := uint64(mustOp(b, h, opPullerOpen, fmt.Sprintf(`{"name":"w%d"}`, w))["puller"].(float64))
		nextReq := fmt.Sprintf(`{"puller":%d,"lanes":["worker"],"max":8,"timeout_ms":100}`, puller)
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := mustOp(b, h, opCallsNext, nextReq)
			for answered.Load() < int64(b.N) {
				calls, _ := res["calls"].([]any)
				if len(calls) == 0 {
					res = mustOp(b, h, opCallsNext, nextReq)
					continue
				}
				var req strings.Builder
				req.WriteString(`{"answers":[`)
				for i, c := range calls {
					call := c.(map[string]any)
					x := call["args"].(map[string]any)["x"].(float64)
					if i > 0 {
						req.WriteByte(',')
					}
					fmt.Fprintf(&req, `{"call_id":%d,"output":%d}`, int64(call["call_id"].(float64)), int64(x)+1)
				}
				req.WriteString(`],"next":` + nextReq + `}`)
				answered.Add(int64(len(calls)))
				res = mustOp(b, h, opCallsCompleteMany, req.String())
			}
		}()
	}
	for _, sub := range subs {
		runID := mustOp(b, h, opRunSubmit, sub)["run_id"].(string)
		for {
			st := mustOp(b, h, opRunWait, fmt.Sprintf(`{"run_id":%q,"timeout_ms":10000}`, runID))
			if st["status"] != "running" && st["status"] != "pending" {
				if st["status"] != "completed" {
					b.Fatalf("run %v", st)
				}
				break
			}
		}
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/call")
}

// BenchmarkChainSubmitStatus measures the two per-run crossings of a chain of n host tool steps
// each taking the previous output ({{sN}}), as scripts/bench_dask.py's chain makes them:
// run_submit (the spec's parsing and checks) and the final run_status (every step's output),
// in µs per step, at 100, 1,000 and 10,000 steps (per-step cost must not grow with n).
func BenchmarkChainSubmitStatus(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			h := uint64(mustOp(b, 0, opEngineOpen, `{"config": {}}`)["handle"].(float64))
			defer dispatch(h, nil, opEngineClose)
			mustOp(b, h, opToolRegister, `{"name": "add_one", "lane": "main"}`)
			steps := []string{`{"id":"s0","tool":"add_one","args":{"x":0}}`}
			for i := 1; i < n; i++ {
				steps = append(steps, fmt.Sprintf(`{"id":"s%d","tool":"add_one","args":{"x":"{{s%d}}"}}`, i, i-1))
			}
			specText := `{"name":"chain","steps":[` + strings.Join(steps, ",") + `]}`
			sub, _ := json.Marshal(map[string]any{"spec": specText})
			var submit, status time.Duration
			for range b.N {
				t := time.Now()
				runID := mustOp(b, h, opRunSubmit, string(sub))["run_id"].(string)
				submit += time.Since(t)
				nextReq := fmt.Sprintf(`{"lanes":["main"],"max":1,"timeout_ms":1000,"run_id":%q}`, runID)
				res := mustOp(b, h, opCallsNext, nextReq)
				for done := 0; done < n; {
					calls, _ := res["calls"].([]any)
					if len(calls) == 0 {
						res = mustOp(b, h, opCallsNext, nextReq)
						continue
					}
					call := calls[0].(map[string]any)
					x := call["args"].(map[string]any)["x"].(float64)
					res = mustOp(b, h, opCallsComplete, fmt.Sprintf(`{"call_id":%d,"output":%d,"next":%s}`, int64(call["call_id"].(float64)), int64(x)+1, nextReq))
					done++
				}
				t = time.Now()
				st := mustOp(b, h, opRunWait, fmt.Sprintf(`{"run_id":%q,"timeout_ms":10000}`, runID))
				status += time.Since(t)
				if st["status"] != "completed" {
					b.Fatalf("run %v", st["status"])
				}
			}
			b.ReportMetric(float64(submit.Nanoseconds())/float64(b.N*n)/1000, "submit-µs/step")
			b.ReportMetric(float64(status.Nanoseconds())/float64(b.N*n)/1000, "status-µs/step")
		})
	}
}
