package postgres_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(m, pgtest.Options{Prepare: func(url string) error {
		return postgres.Migrate(context.Background(), url)
	}}))
}

// openTemp opens a store on a new database of the package's cluster.
func openTemp(t testing.TB) *postgres.Store {
	t.Helper()
	return openURL(t, pgtest.DB(t))
}

// openURL opens a store on the database at url, closed when the test ends.
func openURL(t testing.TB, url string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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

func TestExercise(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return openTemp(t) })
	storetest.ExercisePruner(t, func(t *testing.T) storetest.PrunerStore { return openTemp(t) })
	storetest.ExerciseAttemptLog(t, func(t *testing.T) storetest.AttemptStore { return openTemp(t) })
	storetest.ExerciseAssets(t, func(t *testing.T) storetest.AssetStore { return openTemp(t) })
	storetest.ExerciseController(t, func(t *testing.T) store.Controller { return openTemp(t) })
	storetest.ExerciseFireLog(t, func(t *testing.T) store.FireLog { return openTemp(t) })
	storetest.ExerciseBatchFires(t, func(t *testing.T) storetest.FireStore { return openTemp(t) })
	storetest.ExerciseCatalog(t, func(t *testing.T) store.Catalog { return openTemp(t) })
	storetest.ExerciseSlotClaimer(t, func(t *testing.T, n int) []store.SlotClaimer {
		url := pgtest.DB(t)
		cs := make([]store.SlotClaimer, n)
		for i := range cs {
			s, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			cs[i] = s
		}
		return cs
	})
	storetest.ExerciseScheduleAdmitter(t, func(t *testing.T, n int) []storetest.AdmitterStore {
		url := pgtest.DB(t)
		ss := make([]storetest.AdmitterStore, n)
		for i := range ss {
			s, err := postgres.Open(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			ss[i] = s
		}
		return ss
	})
}

// ObserveCommits reports each group committed (docs/operations/metrics.md: dccflow_db_commit_*), as the
// SQLite store's does.
func TestObserveCommits(t *testing.T) {
	storetest.ExerciseCommitObserver(t, func(t *testing.T) storetest.CommitStore { return openTemp(t) })
}

func TestRedteamRefusedFiresBounded(t *testing.T) {
	storetest.ExerciseRefusedFiresBound(t, func(t *testing.T) store.FireLog { return openTemp(t) })
}

// 100,000 file records read back by Under in pages of 1,000 (storetest.ExerciseAssetsScale):
// about 0.75 s on two loaded cores (a plan sorting the directory at each page took 5.5 s). In
// GO_NORACE_TESTS.
func TestAssetsScale(t *testing.T) {
	if testing.Short() {
		t.Skip("a volume test: skipped under -short")
	}
	storetest.ExerciseAssetsScale(t, openTemp(t), 4*time.Second)
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
