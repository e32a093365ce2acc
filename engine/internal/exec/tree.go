package exec

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/dcc-flow/dcc-flow/engine/internal/expr"
)

// Tree limits (docs/reference/limits.md, "Run limits"): a run started on its own and every run below it
// through workflow steps — its child runs, theirs, and so on — are one tree. Per-step limits
// (max_foreach_items, foreach concurrency, max_depth) multiply through a chain of foreaches that
// run the next level as a sub-workflow (20 items four levels deep start 168,420 runs, all live
// at once), so the tree is bounded as a whole: by the runs it ever started and by the step
// instances its runs planned.

// DefaultMaxTreeRuns is how many runs one tree may hold when Config.MaxTreeRuns is 0, the run
// started on its own included. A live run costs about 20 KB and one goroutine or more (a
// foreach of sub-workflows 40 wide and 3 deep, 65,640 runs all live at once, peaked at 1.3 GB
// and 60,884 goroutines), so the default keeps a tree whose runs are all live at once near
// 200 MB.
const DefaultMaxTreeRuns = 10_000

// MaxTreeRunsCeiling is the largest max_tree_runs the engine config accepts.
const MaxTreeRunsCeiling = 10_000_000

// DefaultMaxTreeInstances is how many step instances the runs of one tree may plan together
// when Config.MaxTreeInstances is 0: about 1.4 GB at foreachInstanceBytes each, the memory of
// ten foreach steps at the default max_foreach_items.
const DefaultMaxTreeInstances = 1_000_000

// MaxTreeInstancesCeiling is the largest max_tree_instances the engine config accepts.
const MaxTreeInstancesCeiling = 1_000_000_000

// DefaultMaxTreeParallel is how many foreach iterations beyond the first of each foreach (and
// steps of a DAG list — a parallel step's, a depends_on list — beyond the first in flight of
// each list: runDAG) the runs of one tree have in flight at once when Config.MaxTreeParallel is 0. Each holds a
// goroutine and the step instances it runs (a sub-workflow's child run, the child's own
// foreach workers): 40 items 40 at a time 3 levels deep held 60,884 goroutines before.
const DefaultMaxTreeParallel = 1_000

// MaxTreeParallelCeiling is the largest max_tree_parallel the engine config accepts.
const MaxTreeParallelCeiling = 1_000_000

// Tree counts what the runs of one tree used, against the engine's tree limits. The engine
// keeps one per tree with a run live in it (Params.Tree) and drops it when the last one ends.
// Its methods are safe for concurrent use; a nil *Tree counts nothing and refuses nothing.
type Tree struct {
	// Root is the id of the run started on its own.
	Root string
	// MaxRuns and MaxInstances are the limits, defaults applied.
	MaxRuns, MaxInstances int

	// MaxParallel is how many foreach workers beyond the first of each foreach the tree's runs
	// may have at once (takeSlot).
	MaxParallel int
	parallel    atomic.Int64 // slots taken

	mu        sync.Mutex
	runs      int // runs of the tree ever started, the root included
	instances int // step instances the runs executed here planned
	// Refs is the engine's count of the tree's runs live in it (under the lock of its
	// engine/internal/runtree.Registry).
	Refs int
}

// NewTree returns the counts of the tree of root, which holds runs runs already (1 for a new
// root; what the database holds for a resumed tree).
func NewTree(root string, runs, maxRuns, maxInstances, maxParallel int) *Tree {
	if maxParallel <= 0 {
		maxParallel = DefaultMaxTreeParallel
	}
	if maxRuns <= 0 {
		maxRuns = DefaultMaxTreeRuns
	}
	if maxInstances <= 0 {
		maxInstances = DefaultMaxTreeInstances
	}
	return &Tree{Root: root, MaxRuns: maxRuns, MaxInstances: maxInstances, MaxParallel: maxParallel, runs: runs}
}

// Runs returns how many runs the tree holds.
func (t *Tree) Runs() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.runs
}

// Instances returns how many step instances the tree's runs planned.
func (t *Tree) Instances() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.instances
}

// AddRun counts one more run of the tree, unless that would pass MaxRuns: then it counts
// nothing and returns the limit error's message (what, the limit, the config key, the fix),
// starting with "starting workflow <workflow>".
func (t *Tree) AddRun(workflow string) (string, bool) {
	if t == nil {
		return "", true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.runs+1 > t.MaxRuns {
		return fmt.Sprintf("starting workflow %s would make run %s's tree of sub-workflows %s runs, more than the limit of %s "+
			"(engine config max_tree_runs; the tree counts every run started under %s, retries and finished runs included). "+
			"Run fewer sub-workflows — a foreach over a list of items inside one workflow instead of a workflow per item, "+
			"or less nesting — or raise max_tree_runs (up to %s) if the host has the memory (about 20 KB per live run)",
			workflow, t.Root, expr.Thousands(t.runs+1), expr.Thousands(t.MaxRuns), t.Root, expr.Thousands(MaxTreeRunsCeiling)), false
	}
	t.runs++
	return "", true
}

// addInstances counts n more step instances, refusing (counting nothing) when check is set and
// they would pass MaxInstances; it returns the count they would make.
func (t *Tree) addInstances(n int, check bool) (int, bool) {
	if t == nil || n <= 0 {
		return 0, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if check && t.instances+n > t.MaxInstances {
		return t.instances + n, false
	}
	t.instances += n
	return t.instances, true
}

// takeSlot takes one of the MaxParallel slots, without waiting: false when none is free.
func (t *Tree) takeSlot() bool {
	if t == nil {
		return true
	}
	for {
		n := t.parallel.Load()
		if n >= int64(t.MaxParallel) {
			return false
		}
		if t.parallel.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// giveSlot returns a slot takeSlot took.
func (t *Tree) giveSlot() {
	if t != nil {
		t.parallel.Add(-1)
	}
}

// Parallel returns the slots taken.
func (t *Tree) Parallel() int {
	if t == nil {
		return 0
	}
	return int(t.parallel.Load())
}
