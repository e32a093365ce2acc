//go:build windows

package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// The byte lock on the database file guards it by itself: with the lock file free (as if it had
// been replaced), a second owner is still refused, with the message for a lost lock file. And
// SQLite reads and writes the database while the byte is locked by another handle of this
// process (Windows locks are mandatory: the byte lies past any database's end).
func TestDatabaseByteLockAloneRefusesASecondOwner(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dcc flow", "flow.db")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := lockDBFile(path)
	if err != nil || held == nil {
		t.Fatalf("lockDBFile: %v", err)
	}
	_, err = Open(context.Background(), path)
	var le *LockedError
	if !errors.As(err, &le) || !le.LockFileLost || !strings.Contains(err.Error(), "lock file") {
		t.Fatalf("second owner while the database byte is locked: %v", err)
	}
	if text, _ := os.ReadFile(path + ".lock"); len(text) != 0 {
		t.Fatalf("a refused owner wrote the lock file: %q", text)
	}
	held.Close()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("owner once the byte lock is released: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	b := &store.Batch{CreateRuns: []store.Run{{ID: "r1", SpecJSON: []byte(`{}`), Status: run.StatusRunning, CreatedAt: time.Now()}}}
	if err := s.Write(ctx, b); err != nil {
		t.Fatalf("SQLite writing beside the owner's byte lock: %v", err)
	}
	if r, err := s.GetRun(ctx, "r1"); err != nil || r.Status != run.StatusRunning {
		t.Fatalf("reading it back: %+v, %v", r, err)
	}
}
