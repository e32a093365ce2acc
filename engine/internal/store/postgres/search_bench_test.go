package postgres_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// BenchmarkPGSearch100k: the search mix of storetest.BenchmarkSearch over 100,000 runs and
// 1,000,000 steps in a throwaway cluster (internal/pgtest), filled first, then VACUUM ANALYZEd as
// autovacuum would (make bench; goal p99 < 100 ms). The database is filled once per process
// (the benchmark function runs once with b.N = 1 before the measured run).
func BenchmarkPGSearch100k(b *testing.B) {
	if searchURL == "" {
		url := pgtest.DB(b)
		s := openURL(b, url)
		start := time.Now()
		storetest.FillSearch(b, s)
		b.Logf("filled %d runs of %d steps in %s", storetest.SearchRuns, storetest.SearchStepsPerRun, time.Since(start).Round(time.Millisecond))
		if err := analyze(context.Background(), url); err != nil {
			b.Fatal(err)
		}
		searchURL = url
	}
	s := openURL(b, searchURL)
	if os.Getenv("DCC_FLOW_EXPLAIN") != "" { // the plan of each search, for a slow one
		for _, f := range storetest.SearchMix() {
			plan, err := s.ExplainListRuns(context.Background(), f)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(os.Stderr, "%+v\n%s\n\n", f, plan)
		}
	}
	storetest.BenchmarkSearch(b, s)
}

// searchURL is the database BenchmarkPGSearch100k filled.
var searchURL string

// analyze vacuums the database at url and updates its planner statistics, as autovacuum does
// after a bulk of inserts (index-only scans need the visibility map it sets).
func analyze(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "VACUUM ANALYZE")
	return err
}
