package engine

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storeopen"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// A paused run whose process died (no clean close: its step still running in the store) stays
// paused when the next engine opens the database — recovery interrupts only its step, writes no
// interrupted event, and ResumeInterrupted leaves it alone — and Unpause runs it again from the
// resume path, reusing its completed step.
func TestRecoveryKeepsAPausedRunPaused(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "sqlite"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st := storeopen.Memory()
			if kind == "sqlite" {
				var err error
				if st, err = storeopen.File(ctx, filepath.Join(t.TempDir(), "flow.db"), false); err != nil {
					t.Fatal(err)
				}
			}
			t0 := time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC)
			spec := `{"name":"wf","steps":[{"id":"a","tool":"flow__echo","args":{"value":1}},{"id":"b","tool":"flow__echo","args":{"value":2}}]}`
			if err := st.Write(ctx, &store.Batch{
				CreateRuns: []store.Run{{ID: "r1", Name: "wf", SpecJSON: json.RawMessage(spec), SpecHash: "h", Inputs: json.RawMessage(`{}`),
					Status: run.StatusPaused, Origin: OriginLocal, CreatedAt: t0, UpdatedAt: t0}},
				Steps: []store.Step{
					{RunID: "r1", Key: "a", StepID: "a", Kind: "tool", Status: run.StepCompleted, Attempt: 1, Output: json.RawMessage(`{"value":1}`),
						StartedAt: t0, FinishedAt: t0, UpdatedAt: t0, Insert: true},
					{RunID: "r1", Key: "b", StepID: "b", Kind: "tool", Status: run.StepRunning, Attempt: 1, StartedAt: t0, UpdatedAt: t0, Insert: true},
				},
				Events: []run.Event{{RunID: "r1", Type: run.EventRunPaused, Status: string(run.StatusPaused), Time: t0, Progress: run.Progress{Completed: 1, Total: 2}}},
			}); err != nil {
				t.Fatal(err)
			}
			e, err := Open(ctx, Config{StallAfterSecs: -1}, WithStore(st))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = e.Close(ctx)
				_ = st.Close()
			}()
			info, err := e.Status(ctx, "r1")
			if err != nil || info.Status != run.StatusPaused || info.Error != nil {
				t.Fatalf("paused run after recovery: %+v, %v", info, err)
			}
			if steps, _ := st.ListSteps(ctx, "r1"); len(steps) != 2 || steps[0].Status != run.StepCompleted || steps[1].Status != run.StepInterrupted {
				t.Fatalf("steps after recovery %+v; want a completed, b interrupted", steps)
			}
			evs, _ := st.ListEvents(ctx, store.EventFilter{RunID: "r1"})
			if len(evs) != 1 {
				t.Fatalf("recovery wrote events for a paused run: %+v", evs)
			}
			if ids, err := e.ResumeInterrupted(ctx); err != nil || len(ids) != 0 {
				t.Fatalf("ResumeInterrupted took a paused run: %v %v", ids, err)
			}
			if err := e.Unpause(ctx, "r1", "", "ops"); err != nil {
				t.Fatal(err)
			}
			info, err = e.Wait(ctx, "r1", 10*time.Second)
			if err != nil || info.Status != run.StatusCompleted {
				t.Fatalf("after unpause: %+v, %v", info, err)
			}
			steps, _ := st.ListSteps(ctx, "r1")
			if len(steps) != 2 || !steps[0].StartedAt.Equal(t0) || steps[1].Status != run.StepCompleted {
				t.Fatalf("steps after unpause %+v; want a reused (started at t0), b run again", steps)
			}
		})
	}
}
