package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// The owner lock lives in one server session. After a server restart the owner takes it again
// on a new connection (and a second engine is still refused); if another engine took it first,
// the old owner writes nothing more: its writes fail with a Lost fault, code storage.
func TestOwnerLockAcrossAServerRestart(t *testing.T) {
	ctx := context.Background()
	prev := ownerCheckEvery.Swap(int64(time.Hour)) // the test calls check itself
	defer ownerCheckEvery.Store(prev)
	c := pgtest.StartT(t)
	if err := c.Prepare(ctx, func(url string) error { return Migrate(ctx, url) }); err != nil {
		t.Fatal(err)
	}
	url, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	newRun := func(id string) *store.Batch {
		now := time.Now()
		return &store.Batch{CreateRuns: []store.Run{{ID: id, SpecJSON: json.RawMessage(`{}`), Status: run.StatusRunning,
			CreatedAt: now, UpdatedAt: now}}}
	}

	a, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Restart; a takes the lock again before anyone else.
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if lost := a.ownerW.check(); lost {
		t.Fatal("lost the lock with nobody to take it")
	}
	var le *LockedError
	if _, err := Open(ctx, url); !errors.As(err, &le) {
		t.Fatalf("a second engine after the owner took the lock again: %v", err)
	}
	var werr error
	for range 50 { // the pool drops the connections the restart cut as it meets them
		if werr = a.Write(ctx, newRun("r1")); werr == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if werr != nil {
		t.Fatal(werr)
	}

	// Restart; another engine takes the database before a looks.
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, url)
	if err != nil {
		t.Fatalf("the new owner: %v", err)
	}
	defer b.Close()
	if lost := a.ownerW.check(); !lost {
		t.Fatal("a took the lock b holds")
	}
	err = a.Write(ctx, newRun("r2"))
	var fe *FaultError
	if !errors.As(err, &fe) || !fe.Lost || run.CodeOf(err) != run.CodeStorage {
		t.Fatalf("the old owner's write: %v", err)
	}
	if err := b.Write(ctx, newRun("r3")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetRun(ctx, "r2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("r2 written after the lock was lost: %v", err)
	}
}
