package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/resgate"
	"github.com/dcc-flow/dcc-flow/engine/internal/resources"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/engine/spec"
)

// checkResources fails with a *spec.ValidationError (problems unknown_resource and
// resource_over_limit, naming the step, the field and the fix) when a tool step of s asks for a
// resource the engine's config does not declare, or for more than its limit
// (spec.Spec.CheckResources; docs/guide/resources.md).
//
// The problems carry no line and column: the spec a run starts with has often crossed the C ABI
// as its canonical JSON (the Python package sends that), whose positions are not those of the
// file; each message names the step and the field.
func (e *Engine) checkResources(s *spec.Spec) error {
	if s.Resources() == nil {
		return nil
	}
	err := s.CheckResources(e.cfg.resourceLimits())
	if ve, ok := err.(*spec.ValidationError); ok {
		for i := range ve.Problems {
			ve.Problems[i].Line, ve.Problems[i].Column = 0, 0
		}
	}
	return err
}

// livePlaces sets the place of each step of steps (of run runID) that is waiting_resources in
// this engine's queue to its place now, and its progress message with it: the record has the
// place its wait started with (resources.Request.OnWait tells it once), and the waiters ahead
// of it may have been served since. A step this engine's queue does not have (its run is
// another engine's, or it waits for other engines' units) keeps its record.
func (e *Engine) livePlaces(runID string, steps []StepInfo) {
	g := e.resGate
	if g == nil {
		return
	}
	var places map[string][2]int
	for i := range steps {
		w := steps[i].Waiting
		if w == nil || w.OtherEngines {
			continue
		}
		if places == nil {
			places = g.Places()
		}
		p, ok := places[runID+"/"+steps[i].Key]
		if !ok {
			continue
		}
		live := *w
		live.Place, live.Of = p[0], p[1]
		steps[i].Waiting = &live
		if pr := steps[i].Progress; pr != nil {
			msg := *pr
			msg.Message = resgate.WaitMessage(exec.DescribeAmounts(w.Resources), live)
			steps[i].Progress = &msg
		}
	}
}

// limitsWarning says, when holders of resource name were taken under a limit other than this
// engine's (limit; 0 = not declared here), that the engines disagree and which limit wins: each
// engine takes units only while the total held is below its own limit, so the total never passes
// the largest, and an engine with a smaller one waits while the total is at or above it. "" when
// they agree — and, for an engine that does not declare the name (it takes no units of it: a
// `dcc-flow resources` without --resource), when every holder was taken under one limit.
func limitsWarning(name string, limit int, slots []store.Slot) string {
	other := map[int][]string{}
	for _, sl := range slots {
		if sl.Limit != limit && sl.Limit > 0 {
			who := sl.Engine
			if who == "" {
				who = "an earlier configuration"
			}
			if !slices.Contains(other[sl.Limit], who) {
				other[sl.Limit] = append(other[sl.Limit], who)
			}
		}
	}
	if len(other) == 0 || (limit == 0 && len(other) == 1) {
		return ""
	}
	largest := limit
	var parts []string
	for _, l := range slices.Sorted(maps.Keys(other)) {
		largest = max(largest, l)
		parts = append(parts, fmt.Sprintf("%d on %s", l, strings.Join(other[l], ", ")))
	}
	list := strings.Join(parts, "; ")
	if limit > 0 {
		list = fmt.Sprintf("%d here, %s", limit, list)
	}
	return fmt.Sprintf("engines declare different limits for %s: %s; each takes units only while the total held is below its own limit, "+
		"so the total never passes %d and the engines with a smaller limit wait longer: declare one limit everywhere", name, list, largest)
}

// ResourcesInfo is what Engine.Resources returns: every declared resource of the engine.
type ResourcesInfo struct {
	Resources []ResourceInfo `json:"resources"`
}

// ResourceInfo is one resource: its limit, the units in use (on a shared database, by every
// engine), who holds them and who of this engine waits.
type ResourceInfo struct {
	Name string `json:"name"`
	// Limit is this engine's declared limit; 0 for a resource it does not declare that units are
	// held of (by another engine of a shared database, or by the owner of a SQLite file this
	// engine reads).
	Limit int `json:"limit"`
	InUse int `json:"in_use"`
	// Holders hold units, the first taken first; on a shared database those of every engine.
	Holders []ResourceHolder `json:"holders"`
	// Queue is this engine's waiters, in the order they will be served.
	Queue []ResourceWaiter `json:"queue"`
	// Probe is the state of the resource's probe (its live count), when it has one.
	Probe *ResourceProbeInfo `json:"probe,omitempty"`
	// Warning, when not "", says that holders were taken under other limits than this engine's
	// (engines of a shared database declaring different limits for the name) and which wins.
	Warning string `json:"warning,omitempty"`
}

// ResourceHolder is one step attempt holding units of a resource.
type ResourceHolder struct {
	RunID   string `json:"run_id"`
	StepKey string `json:"step_key"`
	Amount  int    `json:"amount"`
	// Limit is the limit its engine took the units under.
	Limit  int       `json:"limit"`
	Engine string    `json:"engine,omitempty"`
	Since  time.Time `json:"since"`
}

// ResourceWaiter is one step attempt waiting for units of a resource.
type ResourceWaiter struct {
	// Label is "RUN/STEP_KEY".
	Label  string `json:"label"`
	Amount int    `json:"amount"`
	// Position is its place in the queue of the resource: 1 is served next. The queue is this
	// engine's, or on a shared PostgreSQL database the one queue of every engine.
	Position int `json:"position"`
	// Priority is its run's; Effective adds what it gained by waiting (aging).
	Priority  int `json:"priority"`
	Effective int `json:"effective_priority"`
	// FairShare is the key it shares a round-robin turn by: "fair_share:" and its spec's
	// rendered `fair_share`, else its run tree's root run id.
	FairShare string    `json:"fair_share"`
	Since     time.Time `json:"since"`
	// Engine is the engine it waits on (a shared database's queue); "" in an engine's own.
	Engine string `json:"engine,omitempty"`
}

// Resources lists the engine's declared resources, and the others the store has holders of, by
// name, with their limits, the units held (from the store: on a shared database, by every
// engine; for a read-only engine, by the file's owner), who holds them and who waits for them:
// this engine's waiters, or on a shared PostgreSQL database those of every engine, in the order
// they are served (docs/guide/resources.md). Empty when none is declared or held.
func (e *Engine) Resources(ctx context.Context) (*ResourcesInfo, error) {
	if e.isClosed() {
		return nil, errClosed()
	}
	out := &ResourcesInfo{Resources: []ResourceInfo{}}
	limits := e.cfg.resourceLimits()
	var snap resources.State
	if e.cfg.ReadOnly && e.resGate != nil && e.resGate.Prober() != nil { // its probes do not run in the background
		e.resGate.Prober().CheckPending(ctx)
	}
	if e.resGate != nil {
		snap = e.resGate.Snapshot()
	}
	queues := map[string][]resources.Queued{}
	local := map[string]resources.ResourceState{}
	for _, r := range snap.Resources {
		queues[r.Name] = r.Queue
		local[r.Name] = r
	}
	var shared map[string][]ResourceWaiter // the database's queue, by resource (store.ResourceQueue)
	if q, ok := e.store.(store.ResourceQueue); ok {
		ws, err := q.Waiters(ctx)
		if err != nil {
			return nil, &run.Error{Code: run.CodeStorage, Message: "listing the resources' queue: " + err.Error(), Err: err}
		}
		shared = map[string][]ResourceWaiter{}
		for _, w := range ws {
			for name, amount := range w.Amounts {
				shared[name] = append(shared[name], ResourceWaiter{Label: w.RunID + "/" + w.Label, Amount: amount,
					Position: len(shared[name]) + 1, Priority: w.Priority, Effective: w.Effective, FairShare: w.Key,
					Since: w.Since, Engine: w.Engine})
			}
		}
	}
	var slots []store.Slot
	if ss, ok := e.store.(store.ResourceSlots); ok {
		var err error
		if slots, err = ss.Slots(ctx); err != nil {
			return nil, &run.Error{Code: run.CodeStorage, Message: "listing the resources' holders: " + err.Error(), Err: err}
		}
	}
	byName := map[string][]store.Slot{}
	for _, sl := range slots {
		byName[sl.Resource] = append(byName[sl.Resource], sl)
	}
	names := maps.Clone(limits)
	if names == nil {
		names = map[string]int{}
	}
	for name := range byName { // held by another engine (or an earlier config) and not declared here
		if _, ok := names[name]; !ok {
			names[name] = 0
		}
	}
	for _, name := range slices.Sorted(maps.Keys(names)) {
		ri := ResourceInfo{Name: name, Limit: limits[name], Holders: []ResourceHolder{}, Queue: []ResourceWaiter{}}
		for _, sl := range byName[name] {
			ri.InUse += sl.Amount
			ri.Holders = append(ri.Holders, ResourceHolder{RunID: sl.RunID, StepKey: sl.Label, Amount: sl.Amount, Limit: sl.Limit,
				Engine: sl.Engine, Since: sl.AcquiredAt})
		}
		ri.Warning = limitsWarning(name, ri.Limit, byName[name])
		ri.Probe = probeInfo(e.resGate, name)
		if _, ok := e.store.(store.ResourceSlots); !ok {
			ri.InUse = local[name].InUse
		}
		if shared != nil {
			if ws := shared[name]; ws != nil {
				ri.Queue = ws
			}
		} else {
			for _, q := range queues[name] {
				ri.Queue = append(ri.Queue, ResourceWaiter{Label: q.Label, Amount: q.Amount, Position: q.Position,
					Priority: q.Priority, Effective: q.Effective, FairShare: q.Key, Since: q.Since})
			}
		}
		out.Resources = append(out.Resources, ri)
	}
	return out, nil
}
