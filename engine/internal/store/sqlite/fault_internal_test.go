package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// corruptTable writes a database at a temporary path with a few runs, then overwrites the root
// page of table with garbage (the file is checkpointed: the WAL is gone). It returns the path.
func corruptTable(t *testing.T, table string) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flow.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"r1", "r2", "r3"} {
		if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: id, SpecJSON: []byte(`{}`), Status: run.StatusCompleted, CreatedAt: now}},
			Events: []run.Event{{Time: now, RunID: id, Type: run.EventWorkflowStarted}}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var root, pageSize int64
	if err := raw.QueryRow(`SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = ?`, table).Scan(&root, &pageSize); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte(strings.Repeat("\xff", int(pageSize)))
	if _, err := f.WriteAt(garbage, (root-1)*pageSize); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return path
}

// A malformed database is refused at Open (quick_check) with a storage fault that says so.
func TestRedteamCorruptDatabaseRefusedAtOpen(t *testing.T) {
	path := corruptTable(t, "workflows")
	s, err := Open(context.Background(), path)
	if err == nil {
		s.Close()
		t.Fatal("a corrupted database opened for writing")
	}
	var fe *FaultError
	if !errors.As(err, &fe) || !fe.Corrupt || run.CodeOf(err) != run.CodeStorage || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("Open of a corrupted file: %v (code %s)", err, run.CodeOf(err))
	}
}

// A store that meets a malformed page when it writes (a file too large for the check at open)
// refuses every later write, even one that would not touch the damaged page.
func TestRedteamCorruptDatabaseRefusesWrites(t *testing.T) {
	path := corruptTable(t, "workflows")
	quickCheckMaxBytes = 0
	defer func() { quickCheckMaxBytes = QuickCheckMaxBytes }()
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("without the check the file opens: %v", err)
	}
	defer s.Close()
	now := time.Now()
	err = s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r4", SpecJSON: []byte(`{}`), Status: run.StatusRunning, CreatedAt: now}}})
	if run.CodeOf(err) != run.CodeStorage {
		t.Fatalf("a write into the damaged page: %v (code %s); want code storage", err, run.CodeOf(err))
	}
	if err := s.Write(ctx, &store.Batch{}); run.CodeOf(err) != run.CodeStorage || !strings.Contains(err.Error(), "corrupted") {
		t.Fatalf("a write after the damage was found: %v; want it refused (code storage)", err)
	}
}
