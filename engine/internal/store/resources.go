package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"
)

// ResourceSlots is the feature of a store that holds the slots of scarce resources (licences,
// GPUs; docs/guide/resources.md): units of a named resource taken by a holder (one attempt of
// a step) and given back when its tool returns, all or none of a request in one atomic step,
// never more of a resource at once than the limit the taker passes. It is the count that every
// engine on the database obeys; who of the waiting steps asks first is the engine's rule
// (engine/internal/resources).
//
// On a store that engines share (a Leaser: PostgreSQL, memcluster) slots are held under the
// engine's lease, on the database's clock: a holder is live while its engine's heartbeat is
// younger than the engine's lease, that end included (heartbeat + lease ≥ now). The slots of an
// engine past that (killed, stopped, cut off) no longer count, and the next AcquireSlots of one
// of their resources deletes them, so that they never count again, even when that engine beats
// again later. AcquireSlots needs the store attached (Leaser.Attach) and fails with
// ErrLeaseLost, taking nothing, when the engine's own heartbeat is past its lease: an engine
// that lost its lease cannot take a slot. ReleaseSlots works for the engine's own holders
// whatever its lease (giving units back never breaks a limit).
//
// On a store of one engine (SQLite, memstore) every holder is live until released, across every
// run of the engine; SQLite forgets the slots of an earlier process that owned the file (it
// died, or closed without releasing) at its first AcquireSlots.
//
// storetest.ExerciseResources is the suite (with a clock the test moves for a shared store: no
// sleeps).
type ResourceSlots interface {
	// AcquireSlots takes r.Amounts for holder r.ID, all or none, and reports whether it did:
	// false, with nothing taken and no error, when a resource has fewer free units than asked
	// (free: r.Limits[name] minus the units live holders hold, on every engine). A holder id
	// that holds slots already returns true and changes nothing (a try sent again after a lost
	// connection). An empty r.ID, an amount below 1, or a resource of Amounts without a limit
	// ≥ 1 in Limits is an error, and so is an amount above its limit.
	AcquireSlots(ctx context.Context, r SlotRequest) (bool, error)
	// ReleaseSlots gives back every unit holder id holds and reports whether it held any: false
	// when it was released already, never acquired, or its slots were taken over after its
	// engine's lease ended (a shared store). On a shared store only the attached engine's own
	// holders are released.
	ReleaseSlots(ctx context.Context, id string) (bool, error)
	// Slots returns what live holders hold: one Slot per holder and resource, by resource name,
	// then acquisition time, then holder id. It works on any store (attached or not, read-only).
	Slots(ctx context.Context) ([]Slot, error)
}

// SlotRequest asks for units of resources for one holder.
type SlotRequest struct {
	// ID names the holder, unique among live holders (the engine makes it: run, step instance,
	// attempt); at most 200 bytes.
	ID string
	// Amounts are the units taken, by resource name: each 1 to its limit.
	Amounts map[string]int
	// Limits are the taker's limits of the resources of Amounts (engine.Config.Resources): the
	// units of a resource held at once, this request's included, never pass the taker's limit.
	// When engines declare different limits for one name, each takes only while the total is
	// below its own: the total never passes the largest, and an engine with a smaller limit
	// takes nothing while the total is at or above it.
	Limits map[string]int
	// RunID is the run the holder works for ("" allowed), and Label says who holds, for
	// listings ("per_file[3].export"); at most 1,000 bytes each, longer ones cut.
	RunID, Label string
}

// Slot is the units of one resource one holder holds.
type Slot struct {
	Resource string
	Holder   string // SlotRequest.ID
	Amount   int
	// Limit is the limit the taker passed (SlotRequest.Limits): engines that declare different
	// limits for one name show here.
	Limit int
	// Engine is the id of the engine that holds it on a shared store, "" on a store of one engine.
	Engine     string
	RunID      string
	Label      string
	AcquiredAt time.Time // the database's time (a shared store) or the engine's
}

// MaxSlotHolderID and MaxSlotText bound a SlotRequest's ID and its RunID and Label.
const (
	MaxSlotHolderID = 200
	MaxSlotText     = 1000
)

// Check returns the error AcquireSlots gives r without touching the database: an empty or too
// long ID, an amount below 1, a resource without a limit ≥ 1, an amount above its limit. nil
// when r may be tried.
func (r SlotRequest) Check() error {
	switch {
	case r.ID == "":
		return errors.New("store: a slot request needs a holder id")
	case len(r.ID) > MaxSlotHolderID:
		return fmt.Errorf("store: slot holder id of %d bytes; at most %d", len(r.ID), MaxSlotHolderID)
	}
	for _, name := range slices.Sorted(maps.Keys(r.Amounts)) {
		n, limit := r.Amounts[name], r.Limits[name]
		switch {
		case name == "":
			return errors.New("store: a slot request names an empty resource")
		case limit < 1:
			return fmt.Errorf("store: resource %q has no limit ≥ 1 in the slot request (got %d)", name, limit)
		case n < 1 || n > limit:
			return fmt.Errorf("store: resource %q: asks for %d; must be 1 to its limit %d", name, n, limit)
		}
	}
	return nil
}

// CutSlotText returns s cut to MaxSlotText bytes (at a rune boundary).
func CutSlotText(s string) string {
	if len(s) <= MaxSlotText {
		return s
	}
	i := MaxSlotText
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// SortSlots sorts slots as ResourceSlots.Slots returns them: by resource, acquisition time,
// holder.
func SortSlots(slots []Slot) {
	slices.SortFunc(slots, func(a, b Slot) int {
		return cmp.Or(cmp.Compare(a.Resource, b.Resource), a.AcquiredAt.Compare(b.AcquiredAt), cmp.Compare(a.Holder, b.Holder))
	})
}
