package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// Several writers on one database (engines of the multi-engine mode, opened here without the
// owner lock), each with its own group committer and connections, append events at once while a
// reader follows them by seq: the reader sees every seq, one after the other, never a gap that a
// late-committing transaction fills afterwards (a PostgreSQL sequence would do that), and the
// seqs are unique across writers.
func TestEventsCommitInSeqOrderAcrossWriters(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	const writers, goroutines = 3, 8
	stores := make([]*Store, writers)
	for i := range stores {
		s, err := open(ctx, url, false)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	now := time.Now()
	if err := stores[0].Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r", SpecJSON: json.RawMessage(`{}`),
		Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var written atomic.Int64
	var wg sync.WaitGroup
	for w, s := range stores {
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					n := 1 + i%3
					b := &store.Batch{}
					for j := range n {
						b.Events = append(b.Events, run.Event{RunID: "r", Type: run.EventStepExit, Time: now,
							StepKey: fmt.Sprintf("w%d.g%d.%d.%d", w, g, i, j)})
					}
					if err := s.Write(ctx, b); err != nil {
						t.Error(err)
						return
					}
					written.Add(int64(n))
				}
			}()
		}
	}
	defer func() { stop.Store(true); wg.Wait() }() // before the stores close, also when the test fails
	var last uint64
	seen := 0
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		evs, err := stores[1].ListEvents(ctx, store.EventFilter{AfterSeq: last})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Seq != last+1 {
				t.Fatalf("after seq %d the reader saw %d: a smaller seq committed later, or was skipped", last, ev.Seq)
			}
			last = ev.Seq
			seen++
		}
	}
	stop.Store(true)
	wg.Wait()
	evs, err := stores[2].ListEvents(ctx, store.EventFilter{AfterSeq: last})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Seq != last+1 {
			t.Fatalf("after seq %d: %d", last, ev.Seq)
		}
		last = ev.Seq
		seen++
	}
	if int64(seen) != written.Load() || seen < 100 {
		t.Fatalf("the reader saw %d events, %d were written", seen, written.Load())
	}
	if ls, _ := stores[0].LastSeq(ctx); ls != last {
		t.Fatalf("LastSeq %d, last event %d", ls, last)
	}
	t.Logf("%d events from %d writers × %d goroutines, followed in order", seen, writers, goroutines)
}
