package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// memControl is an in-memory store.Controller.
type memControl struct {
	mu      sync.Mutex
	next    int64
	pending []store.ControlRequest
	answers map[int64]store.ControlAnswer
}

func (c *memControl) RequestControl(_ context.Context, r store.ControlRequest) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next++
	r.ID = c.next
	c.pending = append(c.pending, r)
	return r.ID, nil
}

func (c *memControl) ControlAnswer(_ context.Context, id int64) (store.ControlAnswer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answers[id], nil
}

func (c *memControl) PendingControl(context.Context) ([]store.ControlRequest, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]store.ControlRequest(nil), c.pending...), nil
}

func (c *memControl) AnswerControl(_ context.Context, id int64, _ time.Time, code, message string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answers == nil {
		c.answers = map[int64]store.ControlAnswer{}
	}
	c.answers[id] = store.ControlAnswer{Handled: true, ErrorCode: code, Error: message}
	for i, r := range c.pending {
		if r.ID == id {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			break
		}
	}
	return nil
}

// recorder is an Applier that records what it applied; Cancel of "gone" fails not_found, Pause
// fails with a plain error.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(s string) { r.mu.Lock(); r.got = append(r.got, s); r.mu.Unlock() }
func (r *recorder) Approve(_ context.Context, runID, step string, ok bool, _, by string) error {
	r.add("approve " + runID + " " + step + " " + by)
	return nil
}
func (r *recorder) Cancel(_ context.Context, runID, _ string) error {
	if runID == "gone" {
		return run.Errorf(run.CodeNotFound, "no run with id %q", runID)
	}
	r.add("cancel " + runID)
	return nil
}
func (r *recorder) Pause(context.Context, string, string, string) error {
	return errors.New("the disk is full")
}
func (r *recorder) Unpause(_ context.Context, runID, _, _ string) error {
	r.add("unpause " + runID)
	return nil
}

// The owner polls every ControlPollEvery on the engine clock, applies each request and answers
// it: success, the run.Error's own code, or internal for another error; an unknown action is
// invalid_request.
func TestControlPollerAppliesAndAnswersOnTheClock(t *testing.T) {
	clk := clock.NewStub(t0)
	cs := &memControl{}
	rec := &recorder{}
	p := NewControlPoller(cs, clk, rec)
	ctx := context.Background()
	ids := map[string]int64{}
	for _, r := range []store.ControlRequest{
		{RunID: "r1", Action: "approve", StepKey: "review", Approved: true, By: "td"},
		{RunID: "gone", Action: "cancel"},
		{RunID: "r2", Action: "pause"},
		{RunID: "r3", Action: "unpause"},
		{RunID: "r4", Action: "explode"},
	} {
		id, _ := cs.RequestControl(ctx, r)
		ids[r.Action] = id
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	waitTimers(t, clk, 1)
	if len(rec.got) != 0 {
		t.Fatalf("applied %v before the first poll", rec.got)
	}
	clk.Advance(ControlPollEvery)
	waitUntil(t, "the poll to answer every request", func() bool { p, _ := cs.PendingControl(ctx); return len(p) == 0 })
	want := map[string]store.ControlAnswer{
		"approve": {Handled: true},
		"cancel":  {Handled: true, ErrorCode: run.CodeNotFound, Error: `no run with id "gone"`},
		"pause":   {Handled: true, ErrorCode: run.CodeInternal, Error: "the disk is full"},
		"unpause": {Handled: true},
		"explode": {Handled: true, ErrorCode: run.CodeInvalidRequest, Error: `unknown control action "explode"`},
	}
	for action, w := range want {
		if a, _ := cs.ControlAnswer(ctx, ids[action]); a != w {
			t.Errorf("%s: answer %+v; want %+v", action, a, w)
		}
	}
	if len(rec.got) != 2 || rec.got[0] != "approve r1 review td" || rec.got[1] != "unpause r3" {
		t.Fatalf("applied %v", rec.got)
	}
	p.Stop()
	p.Stop() // twice
}

// A requester gets the owner's answer, with its code; with no answer it gives up after
// ControlAnswerWait on the engine clock, code timeout, and the request stays filed.
func TestRequestControlWaitsForTheAnswerOnTheClock(t *testing.T) {
	clk := clock.NewStub(t0)
	cs := &memControl{}
	ctx := context.Background()
	owner := NewControlPoller(cs, clk, &recorder{})

	done := make(chan error, 1)
	go func() {
		done <- RequestControl(ctx, cs, clk, "flow.db", store.ControlRequest{RunID: "gone", Action: "cancel"})
	}()
	waitTimers(t, clk, 1) // the requester polls for the answer
	owner.Poll(ctx)
	clk.Advance(controlAnswerPoll)
	var re *run.Error
	if err := <-done; !errors.As(err, &re) || re.Code != run.CodeNotFound {
		t.Fatalf("RequestControl: %v; want the owner's not_found", err)
	}

	go func() {
		done <- RequestControl(ctx, cs, clk, "flow.db", store.ControlRequest{RunID: "r9", Action: "cancel"})
	}()
	for waited := time.Duration(0); waited <= ControlAnswerWait; waited += controlAnswerPoll {
		waitTimers(t, clk, 1)
		clk.Advance(controlAnswerPoll)
	}
	if err := <-done; !errors.As(err, &re) || re.Code != run.CodeTimeout {
		t.Fatalf("RequestControl without an owner: %v; want code timeout", err)
	}
	if p, _ := cs.PendingControl(ctx); len(p) != 1 || p[0].RunID != "r9" {
		t.Fatalf("pending %+v; want the unanswered request still filed", p)
	}
}
