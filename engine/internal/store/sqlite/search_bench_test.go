package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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
