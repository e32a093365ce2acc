package resources

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
)

// DefaultAgingEvery is Options.AgingEvery when it is 0: a waiter gains one priority point per
// 10 s waited, so a step of priority 0 that has waited 1,000 s (about 17 minutes) goes before
// new steps of priority 100.
const DefaultAgingEvery = 10 * time.Second

// Options configure a Scheduler.
type Options struct {
	// AgingEvery is how long a waiter waits per priority point it gains: 0 means
	// DefaultAgingEvery; negative disables aging.
	AgingEvery time.Duration
}

// Request asks for units of resources.
type Request struct {
	// Amounts are the units asked for, by resource name: each ≥ 1 and at most the resource's
	// limit, every name declared (Acquire refuses others at once). Empty = nothing to wait for.
	Amounts map[string]int
	// Priority is the request's own priority: higher first.
	Priority int
	// Key is the fair-share key: waiters of one priority are served round-robin across keys.
	Key string
	// Label says who asks, for listings ("r01…/cook"); "" is allowed.
	Label string
	// OnWait, when set, is called once when the request is not granted at once, with its place
	// among the waiters of the resources it asks for (1 = served next, of each resource the
	// worst) and the number of waiters; from Acquire's goroutine, with no lock held.
	OnWait func(place, waiting int)
}

// Scheduler grants units of resources to requests in the package's order. It is safe for
// concurrent use; a zero Scheduler is not usable: use New.
type Scheduler struct {
	clock clock.Clock
	aging time.Duration

	mu     sync.Mutex
	limits map[string]int
	// declared are the limits New was given: Acquire checks amounts against them, not against a
	// limit a probe lowered (SetLimit, ApplyFree), so that a step is made to wait, not refused,
	// while the licence server says few are free.
	declared   map[string]int
	inUse      map[string]int
	waiting    map[uint64]*waiter // by Seq
	holders    map[uint64]*Grant  // by Seq
	lastServed map[string]uint64  // fair-share key → served counter at its last grant
	served     uint64
	seq        uint64
}

// waiter is a Waiter and the channel its Acquire waits on (closed with grant set).
type waiter struct {
	Waiter
	ready chan struct{}
	grant *Grant
	// tracked: a waiter of Track, served elsewhere (a queue shared across engines): listed,
	// never granted by the scheduler.
	tracked bool
}

// Grant is the units a request holds. Release gives them back.
type Grant struct {
	s *Scheduler
	// Waiter is the request as it waited (Since is when it asked).
	Waiter Waiter
	// At is when the units were granted; At − Waiter.Since is the wait.
	At       time.Time
	released bool
}

// New returns a scheduler of the resources in limits (name → units, each ≥ 1) on clock c.
func New(c clock.Clock, limits map[string]int, opts Options) *Scheduler {
	aging := opts.AgingEvery
	if aging == 0 {
		aging = DefaultAgingEvery
	}
	s := &Scheduler{clock: c, aging: aging, limits: map[string]int{}, inUse: map[string]int{},
		waiting: map[uint64]*waiter{}, holders: map[uint64]*Grant{}, lastServed: map[string]uint64{}}
	s.declared = map[string]int{}
	for name, n := range limits {
		s.limits[name] = n
		s.declared[name] = n
	}
	return s
}

// Acquire waits until the units of req are granted, then returns them: at once when they fit
// and nobody that goes first waits for them. When ctx ends first, the request leaves the queue
// (its place freed, the waiters behind it reconsidered) and Acquire returns context.Cause(ctx).
// A name that is not declared, or an amount below 1 or above its limit, is an error at once
// (it could never be granted).
func (s *Scheduler) Acquire(ctx context.Context, req Request) (*Grant, error) {
	s.mu.Lock()
	for _, name := range slices.Sorted(maps.Keys(req.Amounts)) {
		n := req.Amounts[name]
		limit, ok := s.declared[name]
		if !ok {
			limit, ok = s.limits[name]
		}
		switch {
		case !ok:
			s.mu.Unlock()
			return nil, fmt.Errorf("resource %q is not declared", name)
		case n < 1 || n > limit:
			s.mu.Unlock()
			return nil, fmt.Errorf("resource %q: asks for %d; must be 1 to its limit %d", name, n, limit)
		}
	}
	s.seq++
	w := &waiter{Waiter: Waiter{Amounts: maps.Clone(req.Amounts), Priority: req.Priority, Key: req.Key,
		Since: s.clock.Now(), Seq: s.seq, Label: req.Label}, ready: make(chan struct{})}
	if w.Amounts == nil {
		w.Amounts = map[string]int{}
	}
	s.waiting[w.Seq] = w
	s.dispatchLocked()
	place, n := 0, 0
	if w.grant == nil && req.OnWait != nil {
		place, n = s.placeLocked(&w.Waiter)
	}
	s.mu.Unlock()
	if place > 0 {
		req.OnWait(place, n)
	}

	select {
	case <-w.ready:
		return w.grant, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if w.grant != nil { // granted while ctx ended: give the units back
		g := w.grant
		s.mu.Unlock()
		g.Release()
		return nil, context.Cause(ctx)
	}
	delete(s.waiting, w.Seq)
	s.dispatchLocked()
	s.mu.Unlock()
	return nil, context.Cause(ctx)
}

// Release gives the units back and grants the waiters they now let through. Releasing twice is
// a no-op.
func (g *Grant) Release() {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.released {
		return
	}
	g.released = true
	for name, n := range g.Waiter.Amounts {
		s.inUse[name] -= n
	}
	delete(s.holders, g.Waiter.Seq)
	s.dispatchLocked()
}

// SetLimit changes the limit of a declared or new resource (n ≥ 0; 0 lets nothing through):
// units held beyond a lowered limit stay held until released. Waiters that now fit are granted.
// Acquire still checks amounts against the limit New declared: a request above a lowered
// limit waits for it to rise.
func (s *Scheduler) SetLimit(name string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits[name] = max(n, 0)
	s.dispatchLocked()
}

// dispatchLocked grants every waiter that Pick lets through now.
func (s *Scheduler) dispatchLocked() {
	if len(s.waiting) == 0 {
		return
	}
	now := s.clock.Now()
	free := make(map[string]int, len(s.limits))
	for name, limit := range s.limits {
		free[name] = max(limit-s.inUse[name], 0)
	}
	for _, w := range Pick(Order(s.waitersLocked(false), now, s.aging, s.lastServed), free) {
		ww := s.waiting[w.Seq]
		delete(s.waiting, w.Seq)
		for name, n := range w.Amounts {
			s.inUse[name] += n
		}
		s.served++
		s.lastServed[w.Key] = s.served
		ww.grant = &Grant{s: s, Waiter: ww.Waiter, At: now}
		s.holders[w.Seq] = ww.grant
		close(ww.ready)
	}
	s.pruneKeysLocked()
}

// pruneKeysLocked forgets the last service of keys with no waiter, so that the map stays as
// small as the queue; such a key, back later, counts as never served.
func (s *Scheduler) pruneKeysLocked() {
	if len(s.lastServed) <= 2*len(s.waiting)+16 {
		return
	}
	keep := map[string]bool{}
	for _, w := range s.waiting {
		keep[w.Key] = true
	}
	for k := range s.lastServed {
		if !keep[k] {
			delete(s.lastServed, k)
		}
	}
}

// placeLocked returns the place of w among the waiters of each resource it asks for, the
// worst of them (1-based), and the number of those waiters.
func (s *Scheduler) placeLocked(w *Waiter) (place, n int) {
	seen := map[string]int{}
	for _, o := range Order(s.waitersLocked(true), s.clock.Now(), s.aging, s.lastServed) {
		for name := range o.Amounts {
			if _, mine := w.Amounts[name]; mine {
				seen[name]++
			}
		}
		if o.Seq == w.Seq {
			for name := range w.Amounts {
				place = max(place, seen[name])
			}
		}
	}
	for name := range w.Amounts {
		n = max(n, seen[name])
	}
	return place, n
}

// waitersLocked returns the waiters, those of Track too when tracked.
func (s *Scheduler) waitersLocked(tracked bool) []*Waiter {
	out := make([]*Waiter, 0, len(s.waiting))
	for _, w := range s.waiting {
		if tracked || !w.tracked {
			out = append(out, &w.Waiter)
		}
	}
	return out
}

// State is what a Scheduler holds at one time, for listings (`dcc-flow resources`).
type State struct {
	// Resources are every declared resource, by name.
	Resources []ResourceState
}

// ResourceState is one resource: its limit, the units in use, who holds them and who waits.
type ResourceState struct {
	Name  string
	Limit int
	InUse int
	// Holders hold units, in the order they were granted.
	Holders []Holder
	// Queue waits for units, in the order they will be served (Position 1 first).
	Queue []Queued
}

// Holder is a request that holds units of one resource.
type Holder struct {
	Label  string
	Amount int
	Since  time.Time // when granted
}

// Queued is a request waiting for units of one resource.
type Queued struct {
	Label string
	// Amount is what it asks of this resource.
	Amount int
	// Position is its place among the waiters of this resource: 1 is served next.
	Position int
	// Priority is its own priority; Effective adds what it gained by waiting (aging).
	Priority, Effective int
	Key                 string
	Since               time.Time
}

// Snapshot returns the state of every resource now.
func (s *Scheduler) Snapshot() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	byName := map[string]*ResourceState{}
	var st State
	for _, name := range slices.Sorted(maps.Keys(s.limits)) {
		st.Resources = append(st.Resources, ResourceState{Name: name, Limit: s.limits[name], InUse: s.inUse[name]})
	}
	for i := range st.Resources {
		byName[st.Resources[i].Name] = &st.Resources[i]
	}
	grants := slices.Collect(maps.Values(s.holders))
	slices.SortFunc(grants, func(a, b *Grant) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Waiter.Seq, b.Waiter.Seq)) })
	for _, g := range grants {
		for name, n := range g.Waiter.Amounts {
			if r := byName[name]; r != nil {
				r.Holders = append(r.Holders, Holder{Label: g.Waiter.Label, Amount: n, Since: g.At})
			}
		}
	}
	for _, w := range Order(s.waitersLocked(true), now, s.aging, s.lastServed) {
		for name, n := range w.Amounts {
			if r := byName[name]; r != nil {
				r.Queue = append(r.Queue, Queued{Label: w.Label, Amount: n, Position: len(r.Queue) + 1,
					Priority: w.Priority, Effective: w.Effective(now, s.aging), Key: w.Key, Since: w.Since})
			}
		}
	}
	return st
}

// Ticket is a request that Track lists as waiting while another queue serves it.
type Ticket struct {
	s *Scheduler
	w *waiter
}

// Track lists req as waiting (Snapshot, its place) without ever granting it: the caller waits
// in a queue kept elsewhere (the database's, shared across engines) and then calls Hold when
// that queue granted the units, or Leave. Amounts are not checked against the limits. req.OnWait
// is not called.
func (s *Scheduler) Track(req Request) *Ticket {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	w := &waiter{Waiter: Waiter{Amounts: maps.Clone(req.Amounts), Priority: req.Priority, Key: req.Key,
		Since: s.clock.Now(), Seq: s.seq, Label: req.Label}, tracked: true}
	if w.Amounts == nil {
		w.Amounts = map[string]int{}
	}
	s.waiting[w.Seq] = w
	return &Ticket{s: s, w: w}
}

// Hold moves the ticket's request from the waiters to the holders (its units counted in use,
// whatever the limits) and returns its grant; Release gives them back. Once only, and not
// after Leave.
func (t *Ticket) Hold() *Grant {
	s := t.s
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.waiting, t.w.Seq)
	for name, n := range t.w.Amounts {
		s.inUse[name] += n
	}
	s.served++
	s.lastServed[t.w.Key] = s.served
	g := &Grant{s: s, Waiter: t.w.Waiter, At: s.clock.Now()}
	s.holders[t.w.Seq] = g
	return g
}

// Leave takes the ticket's request off the waiters (a cancelled wait). Leaving twice is a no-op.
func (t *Ticket) Leave() {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	delete(t.s.waiting, t.w.Seq)
}

// Place returns the ticket's place among this scheduler's waiters of the resources it asks for
// (1-based, of each resource the worst) and the number of those waiters.
func (t *Ticket) Place() (place, n int) {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	return t.s.placeLocked(&t.w.Waiter)
}

// Limit returns the limit the scheduler applies to resource name now (lowered by a probe:
// SetLimit), and whether it knows the name.
func (s *Scheduler) Limit(name string) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.limits[name]
	return n, ok
}
