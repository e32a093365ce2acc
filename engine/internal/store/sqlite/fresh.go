package sqlite

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sync"
)

// A new database is the migrations applied to an empty file: 16 transactions of DDL, each
// change of the schema parsed again, about 12 ms of CPU (0.2 s under the race detector). A
// process that creates many databases — the test suites, where most tests open one of their
// own — pays that for the first imageAfter of them; each one after is written from the image of
// the last of those (its file just after the migrations, as VACUUM INTO copies it: the current
// schema and no rows) before SQLite opens it, and migrate then finds nothing to do. A process
// that creates one database (a CLI command, an engine) never makes an image.
const imageAfter = 2

var fresh struct {
	mu      sync.Mutex
	created int    // databases this process migrated from nothing
	image   []byte // nil until the imageAfter-th
}

// fromImage fills the new database at path with the image, when the process has one: path must
// be the empty file makePrivate created, and the caller must hold its owner lock. The image is
// written into that file in place — not renamed over it: the owner's byte lock is on the file
// (lock.go), and a new file would not carry it — its first page (the header) last, then synced.
// It reports whether it did; on any failure (no image, a file that is not empty or has a -wal
// beside it, a write that fails) it leaves path empty, and the migrations make the database.
func fromImage(path string) bool {
	fresh.mu.Lock()
	image := fresh.image
	fresh.mu.Unlock()
	return image != nil && writeImage(path, image)
}

// writeImage is fromImage with the image given.
func writeImage(path string, image []byte) bool {
	if _, err := os.Lstat(path + "-wal"); err == nil {
		return false
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != 0 || !fi.Mode().IsRegular() {
		return false
	}
	first := min(len(image), imagePage)
	_, err = f.WriteAt(image[first:], int64(first))
	if err == nil {
		_, err = f.WriteAt(image[:first], 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		_ = f.Truncate(0)
		return false
	}
	return true
}

// imagePage is the size of an image's first page (the database header and the schema's root):
// SQLite's default page size, which the migrations keep.
const imagePage = 4096

// keepImage counts a database that migrate made from nothing (version 0) and, at the
// imageAfter-th, keeps the image of it: VACUUM INTO a temporary file beside it, read back. A
// failure only means no image (each new database is migrated).
func keepImage(ctx context.Context, w *sql.DB, path string) {
	fresh.mu.Lock()
	fresh.created++
	want := fresh.created == imageAfter && fresh.image == nil
	fresh.mu.Unlock()
	if !want {
		return
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".dccflow-image-*")
	if err != nil {
		return
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "image.db")
	if _, err := w.ExecContext(ctx, "VACUUM INTO ?", file); err != nil {
		return
	}
	image, err := os.ReadFile(file)
	if err != nil || len(image) == 0 {
		return
	}
	fresh.mu.Lock()
	if fresh.image == nil {
		fresh.image = image
	}
	fresh.mu.Unlock()
}
