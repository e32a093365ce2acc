package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/retention"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// PruneOptions selects the runs PruneRuns deletes. The zero value selects nothing: set
// FinishedBefore.
type PruneOptions struct {
	// FinishedBefore: only runs that finished before this time go.
	FinishedBefore time.Time
	// Statuses narrows it to some finished statuses (completed, failed, cancelled,
	// interrupted); empty means all four. Any other status is code invalid_request.
	Statuses []run.Status
	// Limit deletes at most this many runs, the earliest finished first; 0 = all of them.
	Limit int
	// DryRun deletes nothing: the result lists the runs that would go.
	DryRun bool
	// Progress, when not nil, is called after each step of the deletion with the runs deleted
	// so far and the number to delete (not for a dry run).
	Progress func(pruned, total int)
}

// PrunedRun is a run a prune deleted or, in a dry run, would delete.
type PrunedRun struct {
	ID         string     `json:"run_id"`
	Name       string     `json:"name"`
	Status     run.Status `json:"status"`
	Origin     string     `json:"origin"`
	CreatedAt  time.Time  `json:"created_at"`
	FinishedAt time.Time  `json:"finished_at"`
}

// PruneResult is what PruneRuns did.
type PruneResult struct {
	// Pruned is the number of runs deleted, or in a dry run the number that would be.
	Pruned int  `json:"pruned"`
	DryRun bool `json:"dry_run,omitempty"`
	// Runs lists the runs a dry run would delete, earliest finished first (nil otherwise).
	Runs []PrunedRun `json:"runs,omitempty"`
}

// PruneRuns deletes the finished runs that ended before opts.FinishedBefore (of opts.Statuses,
// at most opts.Limit of them, the earliest finished first), as Prune does, or with DryRun lists
// them. It lists them first, then deletes them in steps (the SQLite store commits 200 runs per
// transaction), so that the runs in progress keep writing while a long prune goes on; a run
// resumed between the two is kept. A run that has not finished is never deleted. When ctx ends
// part way, the runs already deleted stay deleted: the result counts them and the error is
// context.Cause(ctx). A read-only engine can make a dry run but not delete (code read_only).
func (e *Engine) PruneRuns(ctx context.Context, opts PruneOptions) (PruneResult, error) {
	if e.cfg.ReadOnly && !opts.DryRun {
		return PruneResult{}, e.errReadOnly("prune runs")
	}
	if e.isClosed() {
		return PruneResult{}, errClosed()
	}
	for _, st := range opts.Statuses {
		if !st.Terminal() {
			return PruneResult{}, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf(
				"statuses: %q is not a finished status; prune deletes only completed, failed, cancelled or interrupted runs", st),
				Details: map[string]any{"status": st}}
		}
	}
	if opts.Limit < 0 {
		return PruneResult{}, run.Errorf(run.CodeInvalidRequest, "limit: must be ≥ 0 (0 = no limit); got %d", opts.Limit)
	}
	p, ok := e.store.(store.Pruner)
	if !ok {
		return PruneResult{}, run.Errorf(run.CodeInvalidState, "this engine's store (%T) cannot prune runs; open the engine on a store that can (the in-memory or the SQLite store)", e.store)
	}
	runs, n, listErr, err := retention.Prune(ctx, p, retention.Request{Before: opts.FinishedBefore, Statuses: opts.Statuses,
		Limit: opts.Limit, DryRun: opts.DryRun, Progress: opts.Progress})
	if listErr != nil {
		return PruneResult{}, notFound("", listErr)
	}
	if opts.DryRun {
		res := PruneResult{Pruned: len(runs), DryRun: true, Runs: make([]PrunedRun, len(runs))}
		for i, r := range runs {
			res.Runs[i] = PrunedRun{ID: r.ID, Name: r.Name, Status: r.Status, Origin: r.Origin, CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt}
		}
		return res, nil
	}
	if err != nil && ctx.Err() == nil {
		err = notFound("", err)
	}
	return PruneResult{Pruned: n}, err
}

// Retention defaults (docs/operations/running.md, "Retention").
const (
	// DefaultRetention is how long serve keeps ended runs when its retention is not set.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultRetentionEvery is how often a retention pass runs when RetentionPolicy.Every is 0.
	DefaultRetentionEvery = time.Hour
)

// ParseRetention reads a retention setting: a number and a unit, "30d", "12h", "90m", "45s",
// "2w" (a day is 24 h), or a Go duration ("36h30m"); "forever", "off" or "0" keep the runs
// forever (it returns 0). Anything else, or a negative or fractional-nanosecond duration, is
// code invalid_request with a message naming the accepted forms.
func ParseRetention(s string) (time.Duration, error) {
	t := strings.TrimSpace(strings.ToLower(s))
	switch t {
	case "forever", "off", "never", "0", "none":
		return 0, nil
	}
	bad := func() error {
		return run.Errorf(run.CodeInvalidRequest, "retention %q: write how long ended runs are kept, e.g. 30d, 12h, 2w or 90m, or forever (or 0) to keep them", s)
	}
	units := map[byte]time.Duration{'w': 7 * 24 * time.Hour, 'd': 24 * time.Hour}
	if n := len(t); n >= 2 {
		if unit, ok := units[t[n-1]]; ok {
			v, err := strconv.ParseFloat(t[:n-1], 64)
			if err != nil || v < 0 || v > 1e5 {
				return 0, bad()
			}
			return time.Duration(v * float64(unit)), nil
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 {
		return 0, bad()
	}
	return d, nil
}

// RetentionPolicy is what a retention pass does (StartRetention).
type RetentionPolicy struct {
	// KeepFor: ended runs that finished longer ago than this are pruned; 0 keeps them forever.
	KeepFor time.Duration `json:"keep_secs"`
	// Every is the time between passes on the engine clock; 0 = DefaultRetentionEvery.
	Every time.Duration `json:"every_secs"`
}

// RetentionInfo reports the retention an engine applies and its last pass.
type RetentionInfo struct {
	// KeepSecs is how long ended runs are kept, in seconds; 0 = forever.
	KeepSecs float64 `json:"keep_secs"`
	// EverySecs is the time between passes, in seconds.
	EverySecs float64 `json:"every_secs"`
	// LastPass is when the last pass ended (zero before the first); NextPass when the next
	// one starts.
	LastPass time.Time `json:"last_pass,omitzero"`
	NextPass time.Time `json:"next_pass,omitzero"`
	// Pruned and Purged are the runs and expired idempotency entries the last pass deleted;
	// PrunedTotal and PurgedTotal add up every pass since StartRetention.
	Pruned      int `json:"pruned"`
	Purged      int `json:"purged"`
	PrunedTotal int `json:"pruned_total"`
	PurgedTotal int `json:"purged_total"`
	// Error is why the last pass failed ("" when it did not); the next pass tries again.
	Error string `json:"error,omitempty"`
}

// newRetention returns the engine's retention loop (engine/internal/retention): its passes
// prune through PruneRuns and purge through PurgeExpired, on the engine clock.
func (e *Engine) newRetention() *retention.Loop {
	return &retention.Loop{Deps: retention.Deps{Clock: e.clock, Purge: e.PurgeExpired,
		Prune: func(ctx context.Context, before time.Time) (int, error) {
			res, err := e.PruneRuns(ctx, PruneOptions{FinishedBefore: before})
			return res.Pruned, err
		}}}
}

// StartRetention applies p now and then every p.Every on the engine clock until Close or
// StopRetention: each pass prunes the runs that finished more than p.KeepFor ago (PruneRuns;
// none when KeepFor is 0) and purges the expired idempotency entries (PurgeExpired). A run
// that has not finished (running, waiting for an approval, paused) is never pruned. Starting
// again replaces the policy. A pass that fails is reported in Retention().Error and tried
// again at the next one. A read-only engine refuses (code read_only): its owner applies the
// retention. Negative durations are code invalid_request.
func (e *Engine) StartRetention(p RetentionPolicy) error {
	if e.cfg.ReadOnly {
		return e.errReadOnly("apply a retention")
	}
	if p.KeepFor < 0 || p.Every < 0 {
		return run.Errorf(run.CodeInvalidRequest, "retention: keep_secs and every_secs must be ≥ 0; got %v and %v", p.KeepFor, p.Every)
	}
	if p.Every == 0 {
		p.Every = DefaultRetentionEvery
	}
	// Refused under the loop's lock once Close has marked the engine closed: Close stops the
	// retention after that, so a loop started here is either refused or stopped by Close.
	return e.retention.Start(retention.Policy{KeepFor: p.KeepFor, Every: p.Every}, func() error {
		if e.isClosed() {
			return errClosed()
		}
		return nil
	})
}

// StopRetention stops the retention loop, waiting for a pass in progress to stop (between two
// prune transactions). Stopping when none runs is not an error.
func (e *Engine) StopRetention() { e.retention.Stop() }

// Retention reports the retention the engine applies and its last pass; false when
// StartRetention was not called (or StopRetention was).
func (e *Engine) Retention() (RetentionInfo, bool) {
	st, on := e.retention.Stats()
	return RetentionInfo{KeepSecs: st.Policy.KeepFor.Seconds(), EverySecs: st.Policy.Every.Seconds(), LastPass: st.LastPass,
		NextPass: st.NextPass, Pruned: st.Pruned, Purged: st.Purged, PrunedTotal: st.PrunedTotal, PurgedTotal: st.PurgedTotal,
		Error: st.Error}, on
}

// RetentionPassed returns a channel that receives after retention passes (at most one pending
// signal): tests wait on it after advancing a stub clock.
func (e *Engine) RetentionPassed() <-chan struct{} { return e.retention.Passed() }
