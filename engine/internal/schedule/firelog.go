package schedule

import (
	"context"
	"sort"
	"sync"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

// The fire history's vocabulary is the store's (store.FireLog is a store feature), named here
// for the scheduler's callers.
type (
	// FireKind says what happened when a schedule was due or a webhook was accepted.
	FireKind = store.FireKind
	// Fire is one entry of a schedule's fire history.
	Fire = store.Fire
	// FireLog keeps the fire history.
	FireLog = store.FireLog
	// DeliveryFinder is an optional FireLog method (see store.DeliveryFinder).
	DeliveryFinder = store.DeliveryFinder
	// ReplayFinder is an optional FireLog method (see store.ReplayFinder).
	ReplayFinder = store.ReplayFinder
)

// Fire kinds.
const (
	FireFired   = store.FireFired   // a run was started
	FireSkipped = store.FireSkipped // no run: max_concurrent runs were active
	FireFailed  = store.FireFailed  // no run: the engine could not start it
)

// Fire reasons (Fire.Reason). They are stable codes.
const (
	ReasonCatchup       = "catchup"        // fired: a catch-up fire at start
	ReasonMaxConcurrent = "max_concurrent" // skipped
	ReasonStartFailed   = "start_failed"   // failed: Starter.Start returned an error
	ReasonStatusFailed  = "status_failed"  // failed: counting the active runs (or, WithAdmitter, taking the shared admission lock or looking a timestamped signature or a delivery id up in the shared history) failed
)

// DefaultFireLogSize is the number of fires a MemFireLog keeps per schedule by default.
const DefaultFireLogSize = 1000

// MemFireLog is an in-memory FireLog that keeps the newest fires of each schedule.
type MemFireLog struct {
	size int

	mu        sync.Mutex
	seq       uint64
	schedules map[string]*memFires
}

type memFires struct {
	ring       []memFire // circular, oldest at head once full
	head       int
	deliveries map[string]memFire // delivery id → latest fired entry still in ring
}

type memFire struct {
	seq  uint64
	fire Fire
}

var (
	_ FireLog        = (*MemFireLog)(nil)
	_ DeliveryFinder = (*MemFireLog)(nil)
)

// NewMemFireLog returns a MemFireLog keeping the newest size fires per schedule; size ≤ 0
// means DefaultFireLogSize.
func NewMemFireLog(size int) *MemFireLog {
	if size <= 0 {
		size = DefaultFireLogSize
	}
	return &MemFireLog{size: size, schedules: map[string]*memFires{}}
}

// RecordFire appends f, dropping the schedule's oldest fire when full.
func (l *MemFireLog) RecordFire(_ context.Context, f Fire) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seq++
	m := l.schedules[f.ScheduleID]
	if m == nil {
		m = &memFires{deliveries: map[string]memFire{}}
		l.schedules[f.ScheduleID] = m
	}
	e := memFire{seq: l.seq, fire: f}
	if len(m.ring) < l.size {
		m.ring = append(m.ring, e)
	} else {
		old := m.ring[m.head]
		if d := old.fire.DeliveryID; d != "" && m.deliveries[d].seq == old.seq {
			delete(m.deliveries, d)
		}
		m.ring[m.head] = e
		m.head = (m.head + 1) % len(m.ring)
	}
	if f.DeliveryID != "" && f.Kind == FireFired {
		m.deliveries[f.DeliveryID] = e
	}
	return nil
}

// LastFire returns the most recently recorded fire of scheduleID.
func (l *MemFireLog) LastFire(_ context.Context, scheduleID string) (Fire, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.schedules[scheduleID]
	if m == nil || len(m.ring) == 0 {
		return Fire{}, false, nil
	}
	i := len(m.ring) - 1
	if len(m.ring) == l.size {
		i = (m.head + l.size - 1) % l.size
	}
	return m.ring[i].fire, true, nil
}

// Fires returns up to limit fires, newest first (see FireLog).
func (l *MemFireLog) Fires(_ context.Context, scheduleID string, limit int) ([]Fire, error) {
	l.mu.Lock()
	var all []memFire
	for id, m := range l.schedules {
		if scheduleID == "" || id == scheduleID {
			all = append(all, m.ring...)
		}
	}
	l.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].seq > all[j].seq })
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	out := make([]Fire, len(all))
	for i, e := range all {
		out[i] = e.fire
	}
	return out, nil
}

// FireByDelivery returns the latest fired entry of scheduleID with deliveryID still kept.
func (l *MemFireLog) FireByDelivery(_ context.Context, scheduleID, deliveryID string) (Fire, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m := l.schedules[scheduleID]; m != nil {
		if e, ok := m.deliveries[deliveryID]; ok {
			return e.fire, true, nil
		}
	}
	return Fire{}, false, nil
}
