// Package resources is the scheduling rule of scarce resources (licences, GPUs;
// docs/guide/resources.md): who, of the steps waiting for units of a resource, goes first. It
// knows nothing of runs, stores or the executor. A Scheduler keeps the units of each resource,
// its holders and its queue of waiters in memory, on an injected clock.Clock; Order is the rule
// alone, for a queue kept elsewhere.
//
// The rule, in this order:
//
//  1. priority: a higher effective priority first; the effective priority is the waiter's own
//     plus one point per Options.AgingEvery waited (aging), so that nothing starves;
//  2. fair share: among waiters of one effective priority, round-robin across fair-share keys
//     (the n-th waiter of each key goes before the (n+1)-th of any key; at the same rank, the
//     key served longest ago first);
//  3. first come, first served within one key.
//
// Waiters are then granted in that order while their amounts fit. A waiter whose amounts do not
// fit holds back the resources it asks for: no later waiter takes units of those resources before
// it (so a request for 2 GPUs is not starved by a stream of requests for 1), while waiters for
// other resources go on.
package resources

import (
	"cmp"
	"slices"
	"time"
)

// Waiter is one request waiting in a queue.
type Waiter struct {
	// Amounts are the units asked for, by resource name (each ≥ 1).
	Amounts map[string]int
	// Priority is the request's own priority (spec.MinPriority to spec.MaxPriority; higher first).
	Priority int
	// Key is the fair-share key ("" is a key like any other).
	Key string
	// Since is when the request started to wait (on the scheduler's clock).
	Since time.Time
	// Seq orders requests that arrived at the same time: lower first. Unique in one queue.
	Seq uint64
	// Label says who waits, for listings ("run r01…/cook").
	Label string
}

// Effective returns the priority of w at now: its own plus one point per every waited (aging),
// every ≤ 0 meaning no aging. It saturates instead of overflowing.
func (w *Waiter) Effective(now time.Time, every time.Duration) int {
	if every <= 0 {
		return w.Priority
	}
	waited := now.Sub(w.Since)
	if waited <= 0 {
		return w.Priority
	}
	points := int64(waited / every)
	const ceiling = 1 << 40
	return int(min(int64(w.Priority)+points, ceiling))
}

// Order returns the waiters in the order they are served at now (the package's rule), without
// changing ws. lastServed maps a fair-share key to a number that grows each time a waiter of
// the key is granted (absent = never served); at the same round-robin rank, the key with the
// smaller number goes first, then the waiter that arrived first (Seq).
func Order(ws []*Waiter, now time.Time, agingEvery time.Duration, lastServed map[string]uint64) []*Waiter {
	type entry struct {
		w    *Waiter
		eff  int
		rank int
	}
	es := make([]entry, len(ws))
	for i, w := range ws {
		es[i] = entry{w: w, eff: w.Effective(now, agingEvery)}
	}
	// Rank: the waiter's place among the waiters of its key and effective priority, by arrival.
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(a.w.Seq, b.w.Seq) })
	type level struct {
		eff int
		key string
	}
	seen := map[level]int{}
	for i := range es {
		l := level{es[i].eff, es[i].w.Key}
		es[i].rank = seen[l]
		seen[l]++
	}
	slices.SortStableFunc(es, func(a, b entry) int {
		if c := cmp.Compare(b.eff, a.eff); c != 0 {
			return c
		}
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		la, oka := lastServed[a.w.Key]
		lb, okb := lastServed[b.w.Key]
		switch {
		case oka != okb: // never served goes first
			if !oka {
				return -1
			}
			return 1
		case la != lb:
			return cmp.Compare(la, lb)
		}
		return cmp.Compare(a.w.Seq, b.w.Seq)
	})
	out := make([]*Waiter, len(es))
	for i, e := range es {
		out[i] = e.w
	}
	return out
}

// Pick returns, of the waiters in served order (Order), those granted now given the free units
// of each resource (free is not changed): each in turn while its amounts fit; a waiter that does
// not fit holds back every resource it asks for from the waiters after it. A resource absent
// from free has no free unit.
func Pick(ordered []*Waiter, free map[string]int) []*Waiter {
	left := make(map[string]int, len(free))
	for k, v := range free {
		left[k] = v
	}
	blocked := map[string]bool{}
	var out []*Waiter
	for _, w := range ordered {
		fits := true
		for name, n := range w.Amounts {
			if blocked[name] || left[name] < n {
				fits = false
				break
			}
		}
		if !fits {
			for name := range w.Amounts {
				blocked[name] = true
			}
			continue
		}
		for name, n := range w.Amounts {
			left[name] -= n
		}
		out = append(out, w)
	}
	return out
}
