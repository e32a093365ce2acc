package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"io/fs"
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

// fromImage creates the new database at path from the image, when the process has one and path
// does not exist: the image is written to a temporary file beside it (0600), synced, and linked
// to path, which fails when path exists — so a database is never overwritten, two processes
// creating one database at once get one of them, and a crash leaves the temporary file, never a
// partial database. It runs before the owner lock is taken (lock.go locks a byte of the
// database file itself, and must lock the file that stays). It reports whether it created
// path; on any failure (no image, path or a -wal beside it exists, a file system without hard
// links) nothing is created, and the migrations make the database.
func fromImage(path string) bool {
	fresh.mu.Lock()
	image := fresh.image
	fresh.mu.Unlock()
	return image != nil && writeImage(path, image)
}

// writeImage is fromImage with the image given.
func writeImage(path string, image []byte) bool {
	for _, p := range []string{path, path + "-wal"} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			return false
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".new-*")
	if err != nil {
		return false
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(image)
	if err == nil {
		err = tmp.Chmod(privateMode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	return err == nil && os.Link(tmp.Name(), path) == nil
}

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
