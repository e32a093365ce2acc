package exec_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// eventList serves events by page, as a store does.
type eventList struct {
	evs []run.Event
	err error
}

func (l eventList) ListEvents(_ context.Context, f store.EventFilter) ([]run.Event, error) {
	if l.err != nil {
		return nil, l.err
	}
	var out []run.Event
	for _, ev := range l.evs {
		if ev.Seq > f.AfterSeq && len(out) < f.Limit {
			out = append(out, ev)
		}
	}
	return out, nil
}

func events(types ...string) eventList {
	var l eventList
	for i, typ := range types {
		ev := run.Event{Seq: uint64(i + 1), RunID: "r1", Type: typ}
		if typ == run.EventOnFailureStarted {
			ev.Detail = []byte(fmt.Sprintf(`{"error":{"kind":"fatal","message":"boom %d"}}`, i+1))
		}
		l.evs = append(l.evs, ev)
	}
	return l
}

func TestFailingWhenInterrupted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	got, err := exec.FailingWhenInterrupted(ctx, events(run.EventWorkflowStarted, run.EventOnFailureStarted, run.EventStepEnter), "r1")
	if err != nil || got == nil || got.Message != "boom 2" {
		t.Fatalf("interrupted in on_failure: %+v, %v; want the error of its on_failure_started", got, err)
	}
	got, err = exec.FailingWhenInterrupted(ctx, events(run.EventWorkflowStarted, run.EventOnFailureStarted, run.EventWorkflowResumed), "r1")
	if err != nil || got != nil {
		t.Fatalf("resumed since: %+v, %v; want nil", got, err)
	}
	long := make([]string, 4500) // three pages
	for i := range long {
		long[i] = run.EventStepEnter
	}
	long[0], long[4001] = run.EventWorkflowStarted, run.EventOnFailureStarted
	if got, err = exec.FailingWhenInterrupted(ctx, events(long...), "r1"); err != nil || got == nil || got.Message != "boom 4002" {
		t.Fatalf("over pages: %+v, %v", got, err)
	}
	_, err = exec.FailingWhenInterrupted(ctx, eventList{err: errors.New("disk")}, "r1")
	if run.CodeOf(err) != run.CodeInternal {
		t.Fatalf("a read error: %v; want code internal", err)
	}
}
