package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/metrics"
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

// Polling of a shared store whose other engines hold the units this engine's head waiter
// needs: the first retry after slotPollMin, each next one twice as late, at most slotPollMax.
const (
	slotPollMin = 50 * time.Millisecond
	slotPollMax = 2 * time.Second
)

// resourceGate is the executor's exec.ResourceGate: the waiters of this engine are ordered by
// a resources.Scheduler (priority, fair share by run tree, first come first served, aging) on
// the engine's declared limits, and the units granted are then taken in the store
// (store.ResourceSlots), which counts them across every engine of a shared database. On a
// shared database the head waiter whose units other engines hold keeps its place and asks the
// store again (slotPollMin to slotPollMax); on a store of one engine the store always agrees.
type resourceGate struct {
	sched  *resources.Scheduler
	slots  store.ResourceSlots // nil: the scheduler's count only
	clock  clock.Clock
	limits map[string]int
	// waited is told, for each resource of an attempt that got its units, how long it waited
	// (the metrics' dccflow_resource_wait_seconds).
	waited func(resource string, d time.Duration)
	// probes read the live counts of the resources that have a probe (resources_probe.go); nil
	// when none has. Started with the engine's services.
	probes     *resources.Prober
	probeEvery map[string]time.Duration
	// waker hands the shared queue's wake-ups to the waiting attempts (resources_shared.go).
	waker slotWaker

	// elsewhere counts, by resource, the attempts this engine's scheduler granted whose units
	// the store refused (other engines of a shared database hold them) and their units: they
	// wait (waiting_resources), so the metrics count them as waiting, not in use.
	mu        sync.Mutex
	elsewhere map[string][2]int // attempts, units
}

// newResourceGate returns the gate of the declared resources, nil when none is declared.
func newResourceGate(cfg Config, st store.Store, c clock.Clock, waited func(resource string, d time.Duration)) *resourceGate {
	limits := cfg.resourceLimits()
	if len(limits) == 0 {
		return nil
	}
	g := &resourceGate{sched: resources.New(c, limits, resources.Options{}), clock: c, limits: limits, waited: waited}
	g.slots, _ = st.(store.ResourceSlots)
	if specs := cfg.probeSpecs(); len(specs) > 0 {
		g.probes = resources.NewProber(g.sched, specs, nil, probeWarn)
		g.probeEvery = map[string]time.Duration{}
		for _, sp := range specs {
			g.probeEvery[sp.Resource] = sp.Every
		}
	}
	return g
}

// Acquire implements exec.ResourceGate.
func (g *resourceGate) Acquire(ctx context.Context, w exec.ResourceWait) (release func(), err error) {
	what := exec.DescribeAmounts(w.Amounts)
	label := w.RunID + "/" + w.StepKey
	start := g.clock.Now()
	defer func() {
		if err == nil && g.waited != nil { // a wait that got its units
			d := g.clock.Now().Sub(start)
			for name := range w.Amounts {
				g.waited(name, d)
			}
		}
	}()
	if q, ok := g.slots.(store.ResourceQueue); ok {
		return g.acquireShared(ctx, q, w, what, label, start)
	}
	grant, err := g.sched.Acquire(ctx, resources.Request{Amounts: w.Amounts, Priority: w.Priority, Key: w.FairShare, Label: label,
		OnWait: func(place, n int) {
			wt := run.StepWaiting{Resources: w.Amounts, Place: place, Of: n, Since: start}
			w.Waiting(wt, waitMessage(what, wt))
		}})
	if err != nil {
		return nil, err
	}
	if g.slots == nil {
		return grant.Release, nil
	}
	limits := make(map[string]int, len(w.Amounts))
	for name := range w.Amounts {
		limits[name] = g.limits[name]
	}
	req := store.SlotRequest{ID: holderID(w), Amounts: w.Amounts, Limits: limits, RunID: w.RunID, Label: w.StepKey}
	for delay, told := slotPollMin, false; ; delay = min(2*delay, slotPollMax) {
		ok, err := g.slots.AcquireSlots(ctx, req)
		if err != nil {
			grant.Release()
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, err
		}
		if ok {
			break
		}
		if !told {
			told = true
			g.waitElsewhere(w.Amounts, 1)
			defer g.waitElsewhere(w.Amounts, -1)
			wt := run.StepWaiting{Resources: w.Amounts, Place: 1, Of: 1 + g.queued(w.Amounts), OtherEngines: true, Since: start}
			w.Waiting(wt, waitMessage(what, wt))
		}
		if err := clock.Sleep(ctx, g.clock, delay); err != nil {
			grant.Release()
			return nil, err
		}
	}
	return func() {
		// Giving back cannot wait for the run's context: a cancelled run's units free too. A
		// release that fails leaves the units to the engine's lease (a shared database) or to
		// the store's close.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = g.slots.ReleaseSlots(ctx, req.ID)
		grant.Release()
	}, nil
}

// waitElsewhere adds sign (1 or -1) times one attempt asking for amounts to g.elsewhere.
func (g *resourceGate) waitElsewhere(amounts map[string]int, sign int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.elsewhere == nil {
		g.elsewhere = map[string][2]int{}
	}
	for name, n := range amounts {
		c := g.elsewhere[name]
		c[0] += sign
		c[1] += sign * n
		if c == [2]int{} {
			delete(g.elsewhere, name)
		} else {
			g.elsewhere[name] = c
		}
	}
}

// waitMessage is the progress message of a step waiting for amounts (what, DescribeAmounts):
// "waiting for houdini ×1: 2nd of 3 in this engine's queue", or, first in this engine's queue
// while other engines hold the units, "waiting for houdini ×1: first in this engine's queue;
// other engines hold the units", or, in the one queue of a PostgreSQL database's engines
// (AllEngines), "waiting for houdini ×1: 3rd in the database's queue (all engines)".
func waitMessage(what string, w run.StepWaiting) string {
	if w.AllEngines {
		return fmt.Sprintf("waiting for %s: %s in the database's queue (all engines)", what, ordinal(w.Place))
	}
	if w.OtherEngines {
		return fmt.Sprintf("waiting for %s: first in this engine's queue; other engines hold the units", what)
	}
	return fmt.Sprintf("waiting for %s: %s of %d in this engine's queue", what, ordinal(w.Place), w.Of)
}

// queued is the number of this engine's waiters for the resources of amounts (of each
// resource, the most).
func (g *resourceGate) queued(amounts map[string]int) int {
	n := 0
	for _, r := range g.sched.Snapshot().Resources {
		if _, ok := amounts[r.Name]; ok {
			n = max(n, len(r.Queue))
		}
	}
	return n
}

// places returns the place of each waiter of this engine's queue, by label ("RUN/STEP_KEY"),
// as run.StepWaiting's Place and Of (of each resource it asks for, the worst place and the
// longest queue), read now.
func (g *resourceGate) places() map[string][2]int {
	out := map[string][2]int{}
	for _, r := range g.sched.Snapshot().Resources {
		for _, q := range r.Queue {
			p := out[q.Label]
			out[q.Label] = [2]int{max(p[0], q.Position), max(p[1], len(r.Queue))}
		}
	}
	return out
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
			places = g.places()
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
			msg.Message = waitMessage(exec.DescribeAmounts(w.Resources), live)
			steps[i].Progress = &msg
		}
	}
}

// gauges is the state of each declared resource in this engine, for the metrics: its limit,
// the units its step attempts hold and how many wait (its steps that are waiting_resources: in
// its queue, or first there while other engines hold the units).
func (g *resourceGate) gauges() []metrics.ResourceGauge {
	var out []metrics.ResourceGauge
	g.mu.Lock()
	elsewhere := maps.Clone(g.elsewhere)
	g.mu.Unlock()
	for _, r := range g.sched.Snapshot().Resources {
		e := elsewhere[r.Name]
		rg := metrics.ResourceGauge{Name: r.Name, Limit: r.Limit, InUse: max(r.InUse-e[1], 0), Waiting: len(r.Queue) + e[0]}
		if g.probes != nil {
			if st, ok := g.probes.Status(r.Name); ok {
				rg.Probe = &metrics.ProbeGauge{State: st.State, Free: st.Free, FreeAt: st.FreeAt, Checked: st.Checked}
			}
		}
		out = append(out, rg)
	}
	return out
}

// holderID names one attempt's hold in the store: the run, the step instance (hashed when
// long), the attempt and a random part (an attempt made again after a resume is a new holder).
func holderID(w exec.ResourceWait) string {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	key := w.StepKey
	if len(key) > 100 {
		sum := sha256.Sum256([]byte(key))
		key = "#" + hex.EncodeToString(sum[:12])
	}
	id := fmt.Sprintf("%s/%s@%d/%s", w.RunID, key, w.Attempt, hex.EncodeToString(nonce[:]))
	if len(id) > store.MaxSlotHolderID {
		sum := sha256.Sum256([]byte(id))
		id = hex.EncodeToString(sum[:])
	}
	return id
}

// limitsWarning says, when holders of resource name were taken under a limit other than this
// engine's (limit; 0 = not declared here), that the engines disagree and which limit wins: each
// engine takes units only while the total held is below its own limit, so the total never passes
// the largest, and an engine with a smaller one waits while the total is at or above it. "" when
// they agree.
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
	if len(other) == 0 {
		return ""
	}
	largest := limit
	var parts []string
	for _, l := range slices.Sorted(maps.Keys(other)) {
		largest = max(largest, l)
		parts = append(parts, fmt.Sprintf("%d on %s", l, strings.Join(other[l], ", ")))
	}
	here := "not declared here"
	if limit > 0 {
		here = fmt.Sprintf("%d here", limit)
	}
	return fmt.Sprintf("engines declare different limits for %s: %s, %s; each takes units only while the total held is below its own limit, "+
		"so the total never passes %d and the engines with a smaller limit wait longer: declare one limit everywhere", name, here, strings.Join(parts, "; "), largest)
}

// ordinal is n as "1st", "2nd", "3rd", "4th", … "11th", "21st".
func ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
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
	if e.cfg.ReadOnly && e.resGate != nil && e.resGate.probes != nil { // its probes do not run in the background
		e.resGate.probes.CheckPending(ctx)
	}
	if e.resGate != nil {
		snap = e.resGate.sched.Snapshot()
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
		ri.Probe = e.resGate.probeInfo(name)
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
