package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// TestRewritingAStepKeepsItsUnchangedLinesOnce: a running tool's progress rewrites its step row
// every second (docs/reference/limits.md "Progress and logs"); lines that did not change are not stored
// again, so a long step does not grow the arena by its lines at each rewrite.
func TestRewritingAStepKeepsItsUnchangedLinesOnce(t *testing.T) {
	s := New()
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r1", Status: run.StatusRunning, CreatedAt: t0, UpdatedAt: t0}}}); err != nil {
		t.Fatal(err)
	}
	logs, _ := json.Marshal([]run.LogLine{{Stream: run.StreamLog, Text: strings.Repeat("x", 100<<10)}})
	held := func() int {
		n := 0
		for _, c := range s.bytes.chunks {
			n += len(c)
		}
		return n
	}
	step := store.Step{RunID: "r1", Key: "export", StepID: "export", Kind: "tool", Status: run.StepRunning, Logs: logs, StartedAt: t0}
	if err := s.Write(ctx, &store.Batch{Steps: []store.Step{step}}); err != nil {
		t.Fatal(err)
	}
	before := held()
	for i := range 100 {
		step.Progress = []byte(fmt.Sprintf(`{"done":%d}`, i))
		if err := s.Write(ctx, &store.Batch{Steps: []store.Step{step}}); err != nil {
			t.Fatal(err)
		}
	}
	if grown := held() - before; grown > 10<<10 {
		t.Fatalf("100 rewrites with the same lines grew the arena by %d bytes", grown)
	}
	steps, _ := s.ListSteps(ctx, "r1")
	if len(steps) != 1 || string(steps[0].Logs) != string(logs) || string(steps[0].Progress) != `{"done":99}` {
		t.Fatalf("step %+v", steps)
	}
}
