package memstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

func createRuns(t testing.TB, s *memstore.Store, times []time.Time) {
	t.Helper()
	b := &store.Batch{}
	for i, at := range times {
		status := run.StatusCompleted
		if i%3 == 0 {
			status = run.StatusFailed
		}
		b.CreateRuns = append(b.CreateRuns, store.Run{ID: fmt.Sprintf("r%05d", (i*7919)%len(times)), Name: fmt.Sprint("wf", i%2),
			SpecJSON: json.RawMessage(`{}`), Status: status, CreatedAt: at, UpdatedAt: at})
	}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// With a limit the newest runs are found without looking at all of them; the answer is the same
// as the full listing's first ones, with ties on CreatedAt, filters, and runs created out of order.
func TestListRunsWithALimitMatchesTheFullListing(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	ordered := make([]time.Time, 200)
	for i := range ordered {
		ordered[i] = t0.Add(time.Duration(i/4) * time.Second) // four runs per second: ties
	}
	shuffled := append([]time.Time(nil), ordered...)
	shuffled[10], shuffled[150] = shuffled[150], shuffled[10]
	for name, times := range map[string][]time.Time{"ordered": ordered, "out of order": shuffled} {
		s := memstore.New()
		createRuns(t, s, times)
		for _, f := range []store.RunFilter{
			{}, {Statuses: []run.Status{run.StatusFailed}}, {Name: "wf1"}, {Until: t0.Add(20 * time.Second)},
		} {
			all, err := s.ListRuns(context.Background(), f)
			if err != nil {
				t.Fatal(err)
			}
			for _, limit := range []int{1, 3, 5, 50} {
				f.Limit = limit
				got, err := s.ListRuns(context.Background(), f)
				if err != nil {
					t.Fatal(err)
				}
				want := all[:min(limit, len(all))]
				if len(got) != len(want) {
					t.Fatalf("%s %+v: %d runs, want %d", name, f, len(got), len(want))
				}
				for i := range got {
					if got[i].ID != want[i].ID {
						t.Fatalf("%s %+v: run %d is %s, want %s", name, f, i, got[i].ID, want[i].ID)
					}
				}
			}
		}
	}
}

// The newest run of a long history costs the same to list at 100, 1,000 and 10,000 runs.
func BenchmarkListRunsLimit1(b *testing.B) {
	t0 := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	for _, n := range []int{100, 1000, 10000} {
		s := memstore.New()
		times := make([]time.Time, n)
		for i := range times {
			times[i] = t0.Add(time.Duration(i) * time.Millisecond)
		}
		createRuns(b, s, times)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				if runs, err := s.ListRuns(context.Background(), store.RunFilter{Limit: 1}); err != nil || len(runs) != 1 {
					b.Fatal(runs, err)
				}
			}
		})
	}
}
