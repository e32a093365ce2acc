package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Retention and history exports (docs/reference/c-abi/README.md): prune runs, purge the idempotency cache,
// the retention serve applies, and the fire history of schedules.

type pruneRequest struct {
	// OlderThanSecs prunes the runs that finished more than this many seconds ago.
	OlderThanSecs *float64 `json:"older_than_secs"`
	// OlderThan is the same as text: "30d", "12h", "2w", a Go duration (engine.ParseRetention).
	OlderThan *string `json:"older_than"`
	// FinishedBefore prunes the runs that finished before this time.
	FinishedBefore *time.Time   `json:"finished_before"`
	Statuses       []run.Status `json:"statuses"`
	// Limit prunes at most this many runs, the earliest finished first (0 = all).
	Limit int `json:"limit"`
	// DryRun deletes nothing and lists the runs that would go.
	DryRun bool `json:"dry_run"`
}

// cutoff returns the finish time before which the request prunes runs.
func (r *pruneRequest) cutoff() (time.Time, error) {
	given := 0
	for _, set := range []bool{r.OlderThanSecs != nil, r.OlderThan != nil, r.FinishedBefore != nil} {
		if set {
			given++
		}
	}
	switch {
	case given != 1:
		return time.Time{}, &badRequest{msg: `invalid request: give one of "older_than_secs" (seconds since the runs finished), "older_than" ("30d", "12h") or "finished_before" (an RFC 3339 time)`}
	case r.FinishedBefore != nil:
		return *r.FinishedBefore, nil
	case r.OlderThan != nil:
		switch strings.ToLower(strings.TrimSpace(*r.OlderThan)) {
		case "forever", "off", "never", "none":
			return time.Time{}, &badRequest{msg: fmt.Sprintf(`invalid request: "older_than" is %q, which would prune nothing; give an age such as "30d" or "12h"`, *r.OlderThan)}
		}
		d, err := engine.ParseRetention(*r.OlderThan)
		if err != nil { // (its message is the retention setting's, where "forever" and "0" keep runs)
			return time.Time{}, &badRequest{msg: fmt.Sprintf(`invalid request: "older_than" is %q: give an age as a number and a unit, e.g. 30d, 12h, 2w or 90m ("0" prunes every ended run)`, *r.OlderThan)}
		}
		return time.Now().Add(-d), nil
	}
	secs := *r.OlderThanSecs
	if secs < 0 || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return time.Time{}, &badRequest{msg: fmt.Sprintf(`invalid request: "older_than_secs" must be a finite number of seconds ≥ 0; got %v`, secs)}
	}
	if secs >= maxAgeSecs { // a Duration this long would overflow: older than any run
		return time.Now().Add(-math.MaxInt64), nil
	}
	return time.Now().Add(-time.Duration(secs * float64(time.Second))), nil
}

// maxAgeSecs is the longest age a time.Duration holds (about 292 years).
const maxAgeSecs = float64(math.MaxInt64) / float64(time.Second)

// opRunsPrune: {"older_than_secs" | "older_than" | "finished_before", "statuses"?, "limit"?,
// "dry_run"?} → {"pruned": n} or, dry run, {"pruned": n, "dry_run": true, "runs": [...]}.
var opRunsPrune = withEngine(func(e *engine.Engine, req *pruneRequest) (any, error) {
	before, err := req.cutoff()
	if err != nil {
		return nil, err
	}
	if req.Limit < 0 {
		return nil, &badRequest{msg: fmt.Sprintf(`invalid request: "limit" must be ≥ 0 (0 = no limit); got %d`, req.Limit)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), pruneTimeout)
	defer cancel()
	res, err := e.PruneRuns(ctx, engine.PruneOptions{FinishedBefore: before, Statuses: req.Statuses, Limit: req.Limit, DryRun: req.DryRun})
	if err != nil {
		return nil, err
	}
	if res.DryRun && res.Runs == nil {
		res.Runs = []engine.PrunedRun{}
	}
	return res, nil
})

// pruneTimeout bounds one dccflow_runs_prune; hosts that prune a large history pass "limit"
// and call again (the Python Engine.prune does, with progress).
const pruneTimeout = 10 * time.Minute

// opIdempotencyPurge: {} → {"purged": n}: the idempotency entries whose TTL ran out.
var opIdempotencyPurge = withEngine(func(e *engine.Engine, _ *struct{}) (any, error) {
	n, err := e.PurgeExpired(context.Background())
	if err != nil {
		return nil, err
	}
	return map[string]int{"purged": n}, nil
})

type scheduleFiresRequest struct {
	ID    string `json:"id"`
	Limit *int   `json:"limit"`
}

// defaultFiresLimit is how many fires dccflow_schedule_fires returns without "limit".
const defaultFiresLimit = 20

// opScheduleFires: {"id"?, "limit"?} → {"fires": [fire…]}: the fire history of schedule id
// ("" or absent = every schedule), newest first, at most limit (default 20; 0 = all kept).
var opScheduleFires = withEngine(func(e *engine.Engine, req *scheduleFiresRequest) (any, error) {
	limit := defaultFiresLimit
	if req.Limit != nil {
		if *req.Limit < 0 {
			return nil, &badRequest{msg: fmt.Sprintf(`invalid request: "limit" must be ≥ 0 (0 = every fire kept); got %d`, *req.Limit)}
		}
		limit = *req.Limit
	}
	fires, err := e.ScheduleFires(context.Background(), req.ID, limit)
	if err != nil {
		return nil, err
	}
	if fires == nil {
		fires = []engine.Fire{}
	}
	return map[string]any{"fires": fires}, nil
})

// serveRetention parses the "retention" of dccflow_serve_start: absent keeps ended runs for
// engine.DefaultRetention (30 days) when the request serves something (the scheduler, webhooks,
// MCP or the dashboard); "forever" or "0" keeps them forever (expired idempotency entries are still purged).
// ok is false when no retention is (re)started: absent, on a request that only loads schedules
// (dcc-flow schedules lists them so), when one runs already (it is kept) or on a read-only
// engine, whose owner applies one.
func serveRetention(e *engine.Engine, req *serveRequest) (p engine.RetentionPolicy, ok bool, err error) {
	given := req.Retention
	if given == nil {
		serving := (req.Scheduler == nil && req.SchedulesDir != "") || (req.Scheduler != nil && *req.Scheduler) ||
			req.Webhooks != nil || req.MCP != "" || req.UI != ""
		_, running := e.Retention() // a later serve_start without one keeps the running one
		return engine.RetentionPolicy{KeepFor: engine.DefaultRetention}, serving && !running && !e.Config().ReadOnly, nil
	}
	keep, err := engine.ParseRetention(*given)
	if err != nil {
		return p, false, &badRequest{msg: `invalid request: "retention": ` + err.Error()}
	}
	return engine.RetentionPolicy{KeepFor: keep}, true, nil
}

// retentionJSON is the retention an engine applies, as serve_start and retention_status
// report it.
func retentionJSON(e *engine.Engine) any {
	info, on := e.Retention()
	if !on {
		return nil
	}
	return info
}

// opRetentionStatus: {} → {"retention": {keep_secs, every_secs, last_pass, next_pass, pruned,
// purged, pruned_total, purged_total, error?} | null}.
var opRetentionStatus = withEngine(func(e *engine.Engine, _ *struct{}) (any, error) {
	return map[string]any{"retention": retentionJSON(e)}, nil
})
