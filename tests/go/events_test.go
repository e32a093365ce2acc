package gotest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/flowtype"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestEventStreamSequenceAndSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sub, err := b.eng.Events(b.ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const runs = 5
	var wg sync.WaitGroup
	for range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.run("steps: [{ id: a, tool: flow__echo }, { id: b, tool: flow__echo }]", nil)
		}()
	}
	wg.Wait()
	// Each run writes started, 2 × (enter, exit), terminal.
	var got []run.Event
	for len(got) < runs*6 {
		ev, err := sub.Next(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	perRun := map[string][]string{}
	for i, e := range got {
		if i > 0 && e.Seq <= got[i-1].Seq {
			t.Fatalf("seq not increasing: %d after %d", e.Seq, got[i-1].Seq)
		}
		if e.Time.IsZero() || e.RunID == "" {
			t.Fatalf("event %+v", e)
		}
		perRun[e.RunID] = append(perRun[e.RunID], e.Type+":"+e.StepKey)
	}
	if got[0].Seq != 1 {
		t.Fatalf("first seq %d", got[0].Seq)
	}
	want := `["workflow_started:","step_enter:a","step_exit:a","step_enter:b","step_exit:b","workflow_terminal:"]`
	for id, types := range perRun {
		if jsonOf(t, types) != want {
			t.Fatalf("run %s events %v", id, types)
		}
	}
	last, err := b.eng.LastSeq(b.ctx)
	if err != nil || last != got[len(got)-1].Seq {
		t.Fatalf("LastSeq %d %v", last, err)
	}
	// From a given sequence number, inclusive.
	from, err := b.eng.EventsSince(got[10].Seq, 3)
	if err != nil || len(from) != 3 || from[0].Seq != got[10].Seq || from[2].Seq != got[12].Seq {
		t.Fatalf("EventsSince: %v %v", from, err)
	}
	if none, _ := b.eng.EventsSince(last+1, 10); len(none) != 0 {
		t.Fatalf("nothing after the last: %v", none)
	}
	// A late subscriber from the middle sees the same events.
	late, _ := b.eng.Events(b.ctx, got[20].Seq)
	ev, err := late.Next(b.ctx)
	if err != nil || ev.Seq != got[20].Seq || ev.Type != got[20].Type {
		t.Fatalf("late subscriber: %+v %v", ev, err)
	}
	// Progress in step events.
	for _, e := range got {
		if e.Type == run.EventStepExit && e.StepKey == "b" && e.Progress != (run.Progress{Completed: 2, Total: 2}) {
			t.Fatalf("progress %+v", e.Progress)
		}
	}
}

func TestPollEventsWaitsForNewEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	last, _ := b.eng.LastSeq(b.ctx)
	start := time.Now()
	evs, err := b.eng.PollEvents(b.ctx, engine.EventQuery{FromSeq: last + 1}, 30*time.Millisecond)
	if err != nil || len(evs) != 0 || time.Since(start) < 30*time.Millisecond {
		t.Fatalf("an idle poll waits for its timeout and returns nothing: %v %v", evs, err)
	}
	got := make(chan []run.Event, 1)
	go func() {
		evs, _ := b.eng.PollEvents(b.ctx, engine.EventQuery{FromSeq: last + 1, Max: 1}, waitLimit)
		got <- evs
	}()
	time.Sleep(10 * time.Millisecond)
	id := b.submit("steps: [{ id: a, tool: flow__echo }]", nil)
	evs = <-got
	if len(evs) != 1 || evs[0].Type != run.EventWorkflowStarted || evs[0].RunID != id {
		t.Fatalf("poll woke with %+v", evs)
	}
	b.wait(id)
	ofRun, _ := b.eng.PollEvents(b.ctx, engine.EventQuery{RunID: id}, 0)
	if len(ofRun) != 4 {
		t.Fatalf("events of the run: %d", len(ofRun))
	}
	ctx, cancel := context.WithCancel(b.ctx)
	cancel()
	if _, err := b.eng.PollEvents(ctx, engine.EventQuery{FromSeq: ofRun[3].Seq + 100}, time.Minute); err == nil {
		t.Fatal("a cancelled poll returns the context's error")
	}
}

func TestStallDetected(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock(), withConfig(func(c *engine.Config) { c.StallAfterSecs = 30 }))
	if err := b.eng.RegisterTool(flowtype.ToolInfo{Name: "never_pulled"}); err != nil {
		t.Fatal(err)
	}
	id := b.submit("steps: [{ id: stuck, tool: never_pulled }]", nil)
	b.waitStep(id, "stuck", run.StepRunning)
	b.waitTimers(1)
	b.clk.Advance(29 * time.Second)
	if got := b.eventTypes(id, run.EventStallDetected); len(got) != 0 {
		t.Fatalf("stall reported early: %v", got)
	}
	b.clk.Advance(time.Second)
	stalls := func() []run.Event {
		var out []run.Event
		for _, e := range b.events(id) {
			if e.Type == run.EventStallDetected {
				out = append(out, e)
			}
		}
		return out
	}
	got := stalls()
	if len(got) != 1 {
		t.Fatalf("stall events %d", len(got))
	}
	mustContain(t, "stall detail", string(got[0].Detail), `"quiet_ms":30000`, `"tool_steps_in_flight":1`)
	b.clk.Advance(5 * time.Minute)
	if len(stalls()) != 1 {
		t.Fatal("one stall event per quiet period")
	}
	// Activity starts a new quiet period.
	call := b.nextCall(flowtype.LaneMain)
	if err := b.eng.Host().Complete(call.ID, output(nil)); err != nil {
		t.Fatal(err)
	}
	if info := b.wait(id); info.Status != run.StatusCompleted {
		t.Fatalf("status %s", info.Status)
	}
}

func TestNoStallWhileWaitingForApproval(t *testing.T) {
	t.Parallel()
	b := setup(t, withStubClock(), withConfig(func(c *engine.Config) { c.StallAfterSecs = 30 }))
	id := b.submit("steps: [{ id: gate, kind: approve, prompt: 'ok?' }, { id: stuck, tool: flow__sleep, args: { ms: 600000 } }]", nil)
	b.waitRunStatus(id, run.StatusWaiting)
	b.clk.Advance(10 * time.Minute)
	if got := b.eventTypes(id, run.EventStallDetected); len(got) != 0 {
		t.Fatalf("a run waiting for a human is not stalled: %v", got)
	}
	if err := b.eng.Approve(b.ctx, id, "gate", true, "", ""); err != nil {
		t.Fatal(err)
	}
	b.waitStep(id, "stuck", run.StepRunning)
	b.waitTimers(2) // the sleep and the stall check
	for range 3 {
		b.clk.Advance(30 * time.Second)
	}
	if got := b.eventTypes(id, run.EventStallDetected); len(got) != 1 {
		t.Fatalf("stall events %v", got)
	}
	if err := b.eng.Cancel(b.ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	b.wait(id)
}
