// Package resgate is an engine's exec.ResourceGate: the step attempts of the engine that ask for
// declared resources (licences, GPUs) wait in a resources.Scheduler (priority with aging, fair
// share, first come first served) on the engine's limits, lowered by probes; the units granted
// are taken in the store (store.ResourceSlots), which counts them across the engines of a shared
// database, and on PostgreSQL (store.ResourceQueue) the waiters of every engine form one queue in
// the database (shared.go). docs/guide/resources.md is the user's view.
package resgate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/exec"
	"github.com/dcc-flow/dcc-flow/engine/internal/metrics"
	"github.com/dcc-flow/dcc-flow/engine/internal/resources"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Config is what New builds a gate from.
type Config struct {
	// Limits are the declared resources' limits, by name; none: no gate.
	Limits map[string]int
	// Probes read the live counts of the resources that have one (a licence server's free
	// seats); Warn is told each change of a probe's state, once per change.
	Probes []resources.ProbeSpec
	Warn   func(resource string, st resources.ProbeStatus, message string)
	// Store takes the units granted (store.ResourceSlots, store.ResourceQueue), when it can.
	Store store.Store
	Clock clock.Clock
	// Waited is told, for each resource of an attempt that got its units, how long it waited.
	Waited func(resource string, d time.Duration)
}

// Polling of a shared store whose other engines hold the units this engine's head waiter
// needs: the first retry after slotPollMin, each next one twice as late, at most SlotPollMax.
const (
	slotPollMin = 50 * time.Millisecond
	SlotPollMax = 2 * time.Second
)

// Gate is the executor's exec.ResourceGate (an engine's): the waiters of this engine are ordered by
// a resources.Scheduler (priority, fair share by run tree, first come first served, aging) on
// the engine's declared limits, and the units granted are then taken in the store
// (store.ResourceSlots), which counts them across every engine of a shared database. On a
// shared database the head waiter whose units other engines hold keeps its place and asks the
// store again (slotPollMin to SlotPollMax); on a store of one engine the store always agrees.
type Gate struct {
	sched  *resources.Scheduler
	slots  store.ResourceSlots // nil: the scheduler's count only
	clock  clock.Clock
	limits map[string]int
	// waited is told, for each resource of an attempt that got its units, how long it waited
	// (the metrics' dccflow_resource_wait_seconds).
	waited func(resource string, d time.Duration)
	// probes read the live counts of the resources that have a probe; nil when none has.
	// Started with the engine's services (Prober).
	probes     *resources.Prober
	probeEvery map[string]time.Duration
	// waker hands the shared queue's wake-ups to the waiting attempts (shared.go).
	waker slotWaker

	// elsewhere counts, by resource, the attempts this engine's scheduler granted whose units
	// the store refused (other engines of a shared database hold them) and their units: they
	// wait (waiting_resources), so the metrics count them as waiting, not in use.
	mu        sync.Mutex
	elsewhere map[string][2]int // attempts, units
}

// New returns the gate of cfg.Limits, nil when there are none.
func New(cfg Config) *Gate {
	limits, c, st := cfg.Limits, cfg.Clock, cfg.Store
	if len(limits) == 0 {
		return nil
	}
	g := &Gate{sched: resources.New(c, limits, resources.Options{}), clock: c, limits: limits, waited: cfg.Waited}
	g.slots, _ = st.(store.ResourceSlots)
	if specs := cfg.Probes; len(specs) > 0 {
		g.probes = resources.NewProber(g.sched, specs, nil, cfg.Warn)
		g.probeEvery = map[string]time.Duration{}
		for _, sp := range specs {
			g.probeEvery[sp.Resource] = sp.Every
		}
	}
	return g
}

// Acquire implements exec.ResourceGate.
func (g *Gate) Acquire(ctx context.Context, w exec.ResourceWait) (release func(), err error) {
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
			w.Waiting(wt, WaitMessage(what, wt))
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
	for delay, told := slotPollMin, false; ; delay = min(2*delay, SlotPollMax) {
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
			w.Waiting(wt, WaitMessage(what, wt))
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
func (g *Gate) waitElsewhere(amounts map[string]int, sign int) {
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

// WaitMessage is the progress message of a step waiting for amounts (what, DescribeAmounts):
// "waiting for houdini ×1: 2nd of 3 in this engine's queue", or, first in this engine's queue
// while other engines hold the units, "waiting for houdini ×1: first in this engine's queue;
// other engines hold the units", or, in the one queue of a PostgreSQL database's engines
// (AllEngines), "waiting for houdini ×1: 3rd in the database's queue (all engines)".
func WaitMessage(what string, w run.StepWaiting) string {
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
func (g *Gate) queued(amounts map[string]int) int {
	n := 0
	for _, r := range g.sched.Snapshot().Resources {
		if _, ok := amounts[r.Name]; ok {
			n = max(n, len(r.Queue))
		}
	}
	return n
}

// Places returns the place of each waiter of this engine's queue, by label ("RUN/STEP_KEY"),
// as run.StepWaiting's Place and Of (of each resource it asks for, the worst place and the
// longest queue), read now.
func (g *Gate) Places() map[string][2]int {
	out := map[string][2]int{}
	for _, r := range g.sched.Snapshot().Resources {
		for _, q := range r.Queue {
			p := out[q.Label]
			out[q.Label] = [2]int{max(p[0], q.Position), max(p[1], len(r.Queue))}
		}
	}
	return out
}

// Gauges is the state of each declared resource in this engine, for the metrics: its limit,
// the units its step attempts hold and how many wait (its steps that are waiting_resources: in
// its queue, or first there while other engines hold the units).
func (g *Gate) Gauges() []metrics.ResourceGauge {
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

// Prober is the gate's probes, a service the engine starts and stops with its others; nil
// when no resource has a probe, or g is nil (no resource declared).
func (g *Gate) Prober() *resources.Prober {
	if g == nil {
		return nil
	}
	return g.probes
}

// Snapshot is the state of the gate's scheduler now: each resource's limit, units in use and
// this engine's queue.
func (g *Gate) Snapshot() resources.State { return g.sched.Snapshot() }

// Probe is the state of resource name's probe and its period; false when it has none.
func (g *Gate) Probe(name string) (resources.ProbeStatus, time.Duration, bool) {
	if g == nil || g.probes == nil {
		return resources.ProbeStatus{}, 0, false
	}
	st, ok := g.probes.Status(name)
	return st, g.probeEvery[name], ok
}
