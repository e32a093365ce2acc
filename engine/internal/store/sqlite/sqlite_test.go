package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/run"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlite"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

func openTemp(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "flow.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestExercise(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return openTemp(t) })
	storetest.ExercisePruner(t, func(t *testing.T) storetest.PrunerStore { return openTemp(t) })
	storetest.ExerciseAttemptLog(t, func(t *testing.T) storetest.AttemptStore { return openTemp(t) })
	storetest.ExerciseController(t, func(t *testing.T) store.Controller { return openTemp(t) })
	storetest.ExerciseFireLog(t, func(t *testing.T) store.FireLog { return openTemp(t) })
	storetest.ExerciseBatchFires(t, func(t *testing.T) storetest.FireStore { return openTemp(t) })
	storetest.ExerciseCatalog(t, func(t *testing.T) store.Catalog { return openTemp(t) })
	storetest.ExerciseAssets(t, func(t *testing.T) storetest.AssetStore { return openTemp(t) })
}

// The volume parts of the suites (storetest.ExerciseAttemptLogVolume, ExerciseAssetsVolume):
// thousands of rows, checked for what is read back, not for concurrency. In GO_NORACE_TESTS.
func TestExerciseVolume(t *testing.T) {
	t.Run("AttemptLog", func(t *testing.T) {
		t.Parallel()
		storetest.ExerciseAttemptLogVolume(t, func(t *testing.T) storetest.AttemptStore { return openTemp(t) })
	})
	t.Run("Assets", func(t *testing.T) {
		t.Parallel()
		storetest.ExerciseAssetsVolume(t, func(t *testing.T) storetest.AssetStore { return openTemp(t) })
	})
}

// 100,000 file records read back by Under in pages of 1,000 (storetest.ExerciseAssetsScale):
// 0.6 to 0.8 s on two loaded cores, most of it decoding the rows; the bound, 2 s (what stale over
// 100,000 recorded files may take in all), leaves room for a busy machine. In GO_NORACE_TESTS:
// the race detector makes it 10 times slower.
func TestAssetsScale(t *testing.T) {
	if testing.Short() {
		t.Skip("a volume test: skipped under -short")
	}
	storetest.ExerciseAssetsScale(t, openTemp(t), 2*time.Second)
}

func TestSchemaVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(fmt.Sprintf("PRAGMA user_version = %d", sqlite.SchemaVersion()+5)); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	_, err = sqlite.Open(ctx, path)
	var se *sqlite.SchemaError
	if !errors.As(err, &se) || se.Found != sqlite.SchemaVersion()+5 || !strings.Contains(err.Error(), "upgrade dcc-flow") {
		t.Fatalf("newer schema: %v", err)
	}
	// A database from before the first migration (version 0) is migrated.
	older := filepath.Join(t.TempDir(), "old.db")
	raw, _ = sql.Open("sqlite", older)
	if _, err := raw.Exec("CREATE TABLE notes (x TEXT)"); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	s, err = sqlite.Open(ctx, older)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.ListRuns(ctx, store.RunFilter{}); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateFromVersion2: a database written by schema version 2 (steps with a separate
// (run_id, ord) index) opens, migrates, and keeps its steps, their order and its events.
func TestMigrateFromVersion2(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v2.db")
	raw, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"migrations/0001_init.sql", "migrations/0002_control.sql"} {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatal(f, err)
		}
	}
	for _, q := range []string{
		`PRAGMA user_version = 2`,
		`INSERT INTO workflows (id, spec_json, spec_hash, status, created_at, updated_at) VALUES ('r', '{}', 'h', 'running', 1, 1)`,
		// Written in the order b, a, c: ord says so, not the key.
		`INSERT INTO workflow_steps (run_id, key, ord, step_id, kind, status, attempt, output, started_at)
			VALUES ('r', 'b', 7, 'b', 'tool', 'completed', 1, '{"n":1}', 5)`,
		`INSERT INTO workflow_steps (run_id, key, ord, step_id, kind, status, attempt, error_kind, error_message)
			VALUES ('r', 'a', 9, 'a', 'tool', 'failed', 2, 'transient', 'boom')`,
		`INSERT INTO workflow_steps (run_id, key, ord, step_id, kind, status) VALUES ('r', 'c', 12, 'c', 'tool', 'running')`,
		`INSERT INTO workflow_events (seq, run_id, time, type, step_key, status) VALUES (3, 'r', 1, 'step_exit', 'b', 'completed')`,
		`INSERT INTO workflow_events (seq, run_id, time, type, step_key, status) VALUES (4, 'r', 1, 'step_exit', 'a', 'failed')`,
	} {
		if _, err := raw.Exec(q); err != nil {
			t.Fatal(q, err)
		}
	}
	raw.Close()

	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	steps, err := s.ListSteps(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range steps {
		got = append(got, fmt.Sprintf("%s:%s:%d:%s:%s", st.Key, st.Status, st.Attempt, st.Output, st.ErrorMessage))
	}
	if want := "b:completed:1:{\"n\":1}: a:failed:2::boom c:running:0::"; strings.Join(got, " ") != want {
		t.Fatalf("steps after the migration: %s\nwant %s", strings.Join(got, " "), want)
	}
	// New steps come after the migrated ones; an existing one is updated in place.
	now := time.Now()
	if err := s.Write(ctx, &store.Batch{Steps: []store.Step{
		{RunID: "r", Key: "d", StepID: "d", Kind: "tool", Status: run.StepRunning, Insert: true},
		{RunID: "r", Key: "c", StepID: "c", Kind: "tool", Status: run.StepCompleted, FinishedAt: now},
	}, Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: "c", Time: now}}}); err != nil {
		t.Fatal(err)
	}
	steps, _ = s.ListSteps(ctx, "r")
	got = got[:0]
	for _, st := range steps {
		got = append(got, st.Key+":"+string(st.Status))
	}
	if want := "b:completed a:failed c:completed d:running"; strings.Join(got, " ") != want {
		t.Fatalf("steps: %s, want %s", strings.Join(got, " "), want)
	}
	evs, _ := s.ListEvents(ctx, store.EventFilter{RunID: "r", AfterSeq: 3})
	if len(evs) != 2 || evs[0].Seq != 4 || evs[1].Seq != 5 {
		t.Fatalf("events after seq 3: %+v", evs)
	}
}

func TestGroupCommitCoalescesAndIsolatesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	now := time.Now()
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r", SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	before := s.Commits()
	// A first write holds the lead until every writer is about to write (the commit observer runs
	// on the leader before it hands the lead on): the writers queue behind it whatever the
	// scheduler does, rather than each finding the store idle on a loaded machine and
	// committing alone (200 transactions for 200 writes, seen under a load of 16).
	release := make(chan struct{})
	var hold sync.Once
	s.ObserveCommits(func(store.Commit) { hold.Do(func() { <-release }) })
	plug := make(chan error, 1)
	go func() {
		plug <- s.Write(ctx, &store.Batch{Events: []run.Event{{RunID: "r", Type: run.EventStepEnter, Time: now}}})
	}()
	const writers = 200
	var wg, ready sync.WaitGroup
	errs := make([]error, writers)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		ready.Add(1)
		go func(i int) {
			defer wg.Done()
			b := &store.Batch{Steps: []store.Step{{RunID: "r", Key: fmt.Sprintf("s%d", i), StepID: "s", Kind: "tool", Status: run.StepCompleted}},
				Events: []run.Event{{RunID: "r", Type: run.EventStepExit, Time: now}}}
			if i%50 == 7 {
				b.Steps[0].RunID = "missing" // this batch fails alone
			}
			ready.Done()
			errs[i] = s.Write(ctx, b)
		}(i)
	}
	ready.Wait()
	close(release)
	wg.Wait()
	if err := <-plug; err != nil {
		t.Fatal(err)
	}
	s.ObserveCommits(nil)
	failed := 0
	for i, err := range errs {
		if i%50 == 7 {
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("batch %d: want ErrNotFound, got %v", i, err)
			}
			failed++
		} else if err != nil {
			t.Errorf("batch %d failed with the group: %v", i, err)
		}
	}
	steps, _ := s.ListSteps(ctx, "r")
	evs, _ := s.ListEvents(ctx, store.EventFilter{RunID: "r"})
	if len(steps) != writers-failed || len(evs) != writers-failed+1 { // +1: the first write's event
		t.Fatalf("%d steps, %d events, want %d and %d", len(steps), len(evs), writers-failed, writers-failed+1)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("sequence gap after a failed batch: %d then %d", evs[i-1].Seq, evs[i].Seq)
		}
	}
	if n := s.Commits() - before - 1; n >= writers {
		t.Fatalf("%d transactions for %d concurrent writes: no group commit", n, writers)
	}
	t.Logf("%d concurrent writes in %d transactions", writers, s.Commits()-before)
}

// ObserveCommits reports each committed transaction (storetest.ExerciseCommitObserver, shared
// with the PostgreSQL store).
func TestObserveCommits(t *testing.T) {
	t.Parallel()
	storetest.ExerciseCommitObserver(t, func(t *testing.T) storetest.CommitStore { return openTemp(t) })
}

// TestMultiRowWrites: a group's steps and events go in multi-row statements of 64, 32, … rows;
// every row lands, in order, and a key written twice in one batch keeps its second write.
func TestMultiRowWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTemp(t)
	now := time.Now()
	b := &store.Batch{CreateRuns: []store.Run{{ID: "r", SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}
	const n = 203 // 128 + 64 + 8 + 2 + 1
	for i := range n {
		key := fmt.Sprintf("each[%d].s", i)
		b.Steps = append(b.Steps, store.Step{RunID: "r", Key: key, StepID: "s", Kind: "tool", Status: run.StepRunning, Attempt: 1, Insert: true})
		b.Events = append(b.Events, run.Event{RunID: "r", Type: run.EventStepEnter, StepKey: key, Time: now})
	}
	b.Steps = append(b.Steps, store.Step{RunID: "r", Key: "each[5].s", StepID: "s", Kind: "tool", Status: run.StepCompleted, Attempt: 1,
		Output: json.RawMessage(`{"v":5}`)})
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	steps, _ := s.ListSteps(ctx, "r")
	evs, _ := s.ListEvents(ctx, store.EventFilter{RunID: "r"})
	if len(steps) != n || len(evs) != n {
		t.Fatalf("%d steps, %d events, want %d", len(steps), len(evs), n)
	}
	for i := range n {
		if want := fmt.Sprintf("each[%d].s", i); steps[i].Key != want || evs[i].StepKey != want || evs[i].Seq != b.Events[i].Seq {
			t.Fatalf("row %d: step %s, event %s seq %d (batch says %d), want %s", i, steps[i].Key, evs[i].StepKey, evs[i].Seq, b.Events[i].Seq, want)
		}
		if i > 0 && evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("seq gap at %d", i)
		}
	}
	if st := steps[5]; st.Status != run.StepCompleted || string(st.Output) != `{"v":5}` {
		t.Fatalf("each[5].s written twice in one batch: %+v", st)
	}
}

func benchStore(b *testing.B) *sqlite.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "flow.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	now := time.Now()
	if err := s.Write(context.Background(), &store.Batch{CreateRuns: []store.Run{{ID: "r", SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		b.Fatal(err)
	}
	return s
}

func stepBatch(i int64) *store.Batch {
	now := time.Now()
	return &store.Batch{
		Steps:  []store.Step{{RunID: "r", Key: fmt.Sprintf("each[%d].export", i), StepID: "export", Kind: "tool", Status: run.StepCompleted, Attempt: 1, Output: json.RawMessage(`{"fbx":"/proj/hero_v012.fbx"}`), StartedAt: now, FinishedAt: now, UpdatedAt: now, Insert: true}},
		Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: fmt.Sprintf("each[%d].export", i), Status: "completed", Attempt: 1, Time: now}},
	}
}

// BenchmarkWriteSequential: one durable step completion (step row + event) per Write.
func BenchmarkWriteSequential(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := s.Write(ctx, stepBatch(int64(i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/step")
}

// BenchmarkWriteParallel: 256 writers at once, as a wide fan-out does.
func BenchmarkWriteParallel(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(128)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := s.Write(ctx, stepBatch(n.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "steps/s")
	st, _ := os.Stat(s.Path())
	wal, _ := os.Stat(s.Path() + "-wal")
	size := st.Size()
	if wal != nil {
		size += wal.Size()
	}
	b.ReportMetric(float64(size)/float64(b.N)*1000/1024, "KiB/1k-steps")
}

func TestFireLogSurvivesReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 1, 3, 0, 0, 0, time.UTC)
	fires := []store.Fire{
		{ScheduleID: "nightly", Kind: store.FireFired, RunID: "r1", Origin: "schedule", ScheduledAt: t0, FiredAt: t0.Add(time.Second)},
		{ScheduleID: "nightly", Kind: store.FireSkipped, Reason: "max_concurrent", Message: "1 run active", Origin: "schedule", ScheduledAt: t0.Add(24 * time.Hour), FiredAt: t0.Add(24 * time.Hour)},
		{ScheduleID: "upload", Kind: store.FireFired, RunID: "r2", Origin: "webhook", DeliveryID: "d-1", ScheduledAt: t0, FiredAt: t0},
	}
	for _, f := range fires {
		if err := s.RecordFire(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	last, ok, err := s.LastFire(ctx, "nightly")
	if err != nil || !ok || last.Kind != store.FireSkipped || last.Reason != "max_concurrent" || !last.ScheduledAt.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("last fire %+v %v %v", last, ok, err)
	}
	all, err := s.Fires(ctx, "", 0)
	if err != nil || len(all) != 3 || all[0].ScheduleID != "upload" {
		t.Fatalf("fires %+v %v", all, err)
	}
	if got, _ := s.Fires(ctx, "nightly", 1); len(got) != 1 || got[0].Kind != store.FireSkipped {
		t.Fatalf("limit: %+v", got)
	}
	if f, ok, _ := s.FireByDelivery(ctx, "upload", "d-1"); !ok || f.RunID != "r2" {
		t.Fatalf("by delivery: %+v %v", f, ok)
	}
	if _, ok, _ := s.FireByDelivery(ctx, "upload", "d-2"); ok {
		t.Fatal("unknown delivery found")
	}
	if _, ok, _ := s.LastFire(ctx, "never"); ok {
		t.Fatal("fire of an unknown schedule")
	}
}

func TestOneOwnerAtATimeAndReadOnlyBesideIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	owner, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var le *sqlite.LockedError
	if _, err := sqlite.Open(ctx, path); !errors.As(err, &le) || !strings.Contains(le.Holder, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second owner: %v", err)
	}
	now := time.Now()
	if err := owner.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r1", SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning,
		CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	ro, err := sqlite.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if r, err := ro.GetRun(ctx, "r1"); err != nil || r.Status != run.StatusRunning {
		t.Fatalf("read-only read: %v %+v", err, r)
	}
	if err := ro.Write(ctx, &store.Batch{}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("read-only write: %v", err)
	}
	if _, err := ro.MarkInterrupted(ctx, now, store.Interruption{}); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("read-only recovery: %v", err)
	}
	if _, err := ro.PutArtefact(ctx, []byte("x")); !errors.Is(err, sqlite.ErrReadOnly) {
		t.Fatalf("read-only artefact: %v", err)
	}
	// Control requests go from the read-only store to the owner and back.
	id, err := ro.RequestControl(ctx, store.ControlRequest{RunID: "r1", Action: "approve", StepKey: "gate", Approved: true, CreatedAt: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ro.RequestControl(ctx, store.ControlRequest{RunID: "r1", Action: "delete"}); err == nil {
		t.Fatal("an unknown action was filed")
	}
	pending, err := owner.PendingControl(ctx)
	if err != nil || len(pending) != 1 || pending[0].ID != id || !pending[0].Approved || pending[0].StepKey != "gate" {
		t.Fatalf("pending: %v %+v", err, pending)
	}
	if a, err := ro.ControlAnswer(ctx, id); err != nil || a.Handled {
		t.Fatalf("answered before the owner looked: %v %+v", err, a)
	}
	if err := owner.AnswerControl(ctx, id, now, "invalid_state", "no open approval"); err != nil {
		t.Fatal(err)
	}
	if a, err := ro.ControlAnswer(ctx, id); err != nil || !a.Handled || a.ErrorCode != "invalid_state" {
		t.Fatalf("answer: %v %+v", err, a)
	}
	if pending, _ := owner.PendingControl(ctx); len(pending) != 0 {
		t.Fatalf("still pending: %+v", pending)
	}
	owner.Close()
	again, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatalf("after the owner closed: %v", err)
	}
	again.Close()
	if _, err := sqlite.OpenReadOnly(ctx, filepath.Join(t.TempDir(), "none.db")); err == nil {
		t.Fatal("read-only open of a missing file")
	}
}

// TestPruneNeverLetsASeqBeReused: pruning every run deletes the newest events too; the next
// owner of the file still numbers events after the largest seq ever assigned (a client that
// remembers the last seq it saw must not take new events for old ones).
func TestPruneNeverLetsASeqBeReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 8, 3, 0, 0, 0, time.UTC)
	b := &store.Batch{CreateRuns: []store.Run{{ID: "r1", SpecJSON: json.RawMessage(`{}`), Status: run.StatusCompleted,
		CreatedAt: t0, UpdatedAt: t0, FinishedAt: t0}}}
	for range 5 {
		b.Events = append(b.Events, run.Event{RunID: "r1", Type: run.EventStepExit, Time: t0})
	}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	last, _ := s.LastSeq(ctx)
	if n, err := s.Prune(ctx, t0.Add(time.Hour), nil); err != nil || n != 1 {
		t.Fatalf("Prune: %d %v", n, err)
	}
	s.Close()

	s, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, _ := s.LastSeq(ctx); got != last {
		t.Fatalf("LastSeq after pruning everything and reopening: %d, want %d", got, last)
	}
	b = &store.Batch{CreateRuns: []store.Run{{ID: "r2", SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning, CreatedAt: t0, UpdatedAt: t0}},
		Events: []run.Event{{RunID: "r2", Type: run.EventWorkflowStarted, Time: t0}}}
	if err := s.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	if b.Events[0].Seq <= last {
		t.Fatalf("the first event after the reopen got seq %d, already used (last was %d)", b.Events[0].Seq, last)
	}
}

// BenchmarkRun100: a run of 100 steps fanned out (storetest.BenchmarkRun), the same workload as
// the PostgreSQL store's BenchmarkRun100.
func BenchmarkRun100(b *testing.B) {
	storetest.BenchmarkRun(b, func(b *testing.B) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "flow.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

func TestRedteamRefusedFiresBounded(t *testing.T) {
	storetest.ExerciseRefusedFiresBound(t, func(t *testing.T) store.FireLog { return openTemp(t) })
}

// File records with hostile paths (bad bytes, NUL, wildcards, 4,096-byte names, Windows forms)
// are found by their path and under their directory (storetest.FilePathsRedteam).
func TestRedteamFilePaths(t *testing.T) {
	s := openTemp(t)
	t.Cleanup(func() { _ = s.Close() })
	storetest.FilePathsRedteam(t, s)
}

// 100,000 attempts of one step keep 110 rows (storetest.AttemptFlood).
func TestRedteamAttemptFlood(t *testing.T) {
	s := openTemp(t)
	t.Cleanup(func() { _ = s.Close() })
	storetest.AttemptFlood(t, s)
}
