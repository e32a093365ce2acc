package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// fillRuns writes n finished runs of steps steps each (a 512-byte output per step, two events per
// step), in batches of 100 runs, finished at t0 + i ms.
func fillRuns(tb testing.TB, s *Store, n, steps int, t0 time.Time) {
	tb.Helper()
	ctx := context.Background()
	out := json.RawMessage(`{"fbx":"` + strings.Repeat("x", 512) + `"}`)
	for base := 0; base < n; base += 100 {
		b := &store.Batch{}
		for i := base; i < min(n, base+100); i++ {
			at := t0.Add(time.Duration(i) * time.Millisecond)
			id := fmt.Sprintf("run%06d", i)
			b.CreateRuns = append(b.CreateRuns, store.Run{ID: id, Name: "nightly", SpecJSON: json.RawMessage(`{"steps":[]}`),
				SpecHash: "h", Inputs: json.RawMessage(`{}`), Status: run.StatusCompleted, Origin: "schedule",
				CreatedAt: at, UpdatedAt: at, FinishedAt: at})
			for j := range steps {
				key := fmt.Sprintf("each[%d].export", j)
				b.Steps = append(b.Steps, store.Step{RunID: id, Key: key, StepID: "export", Kind: "tool", Status: run.StepCompleted,
					Attempt: 1, Output: out, StartedAt: at, FinishedAt: at, UpdatedAt: at, Insert: true})
				b.Events = append(b.Events, run.Event{RunID: id, Type: run.EventStepEnter, StepKey: key, Time: at},
					run.Event{RunID: id, Type: run.EventStepExit, StepKey: key, Status: "completed", Time: at})
			}
			b.Idempotency = append(b.Idempotency, store.IdempotencyEntry{Scope: "workflow", RunID: id, Key: "k", Output: out, CreatedAt: at})
		}
		if err := s.Write(ctx, b); err != nil {
			tb.Fatal(err)
		}
	}
}

// pageStats returns the database's page count, free-list pages and page size.
func pageStats(tb testing.TB, db *sql.DB) (pages, free, size int64) {
	tb.Helper()
	for q, dst := range map[string]*int64{"PRAGMA page_count": &pages, "PRAGMA freelist_count": &free, "PRAGMA page_size": &size} {
		if err := db.QueryRow(q).Scan(dst); err != nil {
			tb.Fatal(err)
		}
	}
	return pages, free, size
}

func fileSize(tb testing.TB, path string) int64 {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}

// What a prune gives back, measured: 2,000 runs of 4 steps (a 512-byte output each). SQLite
// (auto_vacuum off, the default this store keeps) moves the freed pages to the file's free
// list, where later writes reuse them; the file keeps its size until a VACUUM rewrites it.
// The test asserts both halves: the free list holds most of the file after the prune, and a
// VACUUM (run here on the closed file, as an operator would) shrinks the file.
func TestPruneFreesPagesAndVacuumShrinksTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const runs = 2000
	fillRuns(t, s, runs, 4, t0)
	// One run stays: it finished after the cutoff.
	fillRunsFrom(t, s, "keep", t0.Add(time.Hour))
	checkpoint := func() {
		if _, err := s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			t.Fatal(err)
		}
	}
	checkpoint()
	pagesBefore, freeBefore, pageSize := pageStats(t, s.w)
	sizeBefore := fileSize(t, path)

	n, err := s.Prune(ctx, t0.Add(time.Minute), nil)
	if err != nil || n != runs {
		t.Fatalf("Prune = %d, %v; want %d", n, err, runs)
	}
	checkpoint()
	pagesAfter, freeAfter, _ := pageStats(t, s.w)
	sizeAfter := fileSize(t, path)
	t.Logf("before prune: file %d KiB, %d pages of %d B, %d free", sizeBefore>>10, pagesBefore, pageSize, freeBefore)
	t.Logf("after prune:  file %d KiB, %d pages, %d free (%.0f%% of the file reusable)", sizeAfter>>10, pagesAfter,
		freeAfter, 100*float64(freeAfter)/float64(pagesAfter))
	if freeAfter-freeBefore < pagesBefore*8/10 {
		t.Errorf("free pages went from %d to %d of %d; want most of the file freed by pruning every run but one",
			freeBefore, freeAfter, pagesBefore)
	}
	if sizeAfter < sizeBefore {
		t.Logf("the file shrank without VACUUM (%d → %d bytes)", sizeBefore, sizeAfter)
	}
	// The freed pages are reused: writing the runs again does not grow the file.
	fillRuns(t, s, runs/2, 4, t0.Add(2*time.Hour))
	checkpoint()
	if grown := fileSize(t, path); grown > sizeAfter {
		t.Errorf("writing 1,000 runs after the prune grew the file from %d to %d bytes; the free pages should be reused", sizeAfter, grown)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec("VACUUM"); err != nil {
		t.Fatal(err)
	}
	vacuumed := fileSize(t, path)
	t.Logf("after VACUUM (1,001 runs left): file %d KiB", vacuumed>>10)
	if vacuumed >= sizeAfter {
		t.Errorf("VACUUM left the file at %d bytes (before it: %d)", vacuumed, sizeAfter)
	}
}

func fillRunsFrom(tb testing.TB, s *Store, id string, at time.Time) {
	tb.Helper()
	r := store.Run{ID: id, Name: "nightly", SpecJSON: json.RawMessage(`{"steps":[]}`), SpecHash: "h", Inputs: json.RawMessage(`{}`),
		Status: run.StatusCompleted, Origin: "local", CreatedAt: at, UpdatedAt: at, FinishedAt: at}
	if err := s.Write(context.Background(), &store.Batch{CreateRuns: []store.Run{r}}); err != nil {
		tb.Fatal(err)
	}
}

// A prune does not hold the writer for its whole length: it deletes PruneChunk runs per
// transaction, and a Write issued while it runs commits between two of them, long before the
// prune ends. (With one transaction for the whole prune, the Write would wait for all of it.)
func TestPruneLetsWritesThroughBetweenChunks(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "flow.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const runs = 5 * PruneChunk
	fillRuns(t, s, runs, 2, t0)
	wrote := make(chan int, 1) // the number pruned when the Write committed
	var chunks []int
	pruneHook = func(deleted int) {
		chunks = append(chunks, deleted)
		if len(chunks) == 1 {
			done := make(chan struct{})
			go func() {
				fillRunsFrom(t, s, "written_meanwhile", t0.Add(time.Hour))
				close(done)
			}()
			<-done // the Write gets the writer between two chunks
			wrote <- deleted
		}
	}
	defer func() { pruneHook = nil }()
	n, err := s.Prune(ctx, t0.Add(time.Minute), nil)
	if err != nil || n != runs {
		t.Fatalf("Prune = %d, %v; want %d", n, err, runs)
	}
	if len(chunks) != runs/PruneChunk {
		t.Errorf("prune committed %d transactions (%v); want %d of %d runs", len(chunks), chunks, runs/PruneChunk, PruneChunk)
	}
	select {
	case d := <-wrote:
		if d >= runs {
			t.Errorf("the Write committed after the whole prune (%d runs)", d)
		}
	default:
		t.Fatal("the Write issued during the prune did not commit before it ended")
	}
	if _, err := s.GetRun(ctx, "written_meanwhile"); err != nil {
		t.Errorf("the run written during the prune: %v", err)
	}
}

// BenchmarkPrune measures a prune of every run of a database of 100, 1,000 and 10,000 runs of
// 10 steps: the cost per run should stay flat (linear in the runs pruned). scripts/bench_scale.py
// reads it (sub-benchmarks named by the size).
func BenchmarkPrune(b *testing.B) {
	for _, runs := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("%d", runs), func(b *testing.B) {
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for range b.N {
				b.StopTimer()
				s, err := Open(context.Background(), filepath.Join(b.TempDir(), "flow.db"))
				if err != nil {
					b.Fatal(err)
				}
				fillRuns(b, s, runs, 10, t0)
				b.StartTimer()
				n, err := s.Prune(context.Background(), t0.Add(time.Hour), nil)
				b.StopTimer()
				if err != nil || n != runs {
					b.Fatalf("Prune = %d, %v", n, err)
				}
				s.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*runs), "µs/run")
		})
	}
}
