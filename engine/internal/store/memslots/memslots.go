// Package memslots holds the slots of scarce resources in memory (store.ResourceSlots), for the
// memory store (one engine: every holder live) and memcluster (engines sharing it: a holder is
// live while its engine is, as the caller says).
package memslots

import (
	"maps"
	"time"

	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// Table is the slots of one database. The zero value is not usable; use New. Safe for
// concurrent use.
type Table struct {
	mu      sync.Mutex
	holders map[string]*holder            // by holder id
	byRes   map[string]map[string]*holder // resource → holder id → holder
}

type holder struct {
	id, engine, runID, label string
	amounts, limits          map[string]int
	at                       time.Time
}

// New returns an empty table.
func New() *Table {
	return &Table{holders: map[string]*holder{}, byRes: map[string]map[string]*holder{}}
}

// Acquire is store.ResourceSlots.AcquireSlots for engine ("" on a store of one engine) at now:
// live reports whether an engine's holders count (nil: all do); those of dead engines among the
// holders of the resources asked for are deleted first. r must have passed r.Check.
func (t *Table) Acquire(r store.SlotRequest, engine string, now time.Time, live func(engine string) bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.holders[r.ID]; ok {
		return true
	}
	for name := range r.Amounts {
		used := 0
		for id, h := range t.byRes[name] {
			if live != nil && !live(h.engine) {
				t.deleteLocked(id)
				continue
			}
			used += h.amounts[name]
		}
		if used+r.Amounts[name] > r.Limits[name] {
			return false
		}
	}
	h := &holder{id: r.ID, engine: engine, runID: store.CutSlotText(r.RunID), label: store.CutSlotText(r.Label),
		amounts: maps.Clone(r.Amounts), limits: maps.Clone(r.Limits), at: now}
	t.holders[r.ID] = h
	for name := range r.Amounts {
		if t.byRes[name] == nil {
			t.byRes[name] = map[string]*holder{}
		}
		t.byRes[name][r.ID] = h
	}
	return true
}

// Release is store.ResourceSlots.ReleaseSlots for engine: only a holder of that engine goes.
func (t *Table) Release(id, engine string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.holders[id]
	if !ok || h.engine != engine {
		return false
	}
	t.deleteLocked(id)
	return true
}

func (t *Table) deleteLocked(id string) {
	h := t.holders[id]
	if h == nil {
		return
	}
	delete(t.holders, id)
	for name := range h.amounts {
		delete(t.byRes[name], id)
		if len(t.byRes[name]) == 0 {
			delete(t.byRes, name)
		}
	}
}

// Slots is store.ResourceSlots.Slots: the holders whose engine is live (nil: all).
func (t *Table) Slots(live func(engine string) bool) []store.Slot {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []store.Slot
	for _, h := range t.holders {
		if live != nil && !live(h.engine) {
			continue
		}
		for name, n := range h.amounts {
			out = append(out, store.Slot{Resource: name, Holder: h.id, Amount: n, Limit: h.limits[name], Engine: h.engine, RunID: h.runID,
				Label: h.label, AcquiredAt: h.at})
		}
	}
	store.SortSlots(out)
	return out
}
