package exec

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dcc-flow/dcc-flow/engine/internal/expr"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// runForeach runs the body once per item, at most `concurrency` iterations at a time, with no
// more goroutines than that: the calling one, and one per slot of the tree's max_tree_parallel
// it could take (tree.go). The output is one object per item, keyed by body step id. With
// on_any_fail abort, the first failed iteration cancels those in flight and no new one starts;
// with continue, every iteration runs and the step fails at the end if any failed.
func (r *runner) runForeach(ctx context.Context, in *inst) stepEnd {
	sp, f := in.sp, in.f
	v, err := sp.sel.eval(f)
	if err != nil {
		return r.selectorEnd(in, "items", err)
	}
	items := expr.Items(v)
	n := len(items)
	if limit := r.x.cfg.Limits.MaxForeachItems; n > limit {
		return stepEnd{status: run.StepFailed, errKind: KindLimitExceeded, errMsg: fmt.Sprintf(
			"foreach %s: `items` gave %s items, more than the limit of %s (engine config max_foreach_items); "+
				"at about %s per item and body step, this run would need about %s of memory. Split the list "+
				"(e.g. a foreach over batches, each with a foreach inside), or raise max_foreach_items "+
				"(up to %s) if the host has the memory",
			in.row.Key, expr.Thousands(n), expr.Thousands(limit), formatBytes(foreachInstanceBytes),
			formatBytes(int64(n)*int64(max(len(sp.bodyFrame.owned), 1))*foreachInstanceBytes), expr.Thousands(MaxForeachItemsCeiling))}
	}
	if n > 0 {
		planned := n * len(sp.bodyFrame.owned)
		if sum, ok := r.tree.addInstances(planned, true); !ok {
			return stepEnd{status: run.StepFailed, errKind: KindLimitExceeded, errMsg: fmt.Sprintf(
				"foreach %s: its %s items would bring the step instances of run %s's tree of runs to %s, more than the "+
					"limit of %s (engine config max_tree_instances; every step instance planned by the run and the runs "+
					"its workflow steps started counts); at about %s each, they would need about %s of memory. Run less "+
					"per tree — fewer items, or fewer levels of foreach and sub-workflow — or raise max_tree_instances "+
					"(up to %s) if the host has the memory",
				in.row.Key, expr.Thousands(n), r.tree.Root, expr.Thousands(sum), expr.Thousands(r.tree.MaxInstances),
				formatBytes(foreachInstanceBytes), formatBytes(int64(sum)*foreachInstanceBytes), expr.Thousands(MaxTreeInstancesCeiling))}
		}
		r.total.Add(int64(planned))
	}
	outputs := make([][]byte, n) // each iteration's object, as JSON
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	abort := sp.st.OnAnyFail != spec.Continue

	var mu sync.Mutex
	var first *run.StepError
	failed := 0
	iterate := func(i int) bool {
		fr := f.iteration(sp, i, items[i])
		o := r.runList(fctx, fr, sp.body, false)
		outputs[i] = fr.appendObject(nil)
		switch o.status {
		case run.StepCompleted:
			return true
		case run.StepFailed:
			mu.Lock()
			failed++
			if first == nil {
				first = o.err
			}
			mu.Unlock()
			if abort {
				cancel(siblingAbort(o.err.StepKey))
				return false
			}
			return true
		}
		return false
	}

	conc := min(sp.st.Concurrency, n)
	if conc <= 1 {
		for i := 0; i < n && fctx.Err() == nil; i++ {
			if !iterate(i) {
				break
			}
		}
	} else {
		// The calling goroutine is the first worker; each other one holds a slot of the tree's
		// max_tree_parallel, taken without waiting (a foreach never waits for its children's
		// slots, so none can deadlock): when the tree has none free the foreach runs with fewer
		// workers, and grows back as slots free up, one worker per item finished.
		var next atomic.Int64
		var wg sync.WaitGroup
		var panicked atomic.Pointer[run.StepError]
		var workers atomic.Int32 // running, the first included
		workers.Store(1)
		var work func(extra bool)
		grow := func() {
			for {
				w := workers.Load()
				if int(w) >= conc || int(next.Load()) >= n || fctx.Err() != nil {
					return
				}
				if !r.tree.takeSlot() {
					return
				}
				if !workers.CompareAndSwap(w, w+1) {
					r.tree.giveSlot()
					continue
				}
				wg.Add(1)
				go work(true)
			}
		}
		work = func(extra bool) {
			defer func() {
				workers.Add(-1)
				if extra {
					r.tree.giveSlot()
					wg.Done()
				}
			}()
			defer func() {
				if p := recover(); p != nil {
					panicked.CompareAndSwap(nil, &run.StepError{RunID: r.id, StepKey: in.row.Key, Kind: KindInternal,
						Message: fmt.Sprintf("internal error (a bug in dcc-flow): %v", p), Trace: string(debug.Stack())})
					cancel(siblingAbort(in.row.Key))
				}
			}()
			for fctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n || !iterate(i) {
					return
				}
				grow()
			}
		}
		grow()
		work(false)
		wg.Wait()
		if p := panicked.Load(); p != nil && first == nil {
			first, failed = p, failed+1
		}
	}

	end := stepEnd{outputJSON: joinJSONArray(outputs), hasOutput: true, lazy: true}
	switch {
	case first != nil:
		end.status, end.errKind, end.cause = run.StepFailed, first.Kind, first
		end.errMsg = fmt.Sprintf("%d of %d iterations failed; first: %s: %s", failed, n, first.StepKey, first.Message)
	case ctx.Err() != nil:
		end = r.stoppedEnd(ctx)
	default:
		end.status = run.StepCompleted
	}
	return end
}

// runParallel runs the children at once (or as their depends_on allow). The output is an
// object keyed by child id.
func (r *runner) runParallel(ctx context.Context, in *inst) stepEnd {
	sp, f := in.sp, in.f
	o := r.runList(ctx, f, sp.body, sp.st.OnAnyFail != spec.Continue)
	out := make(map[string]any, len(sp.body.steps))
	for _, child := range sp.body.steps {
		if res := f.slots[child.slot].Load(); res != nil && res.status == run.StepCompleted {
			out[child.id] = res.value()
		}
	}
	end := stepEnd{output: out, hasOutput: true}
	switch o.status {
	case run.StepCompleted:
		end.status = run.StepCompleted
	case run.StepFailed:
		end.status, end.errKind, end.cause = run.StepFailed, o.err.Kind, o.err
		end.errMsg = fmt.Sprintf("branch %s failed: %s", o.err.StepKey, o.err.Message)
	default:
		end = r.stoppedEnd(ctx)
	}
	return end
}

// runBranch evaluates `on`, skips the other list and runs the taken one. The output is
// {"condition": value, "taken": "then" | "else"}.
func (r *runner) runBranch(ctx context.Context, in *inst) stepEnd {
	sp, f := in.sp, in.f
	cond, err := sp.sel.eval(f)
	if err != nil {
		var skip []*stepPlan
		for _, s := range append(sp.then.steps, sp.els.steps...) {
			skip = append(skip, s.subtree...)
		}
		r.skip(f, skip, fmt.Sprintf("branch %s failed", in.row.Key))
		return r.selectorEnd(in, "on", err)
	}
	taken, list, other := "then", sp.then, sp.els
	if !expr.Truthy(cond) {
		taken, list, other = "else", sp.els, sp.then
	}
	var skip []*stepPlan
	for _, s := range other.steps {
		skip = append(skip, s.subtree...)
	}
	r.skip(f, skip, fmt.Sprintf("branch %s took %q", in.row.Key, taken))
	o := r.runList(ctx, f, list, false)
	end := stepEnd{output: map[string]any{"condition": cond, "taken": taken}, hasOutput: true}
	switch o.status {
	case run.StepCompleted:
		end.status = run.StepCompleted
	case run.StepFailed:
		end.status, end.errKind, end.cause = run.StepFailed, o.err.Kind, o.err
		end.errMsg = fmt.Sprintf("%s failed: %s", o.err.StepKey, o.err.Message)
	default:
		end = r.stoppedEnd(ctx)
	}
	return end
}

// joinJSONArray joins JSON values into a JSON array; nil elements are null.
func joinJSONArray(elems [][]byte) []byte {
	n := 2 + len(elems)
	for _, e := range elems {
		n += max(len(e), 4)
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, e := range elems {
		if i > 0 {
			b = append(b, ',')
		}
		if e == nil {
			e = []byte("null")
		}
		b = append(b, e...)
	}
	return append(b, ']')
}

// foreachInstanceBytes is about what one step instance inside a foreach costs the process in
// memory while its run is live: the Go runtime's memory (Sys) grew by 69 MB for a foreach of
// 50,000 flow__echo steps and by 281 MB for 200,000 (in-memory store), 1.4 KB each.
const foreachInstanceBytes = 1536

// MaxForeachItemsCeiling is the largest max_foreach_items the engine config accepts.
const MaxForeachItemsCeiling = 10_000_000

// selectorEnd fails a foreach or branch whose `items` or `on` (field) could not be evaluated.
func (r *runner) selectorEnd(in *inst, field string, err error) stepEnd {
	kind, msg := KindInternal, fmt.Sprintf("%s %s: `%s`: %v", in.sp.kind, in.row.Key, field, err)
	var le *expr.LimitError
	if errors.As(err, &le) {
		key, ceiling := "jsonpath_max_results", expr.Thousands(expr.MaxResultsCeiling)
		if le.Limit == "work" {
			key, ceiling = "jsonpath_max_work", expr.Thousands(expr.MaxWorkCeiling)
		}
		kind = KindLimitExceeded
		msg += fmt.Sprintf(" (engine config %s). Select less — name the members to read instead of chaining \"..\" "+
			"or \"*\" — or raise %s (up to %s)", key, key, ceiling)
	}
	return stepEnd{status: run.StepFailed, errKind: kind, errMsg: msg}
}

// formatBytes formats n as "1.5 KB", "293 MB" or "3.6 GB" (powers of 1024).
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return strings.TrimSuffix(fmt.Sprintf("%.1f", float64(n)/(1<<10)), ".0") + " KB"
	}
	return fmt.Sprintf("%d bytes", n)
}
