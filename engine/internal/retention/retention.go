// Package retention applies a retention policy (docs/operations/running.md, "Retention"): a Loop runs
// a pass at once and then every period on the engine clock, each pass pruning the runs that
// finished longer ago than the policy keeps them and purging the expired idempotency entries;
// Prune steps a deletion over store.Pruner. It knows nothing of the engine facade: the pass's
// two deletions are functions the engine gives it.
package retention

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/startstop"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Request selects the runs Prune deletes.
type Request struct {
	// Before: only runs that finished before this time go.
	Before time.Time
	// Statuses narrows it to some finished statuses; empty means all four.
	Statuses []run.Status
	// Limit deletes at most this many runs, the earliest finished first; 0 = all of them.
	Limit int
	// DryRun deletes nothing: Prune returns the runs that would go.
	DryRun bool
	// Progress, when not nil, is called after each step of the deletion with the runs deleted
	// so far and the number to delete (not for a dry run).
	Progress func(pruned, total int)
}

// Prune lists the runs req selects, then (unless req.DryRun) deletes them in steps
// (store.Pruner.PruneRuns), so that the runs in progress keep writing while a long prune goes
// on; a run resumed between the two is kept by the store. It returns the runs listed (all of
// them for a dry run, whose pruned count is 0) and the number deleted. A listing that fails
// returns listErr; a deletion that fails returns the runs deleted so far and, when ctx ended,
// context.Cause(ctx), else the store's error as pruneErr. The caller maps the store's errors.
func Prune(ctx context.Context, p store.Pruner, req Request) (listed []store.Run, pruned int, listErr, pruneErr error) {
	runs, err := p.PruneCandidates(ctx, req.Before, req.Statuses, req.Limit)
	if err != nil {
		return nil, 0, err, nil
	}
	if req.DryRun || len(runs) == 0 {
		return runs, 0, nil, nil
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	var progress func(int)
	if req.Progress != nil {
		progress = func(n int) { req.Progress(n, len(ids)) }
	}
	n, err := p.PruneRuns(ctx, ids, req.Before, req.Statuses, progress)
	if err != nil && ctx.Err() != nil {
		return runs, n, nil, context.Cause(ctx)
	}
	return runs, n, nil, err
}

// Policy is what a pass does.
type Policy struct {
	// KeepFor: ended runs that finished longer ago than this are pruned; 0 keeps them forever.
	KeepFor time.Duration
	// Every is the time between passes on the clock; it must be positive.
	Every time.Duration
}

// Stats reports the policy a Loop applies and its last pass.
type Stats struct {
	Policy Policy
	// LastPass is when the last pass ended (zero before the first); NextPass when the next
	// one starts.
	LastPass, NextPass time.Time
	// Pruned and Purged are the runs and expired idempotency entries the last pass deleted;
	// PrunedTotal and PurgedTotal add up every pass since Start.
	Pruned, Purged           int
	PrunedTotal, PurgedTotal int
	// Error is why the last pass failed ("" when it did not); the next pass tries again.
	Error string
}

// Deps is what a pass needs from the engine.
type Deps struct {
	Clock clock.Clock
	// Prune deletes the ended runs that finished before the time given and returns how many
	// (with the ones deleted before an error).
	Prune func(ctx context.Context, before time.Time) (int, error)
	// Purge deletes the expired idempotency entries and returns how many.
	Purge func(ctx context.Context) (int, error)
}

// Loop is the retention loop of one engine: Start applies a policy, Stop stops it. Its methods
// are safe for concurrent use; the zero value needs its Deps set before Start.
type Loop struct {
	Deps Deps

	// control serialises Start and Stop, so that two concurrent starts cannot both leave a
	// loop running.
	control sync.Mutex
	loop    *startstop.Periodic
	mu      sync.Mutex
	stats   Stats
	on      bool
	// passes is signalled after each pass (tests wait on it).
	passes chan struct{}
}

// Start stops the loop if it runs, then runs a pass of p at once and then every p.Every on the
// clock until Stop. refuse, called under the loop's control lock, stops the start when it
// returns an error (the engine closed: Close stops the loop after it marks the engine closed,
// so a loop started here is either refused or stopped).
func (l *Loop) Start(p Policy, refuse func() error) error {
	l.control.Lock()
	defer l.control.Unlock()
	if err := refuse(); err != nil {
		return err
	}
	l.stop()
	l.mu.Lock()
	l.on = true
	l.stats = Stats{Policy: p}
	if l.passes == nil {
		l.passes = make(chan struct{}, 1)
	}
	l.mu.Unlock()
	l.loop = &startstop.Periodic{Clock: l.Deps.Clock, Period: p.Every, Fn: func(ctx context.Context) { l.pass(ctx, p) }}
	return l.loop.Start(context.Background())
}

// pass runs one pass of p and records it.
func (l *Loop) pass(ctx context.Context, p Policy) {
	var pruned, purged int
	var errs []string
	if p.KeepFor > 0 {
		n, err := l.Deps.Prune(ctx, l.Deps.Clock.Now().Add(-p.KeepFor))
		pruned = n
		if err != nil && ctx.Err() == nil {
			errs = append(errs, "pruning runs: "+err.Error())
		}
	}
	if ctx.Err() == nil {
		n, err := l.Deps.Purge(ctx)
		purged = n
		if err != nil && ctx.Err() == nil {
			errs = append(errs, "purging expired idempotency entries: "+err.Error())
		}
	}
	l.mu.Lock()
	now := l.Deps.Clock.Now()
	st := &l.stats
	st.LastPass, st.NextPass = now, now.Add(p.Every)
	st.Pruned, st.Purged = pruned, purged
	st.PrunedTotal += pruned
	st.PurgedTotal += purged
	st.Error = strings.Join(errs, "; ")
	passes := l.passes
	l.mu.Unlock()
	select {
	case passes <- struct{}{}:
	default:
	}
}

// Stop stops the loop, waiting for a pass in progress to stop (between two prune
// transactions). Stopping when none runs is not an error.
func (l *Loop) Stop() {
	l.control.Lock()
	defer l.control.Unlock()
	l.stop()
}

// stop is Stop; the caller holds l.control.
func (l *Loop) stop() {
	if l.loop != nil {
		l.loop.Stop()
	}
	l.mu.Lock()
	l.on = false
	l.mu.Unlock()
}

// Stats reports the policy applied and the last pass; false when Start was not called (or Stop
// was since).
func (l *Loop) Stats() (Stats, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats, l.on
}

// Passed returns a channel that receives after passes (at most one pending signal): tests wait
// on it after advancing a stub clock.
func (l *Loop) Passed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.passes == nil {
		l.passes = make(chan struct{}, 1)
	}
	return l.passes
}
