package ui

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// count returns the messages of kind event in an SSE body.
func count(body, event string) int { return strings.Count(body, "event: "+event+"\n") }

// 10,000 step events of one run between two flushes become one run message and at most
// maxStepMessages step messages (each key's latest state); a run or key that had a message less
// than the interval ago waits for the next flush. On a clock of the test's: "at once" is at once
// even when a loaded machine takes longer than the interval to flush 10,000 events (it did).
func TestCoalescerBoundsMessages(t *testing.T) {
	every := 100 * time.Millisecond
	c := newCoalescer(true, every)
	at := time.Date(2026, 11, 29, 3, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return at }
	c.summaries["r1"] = &RunSummary{ID: "r1", Status: run.StatusRunning}
	const keys = 500
	seq := uint64(0)
	for i := range 10000 {
		seq++
		st := string(run.StepRunning)
		if i >= 10000-keys {
			st = string(run.StepCompleted)
		}
		c.add(run.Event{Seq: seq, RunID: "r1", Type: run.EventStepExit, StepKey: fmt.Sprintf("each[%d].work", i%keys), Status: st,
			Progress: run.Progress{Completed: i, Total: 10000}})
	}
	flush := func() string {
		w := httptest.NewRecorder()
		if err := c.flush(context.Background(), nil, w); err != nil {
			t.Fatal(err)
		}
		return w.Body.String()
	}
	body := flush()
	if count(body, "run") != 1 || count(body, "step") != maxStepMessages {
		t.Fatalf("first flush: %d run and %d step messages", count(body, "run"), count(body, "step"))
	}
	if !strings.Contains(body, `"progress":{"completed":9999,"total":10000}`) || strings.Contains(body, `"status":"running"`) && !strings.Contains(body, `"id":"r1"`) {
		t.Errorf("the run message is not the latest state:\n%.400s", body)
	}
	if strings.Contains(body[strings.Index(body, "event: step"):], `"status":"running"`) {
		t.Error("a step message carries an older state than the latest")
	}
	// More changes at once: the run and the keys already sent wait; the others go, 200 at most.
	c.add(run.Event{Seq: seq + 1, RunID: "r1", Type: run.EventStepExit, StepKey: "each[0].work", Status: "failed"})
	body = flush()
	if count(body, "run") != 0 || count(body, "step") != maxStepMessages || strings.Contains(body, `"key":"each[0].work"`) {
		t.Errorf("second flush at once: %d run and %d step messages, each[0] sent: %v", count(body, "run"), count(body, "step"), strings.Contains(body, `"key":"each[0].work"`))
	}
	at = at.Add(every)
	body = flush()
	if count(body, "run") != 1 || !strings.Contains(body, `"key":"each[0].work","status":"failed"`) {
		t.Errorf("after the interval: %d run messages, each[0]: %v\n%.300s", count(body, "run"), strings.Contains(body, `"key":"each[0].work"`), body)
	}
	if c.pending() {
		t.Errorf("still pending: %d runs, %d steps", len(c.runOrder), len(c.stepOrder))
	}
}
