// Package storetest is the behavioural test suite every store.Store implementation must pass:
// call Exercise from the implementation's tests with a constructor of fresh, empty stores, and
// the sub-suite of each optional feature the store has (ExercisePruner, ExerciseController,
// ExerciseFireLog; see store's features.go). The features of a database that several engines
// share are tested across several stores on one database, on a clock the test moves
// (ExerciseLeaser, ExerciseCallQueue: Shared).
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// t0 has millisecond precision, which every store must keep.
var t0 = time.Date(2026, 3, 8, 3, 0, 0, 123_000_000, time.UTC)

// Exercise runs the shared suite. newStore must return a new, empty store for each call; the
// suite closes it.
func Exercise(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	open := func(t *testing.T) store.Store {
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"RunRoundTrip", testRunRoundTrip},
		{"RunPriority", testRunPriority},
		{"CreateExistingRun", testCreateExisting},
		{"BatchIsAtomic", testBatchAtomic},
		{"RunUpdate", testRunUpdate},
		{"StepsUpsertInFirstWriteOrder", testSteps},
		{"StepsWithTheInsertHint", testInsertHint},
		{"EventsSeqAndFilters", testEvents},
		{"EventsByType", testEventTypes},
		{"ConcurrentWrites", testConcurrentWrites},
		{"Idempotency", testIdempotency},
		{"ListRunsFilters", testListRuns},
		{"ParentRuns", testParentRuns},
		{"ProgressAsCommitted", testProgressAsCommitted},
		{"MarkInterrupted", testMarkInterrupted},
		{"Artefacts", testArtefacts},
		{"Close", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

func write(t *testing.T, s store.Store, b *store.Batch) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func newRun(id string, created time.Time) store.Run {
	return store.Run{
		ID: id, Name: "wf", SpecJSON: json.RawMessage(`{"name":"wf","steps":[]}`), SpecHash: "abc",
		Inputs: json.RawMessage(`{"date":"2026-03-08"}`), Status: run.StatusRunning, Origin: "local",
		CreatedAt: created, UpdatedAt: created,
	}
}

// sameJSON compares two JSON texts by value; nil and empty both mean "absent".
func sameJSON(a, b json.RawMessage) bool {
	if len(bytes.TrimSpace(a)) == 0 || len(bytes.TrimSpace(b)) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b))
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

func testRunRoundTrip(t *testing.T, s store.Store) {
	r := newRun("r1", t0)
	r.EnvAllow = []string{"DCC_*"}
	r.Trigger = json.RawMessage(`{"schedule_id":"nightly"}`)
	r.Progress = run.Progress{Completed: 1, Total: 3}
	write(t, s, &store.Batch{CreateRuns: []store.Run{r}})
	got, err := s.GetRun(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r.ID || got.Name != r.Name || got.SpecHash != r.SpecHash || got.Status != r.Status ||
		got.Origin != r.Origin || !reflect.DeepEqual(got.EnvAllow, r.EnvAllow) ||
		got.Progress != (run.Progress{Completed: 0, Total: 3}) || // a live run's progress is as committed: no finished step
		got.Error != nil || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0) || !got.FinishedAt.IsZero() {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
	}
	if !sameJSON(got.SpecJSON, r.SpecJSON) || !sameJSON(got.Inputs, r.Inputs) || !sameJSON(got.Trigger, r.Trigger) {
		t.Fatalf("JSON fields changed: %s %s %s", got.SpecJSON, got.Inputs, got.Trigger)
	}
	if _, err := s.GetRun(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown run: %v", err)
	}
	if _, err := s.ListSteps(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ListSteps of unknown run: %v", err)
	}
	steps, err := s.ListSteps(context.Background(), "r1")
	if err != nil || len(steps) != 0 {
		t.Fatalf("steps of a new run: %v %v", steps, err)
	}
}

func testCreateExisting(t *testing.T, s store.Store) {
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	err := s.Write(context.Background(), &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
}

func testBatchAtomic(t *testing.T, s store.Store) {
	ctx := context.Background()
	before, _ := s.LastSeq(ctx)
	err := s.Write(ctx, &store.Batch{
		CreateRuns: []store.Run{newRun("r1", t0)},
		Events:     []run.Event{{RunID: "r1", Type: run.EventWorkflowStarted, Time: t0}},
		RunUpdates: []store.RunUpdate{{ID: "missing", Status: run.StatusFailed}},
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("batch with an unknown run update: %v", err)
	}
	if _, err := s.GetRun(ctx, "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed batch must apply nothing; GetRun: %v", err)
	}
	evs, _ := s.ListEvents(ctx, store.EventFilter{})
	after, _ := s.LastSeq(ctx)
	if len(evs) != 0 || after != before {
		t.Fatalf("a failed batch appended events: %v (last seq %d)", evs, after)
	}
	err = s.Write(ctx, &store.Batch{Steps: []store.Step{{RunID: "ghost", Key: "a", Status: run.StepRunning}}})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("step of an unknown run: %v", err)
	}
	// A run and its first step and event may come in one batch.
	write(t, s, &store.Batch{
		CreateRuns: []store.Run{newRun("r2", t0)},
		Steps:      []store.Step{{RunID: "r2", Key: "a", StepID: "a", Kind: "tool", Status: run.StepRunning, StartedAt: t0, UpdatedAt: t0}},
		Events:     []run.Event{{RunID: "r2", Type: run.EventStepEnter, StepKey: "a", Time: t0}},
	})
}

func testRunUpdate(t *testing.T, s store.Store) {
	ctx := context.Background()
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	fin := t0.Add(time.Minute)
	rerr := &store.RunError{Kind: run.KindTransient, Message: "boom", StepKey: "per_file[2].export", Trace: "tb"}
	write(t, s, &store.Batch{RunUpdates: []store.RunUpdate{{
		ID: "r1", Status: run.StatusFailed, Error: rerr, Progress: run.Progress{Completed: 2, Total: 5},
		UpdatedAt: fin, FinishedAt: fin,
	}}})
	rerr.Message = "mutated after Write"
	got, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := store.RunError{Kind: run.KindTransient, Message: "boom", StepKey: "per_file[2].export", Trace: "tb"}
	if got.Status != run.StatusFailed || got.Error == nil || *got.Error != want ||
		got.Progress != (run.Progress{Completed: 2, Total: 5}) || !got.FinishedAt.Equal(fin) || !got.UpdatedAt.Equal(fin) ||
		!got.CreatedAt.Equal(t0) || got.Name != "wf" {
		t.Fatalf("after update: %+v (error %+v)", got, got.Error)
	}
	// A resume-like update clears the error and the finish time.
	write(t, s, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r1", Status: run.StatusRunning, UpdatedAt: fin}}})
	got, _ = s.GetRun(ctx, "r1")
	if got.Error != nil || !got.FinishedAt.IsZero() || got.Status != run.StatusRunning {
		t.Fatalf("after clearing update: %+v", got)
	}
}

func testSteps(t *testing.T, s store.Store) {
	ctx := context.Background()
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0), newRun("r2", t0)}})
	keys := []string{"list", "per_file[0].export", "per_file[1].export", "per_file", "outer[1].inner[2].leaf"}
	for i, k := range keys {
		write(t, s, &store.Batch{Steps: []store.Step{{RunID: "r1", Key: k, StepID: "x", Kind: "tool",
			Status: run.StepRunning, Attempt: 1, StartedAt: t0.Add(time.Duration(i) * time.Second), UpdatedAt: t0}}})
	}
	write(t, s, &store.Batch{Steps: []store.Step{{RunID: "r2", Key: "other", Status: run.StepRunning}}})
	done := store.Step{
		RunID: "r1", Key: "per_file[0].export", StepID: "export", Kind: "tool", Status: run.StepCompleted, Attempt: 3,
		Output: json.RawMessage(`{"fbx":"/out/a.fbx","n":1.5}`), FileRefs: json.RawMessage(`[{"uri":"artefact://sha256/00","size":3}]`),
		Cached: true, StartedAt: t0, FinishedAt: t0.Add(time.Hour), UpdatedAt: t0.Add(time.Hour),
	}
	failed := store.Step{RunID: "r1", Key: "list", StepID: "list", Kind: "tool", Status: run.StepFailed, Attempt: 2,
		ErrorKind: "validation", ErrorMessage: "bad", ErrorTrace: "Traceback…", Worker: "maya/4242", StartedAt: t0, FinishedAt: t0, UpdatedAt: t0,
		Logs: json.RawMessage(`[{"stream":"stdout","text":"opening a.ma","attempt":1},{"stream":"stderr","text":"Warning: ünïcode","attempt":2},{"stream":"log","text":"cached 3 frames","attempt":2,"fields":{"frame":3}}]`), LogsDropped: 7,
		Progress: json.RawMessage(`{"done":37,"total":120,"message":"caching frames…","attempt":2}`)}
	write(t, s, &store.Batch{Steps: []store.Step{done, failed}})
	steps, err := s.ListSteps(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != len(keys) {
		t.Fatalf("%d steps, want %d: %+v", len(steps), len(keys), steps)
	}
	for i, k := range keys {
		if steps[i].Key != k {
			t.Fatalf("step %d is %q, want %q (first-write order)", i, steps[i].Key, k)
		}
	}
	g := steps[1]
	if g.Status != run.StepCompleted || g.Attempt != 3 || !g.Cached || g.StepID != "export" || g.Kind != "tool" ||
		!sameJSON(g.Output, done.Output) || !sameJSON(g.FileRefs, done.FileRefs) ||
		!g.FinishedAt.Equal(done.FinishedAt) || !g.StartedAt.Equal(t0) || len(g.Logs) != 0 || g.LogsDropped != 0 || len(g.Progress) != 0 {
		t.Fatalf("upserted step: %+v", g)
	}
	f := steps[0]
	if f.Status != run.StepFailed || f.ErrorKind != "validation" || f.ErrorMessage != "bad" || f.ErrorTrace != "Traceback…" || f.Worker != "maya/4242" || len(f.Output) != 0 ||
		!sameJSON(f.Logs, failed.Logs) || f.LogsDropped != 7 || !sameJSON(f.Progress, failed.Progress) {
		t.Fatalf("failed step: %+v", f)
	}
	other, _ := s.ListSteps(ctx, "r2")
	if len(other) != 1 || other[0].Key != "other" {
		t.Fatalf("steps of r2: %+v", other)
	}
}

// testInsertHint writes steps as the executor does, first writes with Insert set, then updates
// them out of order.
func testInsertHint(t *testing.T, s store.Store) {
	ctx := context.Background()
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	step := func(key string, st run.StepStatus, attempt int, insert bool) store.Step {
		return store.Step{RunID: "r1", Key: key, StepID: key, Kind: "tool", Status: st, Attempt: attempt, Insert: insert}
	}
	write(t, s, &store.Batch{Steps: []store.Step{step("a", run.StepRunning, 1, true)}})
	write(t, s, &store.Batch{Steps: []store.Step{step("a", run.StepCompleted, 1, false)}})
	write(t, s, &store.Batch{Steps: []store.Step{step("b", run.StepRunning, 1, true), step("c", run.StepRunning, 1, true)}})
	write(t, s, &store.Batch{Steps: []store.Step{step("b", run.StepRetrying, 2, false)}})
	write(t, s, &store.Batch{Steps: []store.Step{step("d", run.StepRunning, 1, true)}})
	write(t, s, &store.Batch{Steps: []store.Step{step("c", run.StepFailed, 1, false), step("b", run.StepCompleted, 2, false)}})
	write(t, s, &store.Batch{Steps: []store.Step{step("e", run.StepSkipped, 0, false)}}) // no hint: still an insert
	write(t, s, &store.Batch{Steps: []store.Step{step("a", run.StepCompleted, 3, false)}})
	steps, err := s.ListSteps(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, st := range steps {
		got += fmt.Sprintf("%s:%s:%d ", st.Key, st.Status, st.Attempt)
	}
	if want := "a:completed:3 b:completed:2 c:failed:1 d:running:1 e:skipped:0 "; got != want {
		t.Fatalf("steps %q, want %q", got, want)
	}
}

func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	if last, err := s.LastSeq(ctx); err != nil || last != 0 {
		t.Fatalf("LastSeq of an empty store: %d %v", last, err)
	}
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("a", t0), newRun("b", t0)}})
	b1 := &store.Batch{Events: []run.Event{
		{RunID: "a", Type: run.EventWorkflowStarted, Status: string(run.StatusRunning), Time: t0},
		{RunID: "b", Type: run.EventWorkflowStarted, Status: string(run.StatusRunning), Time: t0},
		{RunID: "a", Type: run.EventStepExit, StepKey: "per_file[3].export", Status: string(run.StepFailed), Attempt: 2,
			Progress: run.Progress{Completed: 4, Total: 10}, Detail: json.RawMessage(`{"error":{"kind":"timeout"}}`), Time: t0.Add(time.Second)},
	}}
	write(t, s, b1)
	if !(b1.Events[0].Seq > 0 && b1.Events[1].Seq > b1.Events[0].Seq && b1.Events[2].Seq > b1.Events[1].Seq) {
		t.Fatalf("Seq not assigned in order: %d %d %d", b1.Events[0].Seq, b1.Events[1].Seq, b1.Events[2].Seq)
	}
	b2 := &store.Batch{Events: []run.Event{{RunID: "b", Type: run.EventWorkflowTerminal, Time: t0}}}
	write(t, s, b2)
	if b2.Events[0].Seq <= b1.Events[2].Seq {
		t.Fatalf("Seq not increasing across batches: %d after %d", b2.Events[0].Seq, b1.Events[2].Seq)
	}
	last, _ := s.LastSeq(ctx)
	if last != b2.Events[0].Seq {
		t.Fatalf("LastSeq %d, want %d", last, b2.Events[0].Seq)
	}
	all, err := s.ListEvents(ctx, store.EventFilter{})
	if err != nil || len(all) != 4 {
		t.Fatalf("all events: %v %v", all, err)
	}
	e := all[2]
	if e.Seq != b1.Events[2].Seq || e.RunID != "a" || e.Type != run.EventStepExit || e.StepKey != "per_file[3].export" ||
		e.Status != "failed" || e.Attempt != 2 || e.Progress != (run.Progress{Completed: 4, Total: 10}) ||
		!sameJSON(e.Detail, b1.Events[2].Detail) || !e.Time.Equal(t0.Add(time.Second)) {
		t.Fatalf("event round trip: %+v", e)
	}
	if len(all[0].Detail) != 0 {
		t.Fatalf("nil detail came back as %q", all[0].Detail)
	}
	after, _ := s.ListEvents(ctx, store.EventFilter{AfterSeq: all[0].Seq, Limit: 2})
	if len(after) != 2 || after[0].Seq != all[1].Seq || after[1].Seq != all[2].Seq {
		t.Fatalf("after+limit: %+v", after)
	}
	ofA, _ := s.ListEvents(ctx, store.EventFilter{RunID: "a"})
	if len(ofA) != 2 || ofA[0].RunID != "a" || ofA[1].RunID != "a" {
		t.Fatalf("events of a: %+v", ofA)
	}
	ofB, _ := s.ListEvents(ctx, store.EventFilter{RunID: "b", AfterSeq: all[1].Seq})
	if len(ofB) != 1 || ofB[0].Type != run.EventWorkflowTerminal {
		t.Fatalf("events of b after its start: %+v", ofB)
	}
	none, _ := s.ListEvents(ctx, store.EventFilter{AfterSeq: last})
	if len(none) != 0 {
		t.Fatalf("events after the last: %+v", none)
	}
	if err := s.Write(ctx, &store.Batch{Events: []run.Event{{RunID: "ghost", Type: run.EventStepEnter}}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("event of an unknown run: %v", err)
	}
}

// testEventTypes checks EventFilter.Types, alone and with RunID, AfterSeq and Limit (which
// counts the events selected, so a caller pages through them).
func testEventTypes(t *testing.T, s store.Store) {
	ctx := context.Background()
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("a", t0), newRun("b", t0)}})
	var evs []run.Event
	for i := range 12 {
		r := []string{"a", "b"}[i%2]
		evs = append(evs, run.Event{RunID: r, Type: run.EventStepLog, StepKey: "s", Time: t0})
		if i%3 == 0 {
			evs = append(evs, run.Event{RunID: r, Type: run.EventApproveRequested, StepKey: fmt.Sprintf("gate%d", i), Time: t0,
				Detail: json.RawMessage(`{"prompt":"ok?"}`)})
		}
	}
	evs = append(evs, run.Event{RunID: "a", Type: run.EventWorkflowTerminal, Time: t0})
	b := &store.Batch{Events: evs}
	write(t, s, b)
	want := func(f store.EventFilter) []run.Event {
		var out []run.Event
		for _, ev := range b.Events {
			if ev.Seq > f.AfterSeq && (f.RunID == "" || ev.RunID == f.RunID) &&
				(len(f.Types) == 0 || slices.Contains(f.Types, ev.Type)) && (f.Limit <= 0 || len(out) < f.Limit) {
				out = append(out, ev)
			}
		}
		return out
	}
	approvals := []string{run.EventApproveRequested}
	for _, f := range []store.EventFilter{
		{Types: approvals},
		{RunID: "a", Types: approvals},
		{RunID: "b", Types: approvals},
		{RunID: "a", Types: []string{run.EventApproveRequested, run.EventWorkflowTerminal}},
		{RunID: "a", Types: approvals, Limit: 1},
		{RunID: "a", Types: approvals, AfterSeq: b.Events[1].Seq},
		{Types: []string{run.EventStepLog}, Limit: 5},
		{Types: []string{"no_such_type"}},
		{RunID: "ghost", Types: approvals},
		{RunID: "a", Types: []string{}}, // empty: every type
	} {
		got, err := s.ListEvents(ctx, f)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		w := want(f)
		if len(got) != len(w) {
			t.Fatalf("%+v: %d events, want %d: %+v", f, len(got), len(w), got)
		}
		for i := range got {
			if got[i].Seq != w[i].Seq || got[i].Type != w[i].Type || got[i].RunID != w[i].RunID || got[i].StepKey != w[i].StepKey ||
				!sameJSON(got[i].Detail, w[i].Detail) {
				t.Fatalf("%+v: event %d is %+v, want %+v", f, i, got[i], w[i])
			}
		}
	}
	if n := len(want(store.EventFilter{RunID: "a", Types: approvals})); n != 2 {
		t.Fatalf("the suite's own data: %d approve_requested events of a, want 2", n)
	}
	// Paging with Limit and AfterSeq visits every selected event once.
	var paged []uint64
	for after := uint64(0); ; {
		page, err := s.ListEvents(ctx, store.EventFilter{AfterSeq: after, Types: approvals, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page[0].Seq)
		after = page[0].Seq
	}
	if all := want(store.EventFilter{Types: approvals}); len(paged) != len(all) {
		t.Fatalf("paged through %v, want the %d approve_requested events", paged, len(all))
	}
}

func testConcurrentWrites(t *testing.T, s store.Store) {
	ctx := context.Background()
	const writers, each = 32, 25
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r", t0)}})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				key := fmt.Sprintf("it[%d].s", w*each+i)
				b := &store.Batch{
					Steps:  []store.Step{{RunID: "r", Key: key, Status: run.StepCompleted}},
					Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: key}},
				}
				if err := s.Write(ctx, b); err != nil {
					errs <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs, _ := s.ListEvents(ctx, store.EventFilter{})
	steps, _ := s.ListSteps(ctx, "r")
	if len(evs) != writers*each || len(steps) != writers*each {
		t.Fatalf("%d events and %d steps, want %d", len(evs), len(steps), writers*each)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("events out of order at %d: %d then %d", i, evs[i-1].Seq, evs[i].Seq)
		}
	}
}

func testIdempotency(t *testing.T, s store.Store) {
	ctx := context.Background()
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	exp := t0.Add(time.Minute)
	write(t, s, &store.Batch{Idempotency: []store.IdempotencyEntry{
		{Scope: "global", Key: "export_a", Output: json.RawMessage(`{"v":1}`), FileRefs: json.RawMessage(`[{"uri":"x"}]`), CreatedAt: t0, ExpiresAt: exp},
		{Scope: "workflow", RunID: "r1", Key: "export_a", Output: json.RawMessage(`{"v":2}`), CreatedAt: t0},
	}})
	get := func(scope, runID, key string, now time.Time) (store.IdempotencyEntry, bool) {
		t.Helper()
		e, ok, err := s.GetIdempotency(ctx, scope, runID, key, now)
		if err != nil {
			t.Fatal(err)
		}
		return e, ok
	}
	if e, ok := get("global", "", "export_a", t0); !ok || !sameJSON(e.Output, json.RawMessage(`{"v":1}`)) ||
		!sameJSON(e.FileRefs, json.RawMessage(`[{"uri":"x"}]`)) || !e.ExpiresAt.Equal(exp) {
		t.Fatalf("global hit: %+v %v", e, ok)
	}
	if _, ok := get("global", "", "export_a", exp.Add(-time.Millisecond)); !ok {
		t.Fatal("just before expiry is a hit")
	}
	if _, ok := get("global", "", "export_a", exp); ok {
		t.Fatal("at expiry is a miss")
	}
	if e, ok := get("workflow", "r1", "export_a", t0.Add(1000*time.Hour)); !ok || !sameJSON(e.Output, json.RawMessage(`{"v":2}`)) {
		t.Fatalf("workflow entry without expiry: %+v %v", e, ok)
	}
	for _, k := range [][3]string{{"workflow", "r2", "export_a"}, {"workflow", "", "export_a"}, {"global", "", "export_b"}, {"global", "r1", "export_a"}} {
		if _, ok := get(k[0], k[1], k[2], t0); ok {
			t.Fatalf("%v should miss", k)
		}
	}
	// Put replaces.
	write(t, s, &store.Batch{Idempotency: []store.IdempotencyEntry{{Scope: "global", Key: "export_a", Output: json.RawMessage(`{"v":3}`), CreatedAt: t0}}})
	if e, ok := get("global", "", "export_a", exp.Add(time.Hour)); !ok || !sameJSON(e.Output, json.RawMessage(`{"v":3}`)) || !e.ExpiresAt.IsZero() {
		t.Fatalf("replaced entry: %+v %v", e, ok)
	}
	write(t, s, &store.Batch{Idempotency: []store.IdempotencyEntry{
		{Scope: "global", Key: "old1", Output: json.RawMessage(`1`), CreatedAt: t0, ExpiresAt: t0.Add(time.Second)},
		{Scope: "global", Key: "old2", Output: json.RawMessage(`2`), CreatedAt: t0, ExpiresAt: t0.Add(2 * time.Second)},
		{Scope: "global", Key: "young", Output: json.RawMessage(`3`), CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
	}})
	n, err := s.PurgeExpired(ctx, t0.Add(2*time.Second))
	if err != nil || n != 2 {
		t.Fatalf("PurgeExpired: %d %v", n, err)
	}
	if _, ok := get("global", "", "young", t0); !ok {
		t.Fatal("purge removed a live entry")
	}
	if n, _ := s.PurgeExpired(ctx, t0.Add(2*time.Second)); n != 0 {
		t.Fatalf("second purge removed %d", n)
	}
}

func testListRuns(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(id, name string, st run.Status, at time.Duration) store.Run {
		r := newRun(id, t0.Add(at))
		r.Name, r.Status = name, st
		return r
	}
	write(t, s, &store.Batch{CreateRuns: []store.Run{
		mk("r1", "a", run.StatusCompleted, 0),
		mk("r2", "b", run.StatusFailed, time.Minute),
		mk("r3", "a", run.StatusRunning, 2*time.Minute),
		mk("r4", "a", run.StatusFailed, 3*time.Minute),
	}})
	ids := func(f store.RunFilter) string {
		t.Helper()
		runs, err := s.ListRuns(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, r := range runs {
			out += r.ID + " "
		}
		return out
	}
	cases := []struct {
		f    store.RunFilter
		want string
	}{
		{store.RunFilter{}, "r4 r3 r2 r1 "},
		{store.RunFilter{Name: "a"}, "r4 r3 r1 "},
		{store.RunFilter{Statuses: []run.Status{run.StatusFailed}}, "r4 r2 "},
		{store.RunFilter{Statuses: []run.Status{run.StatusFailed, run.StatusRunning}, Name: "a"}, "r4 r3 "},
		{store.RunFilter{Since: t0.Add(time.Minute)}, "r4 r3 r2 "},
		{store.RunFilter{Until: t0.Add(2 * time.Minute)}, "r2 r1 "},
		{store.RunFilter{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, "r3 r2 "},
		{store.RunFilter{Limit: 2}, "r4 r3 "},
		{store.RunFilter{Name: "zzz"}, ""},
		// Cursor paging: after r3 come the older runs; a run created at the same time as the
		// cursor is listed only when its id is smaller; the cursor's run need not exist.
		{store.RunFilter{After: &store.RunPosition{CreatedAt: t0.Add(2 * time.Minute), ID: "r3"}}, "r2 r1 "},
		{store.RunFilter{After: &store.RunPosition{CreatedAt: t0.Add(2 * time.Minute), ID: "r4"}}, "r3 r2 r1 "},
		{store.RunFilter{After: &store.RunPosition{CreatedAt: t0.Add(2 * time.Minute), ID: "r3"}, Limit: 1}, "r2 "},
		{store.RunFilter{After: &store.RunPosition{CreatedAt: t0.Add(3 * time.Minute), ID: "r4"}, Name: "a"}, "r3 r1 "},
		{store.RunFilter{After: &store.RunPosition{CreatedAt: t0, ID: "r1"}}, ""},
	}
	for _, c := range cases {
		if got := ids(c.f); got != c.want {
			t.Errorf("ListRuns(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
}

// testProgressAsCommitted: the progress of a run that has not finished is read from what is
// committed (its finished step rows, the total of its newest event), not from the run row,
// which the step path does not write; a finished run's is the one written.
func testProgressAsCommitted(t *testing.T, s store.Store) {
	ctx := context.Background()
	r := newRun("r", t0)
	r.Progress = run.Progress{Total: 3}
	step := func(key string, st run.StepStatus) store.Step {
		return store.Step{RunID: "r", Key: key, StepID: key, Kind: "tool", Status: st, UpdatedAt: t0}
	}
	progress := func(what string, want run.Progress) {
		t.Helper()
		got, err := s.GetRun(ctx, "r")
		if err != nil || got.Progress != want {
			t.Fatalf("%s: GetRun progress %+v (%v), want %+v", what, got.Progress, err, want)
		}
		listed, err := s.ListRuns(ctx, store.RunFilter{})
		if err != nil || len(listed) != 1 || listed[0].Progress != want {
			t.Fatalf("%s: ListRuns %+v (%v), want progress %+v", what, listed, err, want)
		}
	}
	write(t, s, &store.Batch{CreateRuns: []store.Run{r}, Events: []run.Event{
		{RunID: "r", Type: run.EventWorkflowStarted, Progress: run.Progress{Total: 3}, Time: t0}}})
	progress("created", run.Progress{Total: 3})
	write(t, s, &store.Batch{Steps: []store.Step{step("a", run.StepRunning)}})
	progress("a running", run.Progress{Total: 3})
	write(t, s, &store.Batch{Steps: []store.Step{step("a", run.StepCompleted), step("b", run.StepRunning)},
		Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: "a", Progress: run.Progress{Completed: 1, Total: 3}, Time: t0}}})
	progress("a completed", run.Progress{Completed: 1, Total: 3})
	// A foreach expands: its iterations' events carry the larger total.
	write(t, s, &store.Batch{Steps: []store.Step{step("each", run.StepRunning), step("each[0].x", run.StepFailed),
		step("each[1].x", run.StepSkipped), step("each[2].x", run.StepCancelled), step("each[3].x", run.StepRetrying)},
		Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: "each[0].x", Progress: run.Progress{Completed: 4, Total: 8}, Time: t0}}})
	progress("foreach expanded", run.Progress{Completed: 4, Total: 8})
	// A step run again (a resume) is not finished any more.
	write(t, s, &store.Batch{Steps: []store.Step{step("a", run.StepRunning)}})
	progress("a running again", run.Progress{Completed: 3, Total: 8})
	// Never less total than completed, whatever the newest event says.
	write(t, s, &store.Batch{Steps: []store.Step{step("a", run.StepCompleted), step("b", run.StepCompleted), step("c", run.StepCompleted),
		step("d", run.StepCompleted), step("e", run.StepCompleted), step("f", run.StepCompleted)}})
	progress("more finished than the newest event's total", run.Progress{Completed: 9, Total: 9})
	// A finished run's progress is the one written with it.
	write(t, s, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusCompleted,
		Progress: run.Progress{Completed: 5, Total: 5}, UpdatedAt: t0, FinishedAt: t0}}})
	progress("finished", run.Progress{Completed: 5, Total: 5})
}

func testMarkInterrupted(t *testing.T, s store.Store) {
	ctx := context.Background()
	mk := func(id string, st run.Status) store.Run {
		r := newRun(id, t0)
		r.Status = st
		return r
	}
	write(t, s, &store.Batch{
		CreateRuns: []store.Run{mk("done", run.StatusCompleted), mk("live", run.StatusRunning), mk("gate", run.StatusWaiting),
			mk("held", run.StatusPaused)},
		Steps: []store.Step{
			{RunID: "held", Key: "p1", Status: run.StepCompleted},
			{RunID: "held", Key: "p2", Status: run.StepRunning},
			{RunID: "held", Key: "p3", Status: run.StepRetrying},
			{RunID: "held", Key: "p4", Status: run.StepWaitingResources},
			{RunID: "live", Key: "a", Status: run.StepCompleted},
			{RunID: "live", Key: "b", Status: run.StepRetrying},
			{RunID: "live", Key: "c", Status: run.StepRunning},
			{RunID: "live", Key: "d", Status: run.StepWaitingResources},
			{RunID: "gate", Key: "g", Status: run.StepWaitingApproval},
			{RunID: "done", Key: "x", Status: run.StepCompleted},
		},
		Events: []run.Event{
			{RunID: "live", Type: run.EventStepExit, StepKey: "a", Progress: run.Progress{Completed: 1, Total: 7}, Time: t0},
		},
	})
	now := t0.Add(time.Hour)
	runErr := &store.RunError{Kind: "interrupted", Message: "the process stopped"}
	detail := json.RawMessage(`{"reason":"crash"}`)
	lastBefore, _ := s.LastSeq(ctx)
	ids, err := s.MarkInterrupted(ctx, now, store.Interruption{Error: runErr, Detail: detail})
	if err != nil || !reflect.DeepEqual(ids, []string{"gate", "live"}) {
		t.Fatalf("MarkInterrupted: %v %v", ids, err)
	}
	for id, want := range map[string]run.Status{"done": run.StatusCompleted, "live": run.StatusInterrupted, "gate": run.StatusInterrupted} {
		r, _ := s.GetRun(ctx, id)
		if r.Status != want {
			t.Errorf("run %s is %s, want %s", id, r.Status, want)
		}
		if want == run.StatusInterrupted && (!r.FinishedAt.Equal(now) || !r.UpdatedAt.Equal(now)) {
			t.Errorf("run %s times: %v %v", id, r.UpdatedAt, r.FinishedAt)
		}
		if want == run.StatusInterrupted && (r.Error == nil || *r.Error != *runErr) {
			t.Errorf("run %s error %+v, want %+v", id, r.Error, runErr)
		}
	}
	// One interrupted event per run, in id order, written with the runs (one atomic write: a
	// crash after it cannot leave interrupted runs without their events).
	evs, _ := s.ListEvents(ctx, store.EventFilter{AfterSeq: lastBefore})
	if len(evs) != 2 {
		t.Fatalf("events after MarkInterrupted: %+v; want one interrupted event per run", evs)
	}
	for i, id := range []string{"gate", "live"} {
		ev := evs[i]
		r, _ := s.GetRun(ctx, id)
		if ev.RunID != id || ev.Type != run.EventInterrupted || ev.Status != string(run.StatusInterrupted) ||
			!ev.Time.Equal(now) || ev.Progress != r.Progress || !sameJSON(ev.Detail, detail) || ev.Seq <= lastBefore {
			t.Errorf("event %d: %+v; want the interrupted event of run %s (progress %+v)", i, ev, id, r.Progress)
		}
	}
	// The interrupted run's progress is what was committed, its interrupted steps counted.
	if r, _ := s.GetRun(ctx, "live"); r.Progress != (run.Progress{Completed: 4, Total: 7}) {
		t.Errorf("interrupted run progress %+v, want 4/7 (its 4 steps finished; the total of its newest event)", r.Progress)
	}
	steps, _ := s.ListSteps(ctx, "live")
	want := []run.StepStatus{run.StepCompleted, run.StepInterrupted, run.StepInterrupted, run.StepInterrupted}
	if len(steps) != len(want) {
		t.Errorf("live run's steps %+v; want %d", steps, len(want))
	}
	for i, st := range steps {
		if st.Status != want[i] {
			t.Errorf("step %s is %s, want %s", st.Key, st.Status, want[i])
		}
	}
	gate, _ := s.ListSteps(ctx, "gate")
	if gate[0].Status != run.StepInterrupted {
		t.Errorf("approval step is %s", gate[0].Status)
	}
	// A paused run stays paused (not in ids, no event: Unpause resumes it), its steps in flight
	// interrupted.
	if r, _ := s.GetRun(ctx, "held"); r.Status != run.StatusPaused || r.Error != nil || !r.FinishedAt.IsZero() {
		t.Errorf("paused run after MarkInterrupted: %s, error %+v, finished %v; want paused, no error, not finished", r.Status, r.Error, r.FinishedAt)
	}
	held, _ := s.ListSteps(ctx, "held")
	for i, want := range []run.StepStatus{run.StepCompleted, run.StepInterrupted, run.StepInterrupted, run.StepInterrupted} {
		if i >= len(held) || held[i].Status != want {
			t.Errorf("paused run's steps %+v; want %v at %d", held, want, i)
		}
	}
	if ids, _ := s.MarkInterrupted(ctx, now, store.Interruption{Error: runErr, Detail: detail}); len(ids) != 0 {
		t.Fatalf("second MarkInterrupted changed %v", ids)
	}
	if more, _ := s.ListEvents(ctx, store.EventFilter{AfterSeq: evs[1].Seq}); len(more) != 0 {
		t.Fatalf("second MarkInterrupted wrote events %+v", more)
	}
	// The event numbers go on after the recovery's.
	next := &store.Batch{Events: []run.Event{{RunID: "live", Type: run.EventWorkflowStarted, Time: now}}}
	write(t, s, next)
	if next.Events[0].Seq <= evs[1].Seq {
		t.Fatalf("an event written after MarkInterrupted got Seq %d, not above %d", next.Events[0].Seq, evs[1].Seq)
	}
}

// testPrune deletes finished runs by age and status with everything of theirs, keeps the
// others whole (their steps, events and idempotency entries, bytes included), never deletes a
// run that has not finished, and never numbers an event with a Seq it used before.
func testPrune(t *testing.T, s PrunerStore) {
	ctx := context.Background()
	old, recent := t0.Add(time.Minute), t0.Add(2*time.Hour)
	finished := func(id string, st run.Status, at time.Time) store.Run {
		r := newRun(id, t0)
		r.Status, r.FinishedAt, r.Progress = st, at, run.Progress{Completed: 1, Total: 1}
		return r
	}
	runs := []store.Run{
		finished("old_done", run.StatusCompleted, old), finished("old_failed", run.StatusFailed, old),
		finished("old_cancelled", run.StatusCancelled, old), finished("old_interrupted", run.StatusInterrupted, old),
		finished("recent_done", run.StatusCompleted, recent), newRun("live", t0),
	}
	// A run resumed after it had finished: running again, its old finish time cleared.
	resumed := newRun("resumed", t0)
	runs = append(runs, resumed)
	b := &store.Batch{CreateRuns: runs}
	for _, r := range runs {
		b.Steps = append(b.Steps, store.Step{RunID: r.ID, Key: "a", StepID: "a", Kind: "tool", Status: run.StepCompleted,
			Output: json.RawMessage(`{"of":"` + r.ID + `"}`), ErrorMessage: "note of " + r.ID, StartedAt: t0, UpdatedAt: t0})
		b.Events = append(b.Events,
			run.Event{RunID: r.ID, Type: run.EventStepExit, StepKey: "a", Detail: json.RawMessage(`{"of":"` + r.ID + `"}`), Time: t0},
			run.Event{RunID: r.ID, Type: run.EventWorkflowTerminal, Time: t0})
		b.Idempotency = append(b.Idempotency, store.IdempotencyEntry{Scope: "workflow", RunID: r.ID, Key: "k",
			Output: json.RawMessage(`{"of":"` + r.ID + `"}`), CreatedAt: t0})
	}
	b.Idempotency = append(b.Idempotency, store.IdempotencyEntry{Scope: "global", Key: "g", Output: json.RawMessage(`1`), CreatedAt: t0})
	write(t, s, b)
	lastBefore, _ := s.LastSeq(ctx)
	cutoff := t0.Add(time.Hour)

	n, err := s.Prune(ctx, cutoff, []run.Status{run.StatusFailed})
	if err != nil || n != 1 {
		t.Fatalf("Prune(failed) = %d, %v; want 1", n, err)
	}
	if n, err := s.Prune(ctx, t0.Add(100*time.Hour), []run.Status{run.StatusRunning, run.StatusWaiting}); err != nil || n != 0 {
		t.Fatalf("Prune(running, waiting) = %d, %v; want 0: a run that has not finished is never deleted", n, err)
	}
	if n, err := s.Prune(ctx, cutoff, nil); err != nil || n != 3 {
		t.Fatalf("Prune(every status) = %d, %v; want 3 (completed, cancelled, interrupted)", n, err)
	}
	if n, err := s.Prune(ctx, cutoff, nil); err != nil || n != 0 {
		t.Fatalf("second Prune = %d, %v; want 0", n, err)
	}

	gone := []string{"old_done", "old_failed", "old_cancelled", "old_interrupted"}
	kept := []string{"recent_done", "live", "resumed"}
	for _, id := range gone {
		if _, err := s.GetRun(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("pruned run %s: GetRun %v", id, err)
		}
		if _, err := s.ListSteps(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("pruned run %s: ListSteps %v", id, err)
		}
		if evs, _ := s.ListEvents(ctx, store.EventFilter{RunID: id}); len(evs) != 0 {
			t.Errorf("pruned run %s still has events %+v", id, evs)
		}
		if _, ok, _ := s.GetIdempotency(ctx, "workflow", id, "k", t0); ok {
			t.Errorf("pruned run %s still has its workflow-scoped idempotency entry", id)
		}
	}
	listed, _ := s.ListRuns(ctx, store.RunFilter{})
	if len(listed) != len(kept) {
		t.Errorf("ListRuns after prune: %d runs, want %d", len(listed), len(kept))
	}
	all, _ := s.ListEvents(ctx, store.EventFilter{})
	if len(all) != 2*len(kept) {
		t.Fatalf("%d events left, want %d: %+v", len(all), 2*len(kept), all)
	}
	for i, ev := range all {
		if i > 0 && ev.Seq <= all[i-1].Seq {
			t.Fatalf("events out of order after prune: %+v", all)
		}
		if !slices.Contains(kept, ev.RunID) {
			t.Fatalf("event of pruned run %s listed", ev.RunID)
		}
	}
	for _, id := range kept {
		if _, err := s.GetRun(ctx, id); err != nil {
			t.Errorf("kept run %s: %v", id, err)
		}
		steps, err := s.ListSteps(ctx, id)
		if err != nil || len(steps) != 1 || !sameJSON(steps[0].Output, json.RawMessage(`{"of":"`+id+`"}`)) ||
			steps[0].ErrorMessage != "note of "+id || steps[0].Key != "a" {
			t.Errorf("steps of kept run %s: %+v %v", id, steps, err)
		}
		evs, _ := s.ListEvents(ctx, store.EventFilter{RunID: id})
		if len(evs) != 2 || evs[0].StepKey != "a" || !sameJSON(evs[0].Detail, json.RawMessage(`{"of":"`+id+`"}`)) ||
			evs[1].Type != run.EventWorkflowTerminal {
			t.Errorf("events of kept run %s: %+v", id, evs)
		}
		after, _ := s.ListEvents(ctx, store.EventFilter{RunID: id, AfterSeq: evs[0].Seq})
		if len(after) != 1 || after[0].Seq != evs[1].Seq {
			t.Errorf("events of kept run %s after %d: %+v", id, evs[0].Seq, after)
		}
		if e, ok, _ := s.GetIdempotency(ctx, "workflow", id, "k", t0); !ok || !sameJSON(e.Output, json.RawMessage(`{"of":"`+id+`"}`)) {
			t.Errorf("idempotency entry of kept run %s: %+v %v", id, e, ok)
		}
	}
	if _, ok, _ := s.GetIdempotency(ctx, "global", "", "g", t0); !ok {
		t.Error("the global idempotency entry was pruned")
	}
	from, _ := s.ListEvents(ctx, store.EventFilter{AfterSeq: all[1].Seq, Limit: 2})
	if len(from) != 2 || from[0].Seq != all[2].Seq || from[1].Seq != all[3].Seq {
		t.Errorf("events after %d (limit 2) after prune: %+v", all[1].Seq, from)
	}

	if last, _ := s.LastSeq(ctx); last != lastBefore {
		t.Errorf("LastSeq went from %d to %d by pruning", lastBefore, last)
	}
	more := &store.Batch{Events: []run.Event{{RunID: "live", Type: run.EventStepEnter, StepKey: "b", Time: t0}}}
	write(t, s, more)
	if more.Events[0].Seq <= lastBefore {
		t.Fatalf("an event written after the prune got Seq %d, not above %d", more.Events[0].Seq, lastBefore)
	}
	if evs, _ := s.ListEvents(ctx, store.EventFilter{AfterSeq: lastBefore}); len(evs) != 1 || evs[0].Seq != more.Events[0].Seq {
		t.Errorf("the event written after the prune: %+v", evs)
	}
}

func testArtefacts(t *testing.T, s store.Store) {
	ctx := context.Background()
	data := []byte("fbx bytes")
	sum := sha256.Sum256(data)
	h, err := s.PutArtefact(ctx, data)
	if err != nil || h != hex.EncodeToString(sum[:]) {
		t.Fatalf("PutArtefact: %q %v", h, err)
	}
	data[0] = 'X' // the store must have copied
	got, err := s.GetArtefact(ctx, h)
	if err != nil || string(got) != "fbx bytes" {
		t.Fatalf("GetArtefact: %q %v", got, err)
	}
	h2, _ := s.PutArtefact(ctx, []byte("fbx bytes"))
	if h2 != h {
		t.Fatalf("same bytes, different hash %s", h2)
	}
	empty, err := s.PutArtefact(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := s.GetArtefact(ctx, empty); err != nil || len(b) != 0 {
		t.Fatalf("empty artefact: %q %v", b, err)
	}
	if _, err := s.GetArtefact(ctx, "00"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown artefact: %v", err)
	}
}

func testClose(t *testing.T, s store.Store) {
	ctx := context.Background()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{newRun("r", t0)}}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if _, err := s.GetRun(ctx, "r"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("GetRun after Close: %v", err)
	}
	if _, err := s.ListEvents(ctx, store.EventFilter{}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ListEvents after Close: %v", err)
	}
}
