package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func TestMemstore(t *testing.T) {
	t.Parallel()
	storetest.Exercise(t, func(t *testing.T) store.Store { return memstore.New() })
	storetest.ExercisePruner(t, func(t *testing.T) storetest.PrunerStore { return memstore.New() })
	storetest.ExerciseAttemptLog(t, func(t *testing.T) storetest.AttemptStore { return memstore.New() })
	storetest.ExerciseCatalog(t, func(t *testing.T) store.Catalog { return memstore.New() })
	storetest.ExerciseAssets(t, func(t *testing.T) storetest.AssetStore { return memstore.New() })
}

// The volume parts of the suites (storetest.ExerciseAttemptLogVolume, ExerciseAssetsVolume):
// thousands of rows, checked for what is read back, not for concurrency. In GO_NORACE_TESTS.
func TestExerciseVolume(t *testing.T) {
	t.Parallel()
	storetest.ExerciseAttemptLogVolume(t, func(t *testing.T) storetest.AttemptStore { return memstore.New() })
	storetest.ExerciseAssetsVolume(t, func(t *testing.T) storetest.AssetStore { return memstore.New() })
}

// 100,000 file records read back by Under in pages of 1,000 (storetest.ExerciseAssetsScale):
// about 80 ms. In GO_NORACE_TESTS.
func TestAssetsScale(t *testing.T) {
	if testing.Short() {
		t.Skip("a volume test: skipped under -short")
	}
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	storetest.ExerciseAssetsScale(t, s, 2*time.Second)
}

// File records with hostile paths (bad bytes, NUL, wildcards, 4,096-byte names, Windows forms)
// are found by their path and under their directory (storetest.FilePathsRedteam).
func TestRedteamFilePaths(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	storetest.FilePathsRedteam(t, s)
}

// 100,000 attempts of one step keep 110 rows (storetest.AttemptFlood).
func TestRedteamAttemptFlood(t *testing.T) {
	s := memstore.New()
	t.Cleanup(func() { _ = s.Close() })
	storetest.AttemptFlood(t, s)
}

// A run with more attempt records than 64 chunks of them (a foreach of 70,000 tool steps): every
// one is kept and found (the chunk sizes once overflowed a shift past 62 chunks).
func TestAttemptChunks(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	ctx := context.Background()
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r1", Status: run.StatusRunning}}}); err != nil {
		t.Fatal(err)
	}
	const n = 70_000
	for base := 0; base < n; base += 1000 {
		b := &store.Batch{}
		for i := base; i < base+1000; i++ {
			key := fmt.Sprintf("each[%d].s", i)
			b.Steps = append(b.Steps, store.Step{RunID: "r1", Key: key, StepID: "s", Kind: "tool", Status: run.StepCompleted, Attempt: 1, Insert: true})
			b.Attempts = append(b.Attempts, store.Attempt{RunID: "r1", StepKey: key, Attempt: 1, Status: run.StepCompleted, Tool: "t"})
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{0, 1023, 63 * 1024, n - 1} {
		key := fmt.Sprintf("each[%d].s", i)
		if got, err := s.ListAttempts(ctx, "r1", key); err != nil || len(got) != 1 || got[0].StepKey != key {
			t.Fatalf("attempts of %s = %+v, %v; want its one", key, got, err)
		}
	}
}

// A batch with fires is refused whole: the memory store keeps no fire history
// (store.FireBatcher), and dropping the fire would lose what redeliveries are checked against.
func TestABatchWithFiresIsRefused(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	b := &store.Batch{
		CreateRuns: []store.Run{{ID: "r1", Status: run.StatusRunning, CreatedAt: time.Now(), UpdatedAt: time.Now()}},
		Fires:      []store.Fire{{ScheduleID: "hook", Kind: store.FireFired, RunID: "r1", DeliveryID: "d1"}},
	}
	if err := s.Write(ctx, b); err == nil {
		t.Fatal("a batch with fires was taken")
	}
	if _, err := s.GetRun(ctx, "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the run of the refused batch: %v; want ErrNotFound", err)
	}
}
