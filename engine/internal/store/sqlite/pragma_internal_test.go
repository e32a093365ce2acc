package sqlite

import (
	"context"
	"path/filepath"
	"testing"
)

// The DSN pragmas are the durability contract of the package comment: check they took effect
// on the writer and that readers cannot write.
func TestDSNPragmasTakeEffect(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var journal string
	var sync, fk, busy int
	for q, dst := range map[string]any{"PRAGMA journal_mode": &journal, "PRAGMA synchronous": &sync,
		"PRAGMA foreign_keys": &fk, "PRAGMA busy_timeout": &busy} {
		if err := s.w.QueryRow(q).Scan(dst); err != nil {
			t.Fatal(q, err)
		}
	}
	if journal != "wal" || sync != 1 || fk != 1 || busy < 1000 {
		t.Fatalf("journal_mode=%s synchronous=%d foreign_keys=%d busy_timeout=%d", journal, sync, fk, busy)
	}
	if _, err := s.r.Exec("CREATE TABLE x (y)"); err == nil {
		t.Fatal("the read pool can write")
	}
}
