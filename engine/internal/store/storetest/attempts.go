package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// AttemptStore is a store with the AttemptLog feature.
type AttemptStore interface {
	store.Store
	store.AttemptLog
}

// ExerciseAttemptLog runs the suite of store.AttemptLog: attempts written with their step,
// replaced whole, listed by step or for the run, the window kept per step, atomicity with the
// batch, and (when the store is a Pruner) deletion with the run. newStore must return a new,
// empty store for each call; the suite closes it. ExerciseAttemptLogVolume is the volume part,
// apart so that a store's tests run it in a test of its own (make test runs it without -race).
func ExerciseAttemptLog(t *testing.T, newStore func(t *testing.T) AttemptStore) {
	t.Helper()
	open := func(t *testing.T) AttemptStore {
		s := newStore(t)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	t.Run("AttemptsRoundTrip", func(t *testing.T) { t.Parallel(); testAttemptsRoundTrip(t, open(t)) })
	t.Run("AttemptsAtomic", func(t *testing.T) { t.Parallel(); testAttemptsAtomic(t, open(t)) })
	t.Run("AttemptsWindow", func(t *testing.T) { t.Parallel(); testAttemptsWindow(t, open(t)) })
	t.Run("AttemptsPruned", func(t *testing.T) { t.Parallel(); testAttemptsPruned(t, open(t)) })
	t.Run("Resumes", func(t *testing.T) { t.Parallel(); testResumes(t, open(t)) })
	t.Run("Search", func(t *testing.T) { t.Parallel(); testSearch(t, open(t)) })
}

// ExerciseAttemptLogVolume runs the volume part of ExerciseAttemptLog: 3,000 steps of one run
// (see testAttemptsManySteps). newStore must return a new, empty store; the suite closes it.
func ExerciseAttemptLogVolume(t *testing.T, newStore func(t *testing.T) AttemptStore) {
	t.Helper()
	s := newStore(t)
	t.Cleanup(func() { _ = s.Close() })
	testAttemptsManySteps(t, s)
}

// testAttemptsManySteps: 3,000 steps of one run with two attempts each (the start and the end of
// the second written apart), listed for the run and by step.
func testAttemptsManySteps(t *testing.T, s AttemptStore) {
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	const n = 3000
	key := func(i int) string { return fmt.Sprintf("each[%d].x", i) }
	for base := 0; base < n; base += 500 {
		b := &store.Batch{}
		for i := base; i < base+500; i++ {
			b.Steps = append(b.Steps, store.Step{RunID: "r1", Key: key(i), StepID: "x", Kind: "tool", Status: run.StepRunning, Attempt: 2, Insert: true})
			b.Attempts = append(b.Attempts, store.Attempt{RunID: "r1", StepKey: key(i), Attempt: 1, Status: run.StepFailed, Tool: "t"},
				store.Attempt{RunID: "r1", StepKey: key(i), Attempt: 2, Status: run.StepRunning, Tool: "t"})
		}
		write(t, s, b)
	}
	b := &store.Batch{}
	for i := 0; i < n; i++ {
		b.Attempts = append(b.Attempts, store.Attempt{RunID: "r1", StepKey: key(i), Attempt: 2, Status: run.StepCompleted, Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	write(t, s, b)
	all := listAttempts(t, s, "r1", "")
	if len(all) != 2*n {
		t.Fatalf("ListAttempts(run) = %d attempts; want %d", len(all), 2*n)
	}
	for _, i := range []int{0, 1023, 1024, 2999} {
		got := listAttempts(t, s, "r1", key(i))
		if len(got) != 2 || got[0].Status != run.StepFailed || got[1].Status != run.StepCompleted || got[1].StepKey != key(i) ||
			!sameJSON(got[1].Args, json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))) {
			t.Errorf("attempts of %s = %+v; want its failed first and its completed second", key(i), got)
		}
	}
}

// testResumes: Resumes lists a run's workflow_resumed events only, in Seq order.
func testResumes(t *testing.T, s AttemptStore) {
	ev := func(id, typ string, at time.Duration, detail string) run.Event {
		e := run.Event{RunID: id, Type: typ, Time: t0.Add(at), Status: "running"}
		if detail != "" {
			e.Detail = json.RawMessage(detail)
		}
		return e
	}
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0), newRun("r2", t0)}, Events: []run.Event{
		ev("r1", run.EventWorkflowStarted, 0, ""), ev("r2", run.EventWorkflowResumed, 0, ""), ev("r1", run.EventStepEnter, time.Second, ""),
	}})
	if got, err := s.Resumes(context.Background(), "r1"); err != nil || len(got) != 0 {
		t.Fatalf("Resumes of a run never resumed = %+v, %v; want none", got, err)
	}
	write(t, s, &store.Batch{Events: []run.Event{ev("r1", run.EventWorkflowResumed, time.Minute, `{"by":"alice","forced":["b"]}`), ev("r1", run.EventStepExit, time.Minute, "")}})
	write(t, s, &store.Batch{Events: []run.Event{ev("r1", run.EventWorkflowResumed, time.Hour, "")}})
	got, err := s.Resumes(context.Background(), "r1")
	if err != nil || len(got) != 2 {
		t.Fatalf("Resumes = %+v, %v; want 2", got, err)
	}
	if !got[0].Time.Equal(t0.Add(time.Minute)) || !sameJSON(got[0].Detail, json.RawMessage(`{"by":"alice","forced":["b"]}`)) ||
		!got[1].Time.Equal(t0.Add(time.Hour)) || got[0].Seq >= got[1].Seq || got[0].Type != run.EventWorkflowResumed {
		t.Errorf("Resumes = %+v; want the two resumes of r1 in order, with their detail", got)
	}
	if got, _ := s.Resumes(context.Background(), "ghost"); len(got) != 0 {
		t.Errorf("Resumes(unknown run) = %+v; want none", got)
	}
}

func listAttempts(t *testing.T, s store.AttemptLog, runID, key string) []store.Attempt {
	t.Helper()
	got, err := s.ListAttempts(context.Background(), runID, key)
	if err != nil {
		t.Fatalf("ListAttempts(%q, %q): %v", runID, key, err)
	}
	return got
}

func attemptNumbers(as []store.Attempt) []int {
	out := []int{}
	for _, a := range as {
		out = append(out, a.Attempt)
	}
	return out
}

func testAttemptsRoundTrip(t *testing.T, s AttemptStore) {
	st := store.Step{RunID: "r1", Key: "b[0].x", StepID: "x", Kind: "tool", Status: run.StepRunning, Attempt: 1, StartedAt: t0, UpdatedAt: t0, Insert: true}
	a1 := store.Attempt{RunID: "r1", StepKey: "b[0].x", Attempt: 1, Tool: "render", Status: run.StepRunning, StartedAt: t0,
		Args: json.RawMessage(`{"shot":"sh010","note":"é\u0000 ✓","token":"[redacted]"}`), Host: "farm-01", PID: 4242}
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}, Steps: []store.Step{st}, Attempts: []store.Attempt{a1}})
	got := listAttempts(t, s, "r1", "b[0].x")
	if len(got) != 1 {
		t.Fatalf("ListAttempts = %+v; want the running attempt", got)
	}
	g := got[0]
	if g.RunID != "r1" || g.StepKey != "b[0].x" || g.Attempt != 1 || g.Tool != "render" || g.Status != run.StepRunning ||
		!g.StartedAt.Equal(t0) || !g.FinishedAt.IsZero() || g.Host != "farm-01" || g.PID != 4242 || g.Worker != "" ||
		g.ErrorKind != "" || g.Exit != "" || !sameJSON(g.Args, a1.Args) {
		t.Errorf("attempt read back = %+v; want %+v", g, a1)
	}

	// The attempt ends (replaced whole), a second one starts and ends, and another step has one.
	a1.Status, a1.FinishedAt = run.StepFailed, t0.Add(time.Second)
	a1.ErrorKind, a1.ErrorMessage, a1.ErrorTrace, a1.Exit = run.KindWorkerLost, "worker pid 4242 was lost: exit status 139", "trace\nline", "exit status 139"
	a1.Worker, a1.Host, a1.PID = "maya/4242", "", 0
	a2 := store.Attempt{RunID: "r1", StepKey: "b[0].x", Attempt: 2, Tool: "render", Status: run.StepCompleted,
		StartedAt: t0.Add(2 * time.Second), FinishedAt: t0.Add(3 * time.Second)}
	other := store.Attempt{RunID: "r1", StepKey: "a", Attempt: 1, Tool: "dcc/publish", Status: run.StepCompleted, StartedAt: t0}
	st.Status, st.Attempt = run.StepCompleted, 2
	st.Insert = false
	write(t, s, &store.Batch{Steps: []store.Step{st, {RunID: "r1", Key: "a", StepID: "a", Kind: "tool_remote", Status: run.StepCompleted, Attempt: 1, Insert: true}},
		Attempts: []store.Attempt{a1, a2, other}})
	got = listAttempts(t, s, "r1", "b[0].x")
	if fmt.Sprint(attemptNumbers(got)) != "[1 2]" {
		t.Fatalf("attempts of b[0].x = %v; want [1 2]", attemptNumbers(got))
	}
	g = got[0]
	if g.Status != run.StepFailed || !g.FinishedAt.Equal(a1.FinishedAt) || g.ErrorKind != run.KindWorkerLost ||
		g.ErrorMessage != a1.ErrorMessage || g.ErrorTrace != a1.ErrorTrace || g.Exit != "exit status 139" ||
		g.Worker != "maya/4242" || g.Host != "" || g.PID != 0 {
		t.Errorf("attempt 1 after its end = %+v; want %+v", g, a1)
	}
	if got[1].Args != nil || got[1].Status != run.StepCompleted {
		t.Errorf("attempt 2 = %+v; want completed, no args", got[1])
	}
	all := listAttempts(t, s, "r1", "")
	if len(all) != 3 || all[0].StepKey != "a" || all[1].StepKey != "b[0].x" || all[2].Attempt != 2 {
		t.Errorf("ListAttempts(run) = %+v; want a#1, b[0].x#1, b[0].x#2", all)
	}
	if got := listAttempts(t, s, "nope", ""); len(got) != 0 {
		t.Errorf("ListAttempts(unknown run) = %+v; want none", got)
	}
	if got := listAttempts(t, s, "r1", "nope"); len(got) != 0 {
		t.Errorf("ListAttempts(unknown step) = %+v; want none", got)
	}
	// Out of order (a resumed step's attempts after a gap, an older one written late): listed by number.
	for _, n := range []int{7, 5, 6, 4} {
		write(t, s, &store.Batch{Attempts: []store.Attempt{{RunID: "r1", StepKey: "a", Attempt: n, Status: run.StepFailed}}})
	}
	if got := attemptNumbers(listAttempts(t, s, "r1", "a")); fmt.Sprint(got) != "[1 4 5 6 7]" {
		t.Errorf("attempts written 7, 5, 6, 4 after 1 listed as %v; want [1 4 5 6 7]", got)
	}
}

// testAttemptsAtomic: an attempt of an unknown run fails the whole batch.
func testAttemptsAtomic(t *testing.T, s AttemptStore) {
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	err := s.Write(context.Background(), &store.Batch{
		Steps:    []store.Step{{RunID: "r1", Key: "x", StepID: "x", Kind: "tool", Status: run.StepRunning, Attempt: 1}},
		Attempts: []store.Attempt{{RunID: "r1", StepKey: "x", Attempt: 1, Status: run.StepRunning}, {RunID: "ghost", StepKey: "x", Attempt: 1, Status: run.StepRunning}},
	})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Write with an attempt of an unknown run = %v; want ErrNotFound", err)
	}
	if got := listAttempts(t, s, "r1", ""); len(got) != 0 {
		t.Errorf("after a failed batch, attempts = %+v; want none", got)
	}
	if steps, _ := s.ListSteps(context.Background(), "r1"); len(steps) != 0 {
		t.Errorf("after a failed batch, steps = %+v; want none", steps)
	}
}

// testAttemptsWindow: a step keeps its first MaxAttemptsFirst and last MaxAttemptsLast attempts,
// also when several attempts of it are in one batch.
func testAttemptsWindow(t *testing.T, s AttemptStore) {
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	const n = store.MaxAttemptsFirst + store.MaxAttemptsLast + 140
	for a := 1; a <= n; a++ {
		b := &store.Batch{Attempts: []store.Attempt{{RunID: "r1", StepKey: "loop", Attempt: a, Tool: "t", Status: run.StepRunning, StartedAt: t0}}}
		if a%3 == 0 { // the end of an attempt written with the start of the next
			b.Attempts[0].Status = run.StepFailed
			b.Attempts = append(b.Attempts, store.Attempt{RunID: "r1", StepKey: "loop", Attempt: a + 1, Tool: "t", Status: run.StepRunning})
			a++
		}
		write(t, s, b)
	}
	got := attemptNumbers(listAttempts(t, s, "r1", "loop"))
	var want []int
	for a := 1; a <= n; a++ {
		if a <= store.MaxAttemptsFirst || a > n-store.MaxAttemptsLast {
			want = append(want, a)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("attempts kept of %d = %v; want the first %d and the last %d: %v", n, got, store.MaxAttemptsFirst, store.MaxAttemptsLast, want)
	}
	if store.AttemptDropped(store.MaxAttemptsFirst+store.MaxAttemptsLast) != 0 || store.AttemptDropped(store.MaxAttemptsFirst+store.MaxAttemptsLast+1) != store.MaxAttemptsFirst+1 {
		t.Errorf("AttemptDropped edges wrong")
	}
}

// testAttemptsPruned: a pruned run's attempts go with it; another run's stay.
func testAttemptsPruned(t *testing.T, s AttemptStore) {
	p, ok := s.(store.Pruner)
	if !ok {
		t.Skip("the store has no Pruner") // not a failure: Prune is another feature
	}
	done, live := newRun("done", t0), newRun("live", t0)
	done.Status, done.FinishedAt = run.StatusCompleted, t0.Add(time.Minute)
	write(t, s, &store.Batch{CreateRuns: []store.Run{done, live}, Attempts: []store.Attempt{
		{RunID: "done", StepKey: "x", Attempt: 1, Status: run.StepCompleted, Args: json.RawMessage(`{"a":1}`)},
		{RunID: "live", StepKey: "x", Attempt: 1, Status: run.StepRunning, Tool: "render", Args: json.RawMessage(`{"shot":"sh010"}`), ErrorMessage: "m"},
	}})
	if n, err := p.Prune(context.Background(), t0.Add(time.Hour), nil); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	if got := listAttempts(t, s, "done", ""); len(got) != 0 {
		t.Errorf("attempts of the pruned run = %+v; want none", got)
	}
	if got := listAttempts(t, s, "live", ""); len(got) != 1 || got[0].Tool != "render" || got[0].ErrorMessage != "m" ||
		!sameJSON(got[0].Args, json.RawMessage(`{"shot":"sh010"}`)) {
		t.Errorf("attempts of the live run = %+v; want its one, whole", got)
	}
}

// AttemptFlood writes 100,000 attempts of one step (a retry loop across many resumes), a
// thousand per batch with the end of each attempt, and checks the store keeps the window only,
// and that an error message of invalid UTF-8 and NUL bytes is stored (as valid text). For the
// stores' Redteam tests.
func AttemptFlood(t *testing.T, s AttemptStore) {
	write(t, s, &store.Batch{CreateRuns: []store.Run{newRun("r1", t0)}})
	const n, per = 100_000, 1000
	for base := 0; base < n; base += per {
		b := &store.Batch{Attempts: make([]store.Attempt, 0, per)}
		for a := base + 1; a <= base+per; a++ {
			b.Attempts = append(b.Attempts, store.Attempt{RunID: "r1", StepKey: "loop", Attempt: a, Tool: "t", Status: run.StepFailed,
				StartedAt: t0, FinishedAt: t0, ErrorKind: "transient", ErrorMessage: "bad \xff\xfe\x00 bytes", Args: json.RawMessage(`{"n":1}`)})
		}
		write(t, s, b)
	}
	got := listAttempts(t, s, "r1", "loop")
	if len(got) != store.MaxAttemptsFirst+store.MaxAttemptsLast || got[0].Attempt != 1 ||
		got[store.MaxAttemptsFirst].Attempt != n-store.MaxAttemptsLast+1 || got[len(got)-1].Attempt != n {
		t.Fatalf("after %d attempts, %d kept (%v…); want the first %d and the last %d", n, len(got), attemptNumbers(got[:min(12, len(got))]),
			store.MaxAttemptsFirst, store.MaxAttemptsLast)
	}
	if m := got[0].ErrorMessage; !strings.HasPrefix(m, "bad ") || !strings.HasSuffix(m, " bytes") {
		t.Errorf("an error message of invalid bytes read back as %q; want it kept (PostgreSQL: the bad bytes as U+FFFD)", m)
	}
}
