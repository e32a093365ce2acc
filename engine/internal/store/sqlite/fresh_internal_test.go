package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// describe returns what a database is, for comparing two: its schema (every table, index,
// trigger and view with its SQL), its version and the settings kept in the file, and its rows
// (none in a new database).
func describe(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	rows, err := db.Query(`SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master ORDER BY type, name`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var typ, name, tbl, text string
		if err := rows.Scan(&typ, &name, &tbl, &text); err != nil {
			t.Fatal(err)
		}
		b.WriteString(typ + " " + name + " on " + tbl + ": " + text + "\n")
		if typ == "table" {
			tables = append(tables, name)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	for _, p := range []string{"user_version", "page_size", "auto_vacuum", "journal_mode", "encoding", "application_id"} {
		var v string
		if err := db.QueryRow("PRAGMA " + p).Scan(&v); err != nil {
			t.Fatal(p, err)
		}
		b.WriteString(p + " = " + v + "\n")
	}
	for _, table := range tables {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&n); err != nil {
			t.Fatal(table, err)
		}
		if n > 0 {
			b.WriteString(table + " holds rows\n")
		}
	}
	return b.String()
}

// A new database written from the process's image (fresh.go) is the database the migrations
// make from nothing: the same schema, version, settings and no rows, private, and it works.
// Most of this package's tests (and every suite's) run on databases made from the image.
func TestNewDatabaseFromTheImageIsTheMigratedOne(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	// One made by the migrations, whatever the image: open, not Open (no fromImage).
	migrated := filepath.Join(dir, "migrated.db")
	makePrivate(migrated)
	m, err := open(ctx, migrated)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	for i := 0; i <= imageAfter; i++ { // the process keeps an image by the imageAfter-th new database
		fresh.mu.Lock()
		have := fresh.image != nil
		fresh.mu.Unlock()
		if have {
			break
		}
		s, err := Open(ctx, filepath.Join(dir, "warm"+string(rune('a'+i))+".db"))
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	fresh.mu.Lock()
	have := fresh.image != nil
	fresh.mu.Unlock()
	if !have {
		t.Fatalf("no image after %d new databases", imageAfter+1)
	}

	imaged := filepath.Join(dir, "imaged.db")
	if !fromImage(imaged) {
		t.Fatal("fromImage did not create a new database")
	}
	s, err := Open(ctx, imaged)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, want := describe(t, s.w), describe(t, m.w); got != want {
		t.Fatalf("the database made from the image differs from the migrated one:\n%s\nwant:\n%s", got, want)
	}
	if runtime.GOOS != "windows" {
		if fi, err := os.Stat(imaged); err != nil || fi.Mode().Perm() != privateMode {
			t.Fatalf("mode of the database made from the image: %v %v; want %v", fi.Mode().Perm(), err, privateMode)
		}
	}
	if err := checkIntegrity(ctx, s.w, imaged); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`INSERT INTO store_meta (key, value) VALUES ('probe', 1)`); err != nil {
		t.Fatalf("writing into the database made from the image: %v", err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".*")); len(matches) > 0 {
		t.Fatalf("temporary files left: %v", matches)
	}
}

// fromImage only creates: a file that exists (a database, anything else, or an empty one) is
// left alone, and so is a path with a -wal file beside it; a missing one is created whole.
func TestImageNeverOverwritesAFile(t *testing.T) {
	t.Parallel()
	image := []byte("SQLite format 3\x00 stand-in image")
	fromImage := func(path string) bool { return writeImage(path, image) }
	dir := t.TempDir()
	for name, content := range map[string]string{"full.db": "something", "empty.db": ""} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if fromImage(path) {
			t.Fatalf("fromImage wrote over %s", name)
		}
		if b, _ := os.ReadFile(path); string(b) != content {
			t.Fatalf("%s changed: %q", name, b)
		}
	}
	walled := filepath.Join(dir, "walled.db")
	if err := os.WriteFile(walled+"-wal", []byte("frames"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fromImage(walled) {
		t.Fatal("fromImage created a database beside a -wal file")
	}
	created := filepath.Join(dir, "new.db")
	if !fromImage(created) {
		t.Fatal("fromImage did not create a missing database")
	}
	if b, _ := os.ReadFile(created); string(b) != string(image) {
		t.Fatalf("the new database holds %q", b)
	}
	if runtime.GOOS != "windows" {
		if fi, err := os.Stat(created); err != nil || fi.Mode().Perm() != privateMode {
			t.Fatalf("mode of the new database: %v %v", fi.Mode().Perm(), err)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*.new-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}
