package store

import (
	"context"
	"time"
)

// ResourceQueue is the feature of a store that engines share (PostgreSQL) whose waiters of
// scarce resources form one queue across every engine of the database (docs/guide/resources.md,
// "Who goes first"): the order of engine/internal/resources — priority with aging, then
// round-robin across fair-share keys (the turn of each key kept in the database), then first
// come, first served — holds across engines, and a waiter that does not fit holds back the
// resources it asks for on every engine. A waiter's row counts while its engine's lease is live,
// like its slots. A store of one engine has no such feature: its engine's own queue is the
// whole queue.
type ResourceQueue interface {
	ResourceSlots
	// AcquireQueued takes r's units when r is served now in the queue's order, and reports
	// whether r holds them (true at once when r.ID holds already, a try sent again). Else it
	// registers r as a waiter (or keeps it registered: its priority, key and arrival are those of
	// its first call; its caps are updated) and returns false with r's place among the waiters
	// of its resources (1 = next), or 0 when q.Again and every unit of its resources is held:
	// then nothing was served and its place was not read (ordering the queue costs a few ms per
	// thousand waiters). Errors and ErrLeaseLost as AcquireSlots'.
	AcquireQueued(ctx context.Context, r SlotRequest, q QueueEntry) (held bool, place int, err error)
	// LeaveQueue removes waiter id (a cancelled wait), giving back the units it was granted
	// meanwhile, and reports whether it held any. The units it held or waited for go to the
	// waiters now first.
	LeaveQueue(ctx context.Context, id string) (bool, error)
	// ListenSlots calls fn with the holder id of each waiter granted by another holder's
	// release or acquire (its engine need not ask again: Granted), or that should ask again,
	// until ctx ends; it returns ctx's error or the connection's. It calls ready once it
	// listens: notifications sent before are not seen (a waiter asks again once it is ready,
	// and now and then as well).
	ListenSlots(ctx context.Context, ready func(), fn func(SlotWake)) error
	// Waiters lists the waiters of every live engine in the order they are served (the first
	// is served next), on the database's clock (aging); none is an empty list.
	Waiters(ctx context.Context) ([]Waiter, error)
}

// Waiter is one waiter of the shared queue (ResourceQueue.Waiters).
type Waiter struct {
	Holder, Engine string
	// RunID and Label name the waiting attempt (SlotRequest's).
	RunID, Label string
	// Amounts are what it asks for, by resource.
	Amounts map[string]int
	// Priority is its own; Effective with what it gained by waiting (aging).
	Priority, Effective int
	Key                 string // its fair-share key
	Since               time.Time
}

// QueueEntry is where a waiter goes in the shared queue.
type QueueEntry struct {
	// Priority is the waiter's own (higher first); Key its fair-share key.
	Priority int
	Key      string
	// AgingEvery is how long a waiter waits per priority point it gains (≤ 0: no aging); the
	// engines of one database should agree (resources.DefaultAgingEvery).
	AgingEvery time.Duration
	// Caps are this engine's caps on its own holders of the resources asked for (a probe's
	// effective limit, docs/guide/resources.md "Live counts"): a resource absent, or capped at
	// its limit or above, is not capped. A waiter over its cap is passed over without holding
	// back the waiters after it.
	Caps map[string]int
	// Again says the waiter asked before (it may be registered): the ask of a waiter while
	// every unit is held then returns at once (place 0), taking no lock. A first ask leaves it
	// false (one query less).
	Again bool
}

// SlotWake is a notification of the shared queue.
type SlotWake struct {
	Holder string
	// Granted: the holder holds its units now. Else it should ask again (AcquireQueued).
	Granted bool
}
