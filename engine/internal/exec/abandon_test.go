package exec_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/internal/tools"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// abandonSpec sleeps in its first step, long enough for a test to act on the run meanwhile.
const abandonSpec = `
steps:
  - {id: wait, tool: flow__sleep, args: {ms: 60000}}
  - {id: after, tool: flow__echo, args: {value: 1}, depends_on: [wait]}
`

// waitSteps polls until the run has a step row.
func waitSteps(t *testing.T, st store.Store, id string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if steps, _ := st.ListSteps(context.Background(), id); len(steps) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the first step never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// assertUntouched checks that the run's record is as it was before it was abandoned: running,
// its step running, no terminal event.
func assertUntouched(t *testing.T, st store.Store, id string, lastSeq uint64) {
	t.Helper()
	ctx := context.Background()
	rec, _ := st.GetRun(ctx, id)
	steps, _ := st.ListSteps(ctx, id)
	evs, _ := st.ListEvents(ctx, store.EventFilter{AfterSeq: lastSeq})
	if rec.Status != run.StatusRunning || len(steps) != 1 || steps[0].Status != run.StepRunning || len(evs) != 0 {
		t.Fatalf("abandoned run written: %s, steps %+v, %d events after it", rec.Status, steps, len(evs))
	}
}

// Abandon (a run whose lease another engine holds now) stops the run at once and writes nothing
// of it: the record stays as committed, for the engine that holds it.
func TestAbandonWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h, err := b.x.Start(context.Background(), exec.Params{RunID: "r", Spec: mustSpec(t, abandonSpec), Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	waitSteps(t, b.store, "r")
	last, _ := b.store.LastSeq(context.Background())
	h.Abandon()
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed by Abandon")
	}
	if h.Status() != run.StatusInterrupted || h.Unsaved() != nil {
		t.Fatalf("handle: %s %+v", h.Status(), h.Unsaved())
	}
	time.Sleep(50 * time.Millisecond) // the step's goroutine unwinds: it must not write either
	assertUntouched(t, b.store, "r", last)
}

// leaseLostStore refuses every write with store.ErrLeaseLost once lost is set, as the PostgreSQL
// store does for an engine that lost a run's lease.
type leaseLostStore struct {
	*memstore.Store
	lost atomic.Bool
}

func (s *leaseLostStore) Write(ctx context.Context, b *store.Batch) error {
	if s.lost.Load() {
		return wrapped{errors.New("writing to run r: another engine holds it")}
	}
	return s.Store.Write(ctx, b)
}

type wrapped struct{ error }

func (w wrapped) Unwrap() error { return store.ErrLeaseLost }

// A write refused with ErrLeaseLost abandons the run: no storage failure, no terminal write.
func TestLeaseLostWriteAbandons(t *testing.T) {
	t.Parallel()
	st := &leaseLostStore{Store: memstore.New()}
	t.Cleanup(func() { _ = st.Close() })
	c := clock.New()
	x := exec.New(exec.Config{Store: st, Clock: c, Router: tools.NewRouter(c, nil)})
	h, err := x.Start(context.Background(), exec.Params{RunID: "r", Spec: mustSpec(t, `
steps:
  - {id: wait, tool: flow__sleep, args: {ms: 300}}
  - {id: after, tool: flow__echo, args: {value: 1}, depends_on: [wait]}
`), Origin: "local"})
	if err != nil {
		t.Fatal(err)
	}
	waitSteps(t, st, "r")
	last, _ := st.LastSeq(context.Background())
	st.lost.Store(true) // the step's completion is refused
	select {
	case <-h.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the run did not stop")
	}
	if h.Status() != run.StatusInterrupted || h.Unsaved() != nil {
		t.Fatalf("handle: %s %+v", h.Status(), h.Unsaved())
	}
	st.lost.Store(false)
	assertUntouched(t, st.Store, "r", last)
}

// connLostStore fails the writes that fail says with store.ErrConnectionLost (wrapped, as the
// PostgreSQL store does for a write whose connection was lost before its commit was confirmed),
// and counts the writes it refused.
type connLostStore struct {
	*memstore.Store
	fail    func(b *store.Batch) bool
	refused atomic.Int32
}

func (s *connLostStore) Write(ctx context.Context, b *store.Batch) error {
	if s.fail(b) {
		s.refused.Add(1)
		return fmt.Errorf("database x: writing: %w: unexpected EOF", store.ErrConnectionLost)
	}
	return s.Store.Write(ctx, b)
}

// A write that lost its database connection (store.ErrConnectionLost: applied or not, nobody
// knows) abandons the run as a lost lease does: it does not fail, nothing more is written, and
// the takeover path resumes it. Both for a step's write and for the run's terminal write.
func TestConnectionLostWriteAbandons(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(b *store.Batch) bool
	}{
		{"step", func(b *store.Batch) bool { return len(b.Steps) > 0 && b.Steps[0].Key == "after" }},
		{"terminal", func(b *store.Batch) bool { return len(b.RunUpdates) > 0 && b.RunUpdates[0].Status.Terminal() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &connLostStore{Store: memstore.New(), fail: tc.fail}
			t.Cleanup(func() { _ = st.Close() })
			c := clock.New()
			x := exec.New(exec.Config{Store: st, Clock: c, Router: tools.NewRouter(c, nil)})
			h, err := x.Start(context.Background(), exec.Params{RunID: "r", Spec: mustSpec(t, `
steps:
  - {id: first, tool: flow__echo, args: {value: 1}}
  - {id: after, tool: flow__echo, args: {value: 2}, depends_on: [first]}
`), Origin: "local"})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the run did not stop")
			}
			if h.Status() != run.StatusInterrupted || h.Unsaved() != nil {
				t.Fatalf("handle: %s, unsaved %+v; want interrupted (abandoned), nothing unsaved", h.Status(), h.Unsaved())
			}
			if n := st.refused.Load(); n != 1 {
				t.Errorf("%d writes refused, want 1: nothing is tried again after the lost one", n)
			}
			rec, _ := st.GetRun(context.Background(), "r")
			if rec.Status != run.StatusRunning {
				t.Errorf("stored run %s, want running (left to the takeover path)", rec.Status)
			}
		})
	}
}
