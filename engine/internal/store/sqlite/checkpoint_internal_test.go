package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Under steady writes the checkpointer never finds the WAL fully copied, so without the
// leader's catch-up checkpoint the WAL would never restart: 6,000 step writes (about 5 pages
// each) would leave a WAL of over 100 MiB. With it, the WAL stays near restartFrames pages.
func TestWALRestartsUnderSteadyWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	s := openWithRun(t, path)
	now := time.Now()
	const writes = 6000
	for i := range writes {
		key := fmt.Sprintf("each[%d].export", i)
		b := &store.Batch{
			Steps: []store.Step{{RunID: "r", Key: key, StepID: "export", Kind: "tool", Status: run.StepCompleted,
				Attempt: 1, Output: json.RawMessage(`{"fbx":"/proj/hero_v012.fbx"}`), StartedAt: now, FinishedAt: now, UpdatedAt: now}},
			Events: []run.Event{{RunID: "r", Type: run.EventStepExit, StepKey: key, Status: "completed", Attempt: 1, Time: now}},
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if s.ckpt.passes.Load() == 0 || s.ckpt.catchUps.Load() == 0 {
		t.Fatalf("checkpointer passes %d, leader catch-ups %d: want both > 0", s.ckpt.passes.Load(), s.ckpt.catchUps.Load())
	}
	// The WAL started over: a pass found fewer frames in it than the pass before. (Its file's
	// size was the check before, but a checkpointer slowed by a busy machine let it reach 45 MB
	// and, in a CI run, 86 MB, near the 100 MiB of a WAL that never restarts.)
	if s.ckpt.restarts.Load() == 0 {
		wal, _ := os.Stat(path + "-wal")
		t.Fatalf("the WAL never started over in %d writes (%d catch-ups; its file %v)", writes, s.ckpt.catchUps.Load(), wal.Size())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path + "-wal"); !os.IsNotExist(err) {
		t.Fatalf("the WAL outlives Close: %v", err)
	}
}

// A store that stops writing has its WAL copied into the database within checkpointIdle, though
// its one commit is far from the checkpointEvery that wakes the checkpointer otherwise.
func TestIdleStoreCheckpoints(t *testing.T) {
	t.Parallel()
	s := openWithRun(t, filepath.Join(t.TempDir(), "flow.db"))
	deadline := time.Now().Add(10 * checkpointIdle)
	for s.ckpt.passes.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint %v after the last write", 10*checkpointIdle)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openWithRun opens a store at path, closed at the end of the test, holding one running run "r".
func openWithRun(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Now()
	if err := s.Write(context.Background(), &store.Batch{CreateRuns: []store.Run{{ID: "r", SpecJSON: json.RawMessage(`{}`),
		Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	return s
}
