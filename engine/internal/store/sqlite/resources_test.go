package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlite"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/storetest"
)

func TestExerciseResources(t *testing.T) {
	storetest.ExerciseResources(t, func(t *testing.T) storetest.ResourceStore { return openTemp(t) })
}

// A process that reads the file (a read-only store: `dcc-flow resources` beside a serve) lists
// the owner's holders from the table the owner mirrors them to; a new owner of the file counts
// none of the slots an earlier one left (they were in its memory) and drops them from the table
// at its first change. A read-only store cannot take a slot.
func TestSlotsMirroredForReaders(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	owner, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := owner.AcquireSlots(ctx, store.SlotRequest{ID: "h1", Amounts: map[string]int{"houdini": 2}, Limits: map[string]int{"houdini": 2}, RunID: "r1", Label: "cook"}); err != nil || !ok {
		t.Fatalf("AcquireSlots = %v, %v", ok, err)
	}
	reader, err := sqlite.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := reader.AcquireSlots(ctx, store.SlotRequest{ID: "x", Amounts: map[string]int{"houdini": 1}, Limits: map[string]int{"houdini": 2}}); err == nil {
		t.Fatal("a read-only store took a slot")
	}
	waitSlots := func(holder string) []store.Slot {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			slots, err := reader.Slots(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(slots) == 1 && slots[0].Holder == holder {
				return slots
			}
			if time.Now().After(deadline) {
				t.Fatalf("the reader lists %+v after 10 s, want the slot of %s only", slots, holder)
			}
			time.Sleep(time.Millisecond) // polling the owner's background write, not an assertion
		}
	}
	slots := waitSlots("h1")
	if sl := slots[0]; sl.Holder != "h1" || sl.Resource != "houdini" || sl.Amount != 2 || sl.RunID != "r1" || sl.Label != "cook" || sl.AcquiredAt.IsZero() {
		t.Fatalf("slot %+v", sl)
	}
	// The owner goes without releasing (a crash leaves the same table).
	if err := owner.Close(); err != nil {
		t.Fatal(err)
	}
	reader.Close()
	next, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if ok, err := next.AcquireSlots(ctx, store.SlotRequest{ID: "h2", Amounts: map[string]int{"houdini": 2}, Limits: map[string]int{"houdini": 2}}); err != nil || !ok {
		t.Fatalf("the new owner did not get the units the old one left: %v, %v", ok, err)
	}
	reader, err = sqlite.OpenReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	waitSlots("h2")
}

// BenchmarkSlots: acquire plus release of one unit (storetest.BenchmarkSlots); the goal is a
// p99 under 100 µs (docs/guide/resources.md).
func BenchmarkSlots(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "flow.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchmarkSlots(b, s)
}
