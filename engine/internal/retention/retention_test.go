package retention

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// pruner is a store.Pruner over a list of runs; cancel, when set, is called after the first
// step of a deletion.
type pruner struct {
	runs    []store.Run
	listErr error
	cancel  func()
	deleted []string
}

func (p *pruner) PruneCandidates(_ context.Context, before time.Time, _ []run.Status, limit int) ([]store.Run, error) {
	var out []store.Run
	for _, r := range p.runs {
		if r.FinishedAt.Before(before) && (limit == 0 || len(out) < limit) {
			out = append(out, r)
		}
	}
	return out, p.listErr
}

func (p *pruner) PruneRuns(ctx context.Context, ids []string, _ time.Time, _ []run.Status, progress func(int)) (int, error) {
	for i, id := range ids {
		if err := ctx.Err(); err != nil {
			return i, err
		}
		p.deleted = append(p.deleted, id)
		if progress != nil {
			progress(i + 1)
		}
		if p.cancel != nil {
			p.cancel()
		}
	}
	return len(ids), nil
}

func (p *pruner) Prune(context.Context, time.Time, []run.Status) (int, error) { return 0, nil }

func threeRuns() *pruner {
	return &pruner{runs: []store.Run{{ID: "a", FinishedAt: t0}, {ID: "b", FinishedAt: t0.Add(time.Hour)}, {ID: "c", FinishedAt: t0.Add(2 * time.Hour)}}}
}

func TestPruneStepsWithProgressAndLimit(t *testing.T) {
	p := threeRuns()
	var seen [][2]int
	listed, n, listErr, err := Prune(context.Background(), p, Request{Before: t0.Add(3 * time.Hour), Limit: 2,
		Progress: func(pruned, total int) { seen = append(seen, [2]int{pruned, total}) }})
	if listErr != nil || err != nil || n != 2 || len(listed) != 2 {
		t.Fatalf("Prune = %d runs listed, %d pruned, %v, %v; want 2, 2", len(listed), n, listErr, err)
	}
	if !slices.Equal(p.deleted, []string{"a", "b"}) || !slices.Equal(seen, [][2]int{{1, 2}, {2, 2}}) {
		t.Fatalf("deleted %v with progress %v", p.deleted, seen)
	}
}

func TestPruneDryRunDeletesNothing(t *testing.T) {
	p := threeRuns()
	listed, n, _, err := Prune(context.Background(), p, Request{Before: t0.Add(90 * time.Minute), DryRun: true})
	if err != nil || n != 0 || len(listed) != 2 || len(p.deleted) != 0 {
		t.Fatalf("dry run: listed %v, pruned %d, deleted %v, %v", listed, n, p.deleted, err)
	}
}

func TestPruneStoppedPartWayReportsTheCause(t *testing.T) {
	p := threeRuns()
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	p.cancel = func() { cancel(cause) }
	_, n, listErr, err := Prune(ctx, p, Request{Before: t0.Add(3 * time.Hour)})
	if listErr != nil || n != 1 || !errors.Is(err, cause) {
		t.Fatalf("Prune = %d, %v, %v; want 1 deleted and the cause", n, listErr, err)
	}
}

func TestPruneListErrorIsSeparate(t *testing.T) {
	p := threeRuns()
	p.listErr = errors.New("disk")
	_, n, listErr, err := Prune(context.Background(), p, Request{Before: t0.Add(3 * time.Hour)})
	if listErr == nil || err != nil || n != 0 || len(p.deleted) != 0 {
		t.Fatalf("Prune = %d, %v, %v; want the listing's error only", n, listErr, err)
	}
}

func TestLoopPassesOnTheClock(t *testing.T) {
	clk := clock.NewStub(t0)
	var mu sync.Mutex
	var befores []time.Time
	purges := 0
	l := &Loop{Deps: Deps{Clock: clk,
		Prune: func(_ context.Context, before time.Time) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			befores = append(befores, before)
			return 2, nil
		},
		Purge: func(context.Context) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			purges++
			if purges == 2 {
				return 1, errors.New("disk full")
			}
			return 1, nil
		}}}
	if _, on := l.Stats(); on {
		t.Fatal("a loop not started reports itself on")
	}
	passed := l.Passed()
	if err := l.Start(Policy{KeepFor: 24 * time.Hour, Every: time.Hour}, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	defer l.Stop()
	<-passed // the pass at Start
	st, on := l.Stats()
	if !on || st.Pruned != 2 || st.Purged != 1 || st.PrunedTotal != 2 || st.Error != "" || !st.LastPass.Equal(t0) || !st.NextPass.Equal(t0.Add(time.Hour)) {
		t.Fatalf("after the first pass: %+v, %v", st, on)
	}
	if err := clk.WaitForTimers(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	<-passed
	st, _ = l.Stats()
	if st.PrunedTotal != 4 || st.PurgedTotal != 2 || st.Error != "purging expired idempotency entries: disk full" {
		t.Fatalf("after the second pass: %+v", st)
	}
	mu.Lock()
	want := []time.Time{t0.Add(-24 * time.Hour), t0.Add(-23 * time.Hour)}
	if !slices.EqualFunc(befores, want, time.Time.Equal) {
		t.Errorf("pruned before %v; want %v", befores, want)
	}
	mu.Unlock()
	l.Stop()
	if _, on := l.Stats(); on {
		t.Error("a stopped loop reports itself on")
	}
}

func TestLoopKeepForeverOnlyPurgesAndRefusalStartsNothing(t *testing.T) {
	clk := clock.NewStub(t0)
	l := &Loop{Deps: Deps{Clock: clk,
		Prune: func(context.Context, time.Time) (int, error) { t.Error("pruned with KeepFor 0"); return 0, nil },
		Purge: func(context.Context) (int, error) { return 3, nil }}}
	closed := errors.New("closed")
	if err := l.Start(Policy{Every: time.Minute}, func() error { return closed }); err != closed {
		t.Fatalf("refused start = %v", err)
	}
	if _, on := l.Stats(); on {
		t.Fatal("a refused start left the loop on")
	}
	if err := l.Start(Policy{Every: time.Minute}, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	<-l.Passed()
	l.Stop()
	if st, _ := l.Stats(); st.Purged != 3 || st.Pruned != 0 {
		t.Fatalf("stats %+v", st)
	}
}
