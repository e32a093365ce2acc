// Package runtree keeps the trees of runs (docs/reference/limits.md, "Run limits"): a run started on its
// own and every run below it through workflow steps are one tree, whose counts (exec.Tree) the
// engine shares between the tree's runs live in it and drops with the last one. It also reads a
// tree's shape from the store: the chain of a run's ancestors and the runs a tree holds. It
// knows nothing of the engine facade: it reads the runs through Runs.
package runtree

import (
	"context"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// Runs is what the trees read of the stored runs (a store.Store is one).
type Runs interface {
	GetRun(ctx context.Context, id string) (store.Run, error)
	ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error)
}

// Limits are the engine's tree limits (0 = the exec defaults).
type Limits struct {
	MaxRuns, MaxInstances, MaxParallel int
}

// Registry is the counts of the trees with a run live in one engine, by root run id. Its
// methods are safe for concurrent use.
type Registry struct {
	runs   Runs
	limits Limits
	// wrap turns an error reading the run id into the engine's error.
	wrap func(id string, err error) error

	mu    sync.Mutex
	trees map[string]*exec.Tree
}

// New returns an empty registry reading runs, applying limits; wrap maps an error reading the
// run of an id (not found, closed, a storage fault) to the caller's error.
func New(runs Runs, limits Limits, wrap func(id string, err error) error) *Registry {
	return &Registry{runs: runs, limits: limits, wrap: wrap, trees: map[string]*exec.Tree{}}
}

// Acquire returns the counts of the tree of run runID (with ancestors, outermost first: the
// tree of ancestors[0], or runID's own), holding a reference to them until Release. A tree with
// a run live here is shared; otherwise it is made: with one run for a new run started on its
// own, else (resume, or a child whose tree is live on no engine here) with the runs the store
// holds in it, so a resumed tree goes on counting the runs it already started. The store is
// read once per tree that comes back to life, not per run.
func (r *Registry) Acquire(ctx context.Context, runID string, ancestors []string, resume bool) (*exec.Tree, error) {
	root := runID
	if len(ancestors) > 0 {
		root = ancestors[0]
	}
	if t := r.share(root); t != nil {
		return t, nil
	}
	runs := 1
	if resume || len(ancestors) > 0 {
		n, err := r.Count(ctx, root, r.limits.MaxRuns)
		if err != nil {
			return nil, err
		}
		runs = n
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trees[root]
	if t == nil { // else made meanwhile by another run of the tree
		t = exec.NewTree(root, runs, r.limits.MaxRuns, r.limits.MaxInstances, r.limits.MaxParallel)
		r.trees[root] = t
	}
	t.Refs++
	return t, nil
}

// share returns the live tree of root with one more reference, or nil.
func (r *Registry) share(root string) *exec.Tree {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trees[root]
	if t != nil {
		t.Refs++
	}
	return t
}

// Release drops a reference Acquire took; the tree's counts go with its last live run.
func (r *Registry) Release(t *exec.Tree) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t.Refs--; t.Refs == 0 && r.trees[t.Root] == t {
		delete(r.trees, t.Root)
	}
}

// Live reports how many trees have a run live (tests).
func (r *Registry) Live() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.trees)
}

// Count counts the runs of root's tree in the store, root included, down to
// exec.MaxDepthCeiling levels; it stops counting once past limit (0 = exec.DefaultMaxTreeRuns):
// the count is then limit+1.
func (r *Registry) Count(ctx context.Context, root string, limit int) (int, error) {
	if limit <= 0 {
		limit = exec.DefaultMaxTreeRuns
	}
	n := 1
	level := []string{root}
	for depth := 0; depth < exec.MaxDepthCeiling && len(level) > 0; depth++ {
		var next []string
		for _, id := range level {
			kids, err := r.runs.ListRuns(ctx, store.RunFilter{ParentRunID: id})
			if err != nil {
				return 0, r.wrap(id, err)
			}
			n += len(kids)
			if n > limit {
				return limit + 1, nil
			}
			for _, k := range kids {
				next = append(next, k.ID)
			}
		}
		level = next
	}
	return n, nil
}

// Ancestors returns the ids of runID and of the runs above it, outermost first. It reads at
// most exec.MaxDepthCeiling+1 records, so a corrupted chain cannot loop.
func (r *Registry) Ancestors(ctx context.Context, runID string) ([]string, error) {
	var chain []string
	for id := runID; id != "" && len(chain) <= exec.MaxDepthCeiling; {
		chain = append(chain, id)
		rec, err := r.runs.GetRun(ctx, id)
		if err != nil {
			return nil, r.wrap(id, err)
		}
		id = rec.ParentRunID
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return chain, nil
}
