package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlite"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

// BenchmarkSearch100k: the search mix of storetest.BenchmarkSearch over 100,000 runs and
// 1,000,000 steps (make bench; goal p99 < 100 ms). The filled database is kept under the temp
// dir (searchBenchDB) and reused, so only the first run pays for filling it.
func BenchmarkSearch100k(b *testing.B) {
	path := searchBenchDB(b)
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkSearch(b, s)
}

// searchBenchDB returns the path of the filled database of BenchmarkSearch100k, filling it
// first when the temp dir has none (named by the version of the fill and of the schema).
func searchBenchDB(b *testing.B) string {
	entries, err := os.ReadDir("migrations")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(os.TempDir(), "dcc-flow-search-bench-v1-m"+entries[len(entries)-1].Name()+".db")
	if _, err := os.Stat(path); err == nil {
		return path
	}
	tmp := filepath.Join(b.TempDir(), "fill.db")
	s, err := sqlite.Open(context.Background(), tmp)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	storetest.FillSearch(b, s)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d runs of %d steps in %s", storetest.SearchRuns, storetest.SearchStepsPerRun, time.Since(start).Round(time.Millisecond))
	if err := os.Rename(tmp, path); err != nil {
		b.Fatal(err)
	}
	return path
}

// Migration 0011 indexes the inputs of the runs already stored (and of none that is not a JSON
// object), so a database from before run search finds them by input value.
func TestMigrateIndexesStoredInputs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v10.db")
	raw, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries[:10] {
		body, err := os.ReadFile("migrations/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatal(e.Name(), err)
		}
	}
	for _, q := range []string{
		`PRAGMA user_version = 10`,
		`INSERT INTO workflows (id, spec_json, spec_hash, inputs, status, created_at, updated_at)
			VALUES ('r1', '{}', 'h', CAST('{"shot":"sh010","frame":7,"hd":false,"deep":{"shot":"x"}}' AS BLOB), 'completed', 1, 1)`,
		`INSERT INTO workflows (id, spec_json, spec_hash, inputs, status, created_at, updated_at)
			VALUES ('r2', '{}', 'h', CAST('not json' AS BLOB), 'completed', 2, 2)`,
		`INSERT INTO workflows (id, spec_json, spec_hash, inputs, status, created_at, updated_at)
			VALUES ('r3', '{}', 'h', NULL, 'completed', 3, 3)`,
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
	for k, v := range map[string]string{"shot": "sh010", "frame": "7", "hd": "false"} {
		runs, err := s.ListRuns(ctx, store.RunFilter{Inputs: map[string]string{k: v}})
		if err != nil || len(runs) != 1 || runs[0].ID != "r1" {
			t.Errorf("%s=%s after the migration: %v, %v; want r1", k, v, runs, err)
		}
	}
	if runs, err := s.ListRuns(ctx, store.RunFilter{}); err != nil || len(runs) != 3 {
		t.Errorf("every run after the migration: %v, %v", runs, err)
	}
}
