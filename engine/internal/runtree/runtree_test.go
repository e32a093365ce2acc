package runtree

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// fakeRuns holds runs by id; lists counts the ListRuns calls.
type fakeRuns struct {
	mu    sync.Mutex
	runs  map[string]store.Run
	lists int
}

func newFake(parents map[string]string) *fakeRuns {
	f := &fakeRuns{runs: map[string]store.Run{}}
	for id, parent := range parents {
		f.runs[id] = store.Run{ID: id, ParentRunID: parent}
	}
	return f
}

func (f *fakeRuns) GetRun(_ context.Context, id string) (store.Run, error) {
	r, ok := f.runs[id]
	if !ok {
		return store.Run{}, store.ErrNotFound
	}
	return r, nil
}

func (f *fakeRuns) ListRuns(_ context.Context, flt store.RunFilter) ([]store.Run, error) {
	f.mu.Lock()
	f.lists++
	f.mu.Unlock()
	var out []store.Run
	for _, r := range f.runs {
		if r.ParentRunID == flt.ParentRunID {
			out = append(out, r)
		}
	}
	return out, nil
}

func wrap(id string, err error) error { return fmt.Errorf("run %s: %w", id, err) }

// A tree: root → a, b; a → c.
var tree = map[string]string{"root": "", "a": "root", "b": "root", "c": "a"}

func TestAncestorsOutermostFirst(t *testing.T) {
	r := New(newFake(tree), Limits{}, wrap)
	chain, err := r.Ancestors(context.Background(), "c")
	if err != nil || !slices.Equal(chain, []string{"root", "a", "c"}) {
		t.Fatalf("Ancestors(c) = %v, %v", chain, err)
	}
	if _, err := r.Ancestors(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) || err.Error() != "run nope: "+store.ErrNotFound.Error() {
		t.Fatalf("Ancestors(nope) = %v; want the wrapped not-found", err)
	}
}

func TestAncestorsOfACycleStopAtTheCeiling(t *testing.T) {
	r := New(newFake(map[string]string{"x": "y", "y": "x"}), Limits{}, wrap)
	chain, err := r.Ancestors(context.Background(), "x")
	if err != nil || len(chain) != exec.MaxDepthCeiling+1 {
		t.Fatalf("Ancestors of a cycle: %d ids, %v; want %d", len(chain), err, exec.MaxDepthCeiling+1)
	}
}

func TestCountStopsPastTheLimit(t *testing.T) {
	r := New(newFake(tree), Limits{}, wrap)
	for limit, want := range map[int]int{0: 4, 10: 4, 4: 4, 3: 4, 2: 3} {
		if n, err := r.Count(context.Background(), "root", limit); err != nil || n != want {
			t.Errorf("Count(root, %d) = %d, %v; want %d", limit, n, err, want)
		}
	}
}

func TestAcquireSharesALiveTreeAndReadsTheStoreOncePerRevival(t *testing.T) {
	f := newFake(tree)
	r := New(f, Limits{MaxRuns: 50}, wrap)
	ctx := context.Background()
	fresh, err := r.Acquire(ctx, "new", nil, false) // a new run on its own: no read
	if err != nil || fresh.Runs() != 1 || f.lists != 0 {
		t.Fatalf("a new root: %v runs, %d reads, %v", fresh.Runs(), f.lists, err)
	}
	resumed, err := r.Acquire(ctx, "root", nil, true)
	if err != nil || resumed.Runs() != 4 || resumed.MaxRuns != 50 {
		t.Fatalf("a resumed root: %d runs (max %d), %v; want 4 of 50", resumed.Runs(), resumed.MaxRuns, err)
	}
	reads := f.lists
	child, err := r.Acquire(ctx, "c", []string{"root", "a"}, true)
	if err != nil || child != resumed || f.lists != reads {
		t.Fatalf("a child of a live tree got %p (want %p), %d more reads, %v", child, resumed, f.lists-reads, err)
	}
	if r.Live() != 2 {
		t.Fatalf("%d live trees; want 2", r.Live())
	}
	r.Release(child)
	r.Release(resumed)
	r.Release(fresh)
	if r.Live() != 0 {
		t.Fatalf("%d live trees after every release; want 0", r.Live())
	}
	again, _ := r.Acquire(ctx, "c", []string{"root", "a"}, false) // the tree comes back to life
	if again == resumed || again.Runs() != 4 {
		t.Fatalf("a revived tree: same %v, %d runs; want a new one counting 4", again == resumed, again.Runs())
	}
}

func TestAcquireConcurrentlyMakesOneTree(t *testing.T) {
	r := New(newFake(tree), Limits{}, wrap)
	var wg sync.WaitGroup
	got := make([]*exec.Tree, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = r.Acquire(context.Background(), "b", []string{"root"}, false)
		}()
	}
	wg.Wait()
	for _, tr := range got {
		if tr != got[0] {
			t.Fatal("two trees made for one root")
		}
	}
	if got[0].Refs != len(got) {
		t.Fatalf("%d references; want %d", got[0].Refs, len(got))
	}
}
