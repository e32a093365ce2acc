package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// RunSteps is how many steps one run of BenchmarkRun writes.
const RunSteps = 100

// BenchmarkRun measures the write throughput of a store the way the executor writes a run of
// RunSteps steps fanned out at once: one batch creates the run (and its workflow_started
// event); then each step, from its own goroutine, writes its row as running with a step_enter
// event, then as completed with its output and a step_exit event; one last batch finishes the
// run. Every Write is durable when it returns, so the figure is what group commit makes of
// 2×RunSteps concurrent writers. It reports steps/s and µs per run.
func BenchmarkRun(b *testing.B, newStore func(b *testing.B) store.Store) {
	s := newStore(b)
	ctx := context.Background()
	spec := json.RawMessage(`{"name":"bench","steps":[{"id":"each","kind":"foreach"}]}`)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("run-%d", i)
		now := time.Now()
		if err := s.Write(ctx, &store.Batch{
			CreateRuns: []store.Run{{ID: id, Name: "bench", SpecJSON: spec, SpecHash: "h", Inputs: json.RawMessage(`{}`),
				Status: run.StatusRunning, Origin: "local", CreatedAt: now, UpdatedAt: now, Progress: run.Progress{Total: RunSteps}}},
			Events: []run.Event{{RunID: id, Type: run.EventWorkflowStarted, Time: now, Status: "running"}},
		}); err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		for j := range RunSteps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("each[%d].export", j)
				t := time.Now()
				st := store.Step{RunID: id, Key: key, StepID: "export", Kind: "tool", Status: run.StepRunning, Attempt: 1,
					StartedAt: t, UpdatedAt: t, Insert: true}
				if err := s.Write(ctx, &store.Batch{Steps: []store.Step{st},
					Events: []run.Event{{RunID: id, Type: run.EventStepEnter, StepKey: key, Time: t, Attempt: 1}}}); err != nil {
					b.Error(err)
					return
				}
				t = time.Now()
				st.Status, st.Output, st.FinishedAt, st.UpdatedAt, st.Insert = run.StepCompleted,
					json.RawMessage(`{"fbx":"/proj/hero_v012.fbx"}`), t, t, false
				if err := s.Write(ctx, &store.Batch{Steps: []store.Step{st},
					Events: []run.Event{{RunID: id, Type: run.EventStepExit, StepKey: key, Time: t, Attempt: 1, Status: "completed"}}}); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		now = time.Now()
		if err := s.Write(ctx, &store.Batch{
			RunUpdates: []store.RunUpdate{{ID: id, Status: run.StatusCompleted, UpdatedAt: now, FinishedAt: now,
				Progress: run.Progress{Completed: RunSteps, Total: RunSteps}}},
			Events: []run.Event{{RunID: id, Type: run.EventWorkflowTerminal, Time: now, Status: "completed"}},
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*RunSteps)/b.Elapsed().Seconds(), "steps/s")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/run")
}

// BenchmarkStepSequential measures the latency of one durable step completion (a step row and
// its event, one Write at a time): what a run of sequential steps pays per step.
func BenchmarkStepSequential(b *testing.B, newStore func(b *testing.B) store.Store) {
	s := newStore(b)
	ctx := context.Background()
	now := time.Now()
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r", SpecJSON: json.RawMessage(`{}`),
		Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t := time.Now()
		key := fmt.Sprintf("s%d", i)
		if err := s.Write(ctx, &store.Batch{
			Steps: []store.Step{{RunID: "r", Key: key, StepID: "s", Kind: "tool", Status: run.StepCompleted, Attempt: 1,
				Output: json.RawMessage(`{"ok":true}`), StartedAt: t, FinishedAt: t, UpdatedAt: t, Insert: true}},
			Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: key, Time: t, Attempt: 1, Status: "completed"}},
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
}
