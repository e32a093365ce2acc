// Package storeopen is the one place that names a concrete store: it opens the store a
// configuration asks for (the in-memory store, a SQLite file, or a PostgreSQL database named by
// a postgres:// or postgresql:// URL) and classifies its errors,
// so that the engine depends only on the store interfaces (store.Store and the features of
// store's features.go). A new store (PostgreSQL) is added here and nowhere else in the engine;
// engine/imports_test.go fails when another package imports a concrete store.
package storeopen

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/postgres"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlite"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Memory returns a new, empty in-memory store.
func Memory() store.Store { return memstore.New() }

// IsURL reports whether db names a PostgreSQL database (postgres:// or postgresql://) rather
// than a file.
func IsURL(db string) bool { return postgres.IsURL(db) }

// Redact returns db for messages: a URL without its password, a keyword/value string not at
// all, a path as is.
func Redact(db string) string {
	if postgres.IsURL(db) {
		return postgres.Redact(db)
	}
	if postgres.IsKeywordString(db) {
		return "(a keyword/value connection string)"
	}
	return db
}

// Open opens the database db: a PostgreSQL database when db is a postgres:// or postgresql://
// URL (Postgres), else the SQLite file at that path (File).
// A libpq keyword/value string ("host=… dbname=… password=…") is refused with invalid_request
// (postgres.IsKeywordString), its text not repeated: it is no file name, and may hold a password.
func Open(ctx context.Context, db string, readOnly bool) (store.Store, error) {
	if postgres.IsURL(db) {
		return Postgres(ctx, db, readOnly)
	}
	if postgres.IsKeywordString(db) {
		return nil, &run.Error{Code: run.CodeInvalidRequest, Message: "db: a PostgreSQL keyword/value connection " +
			"string (host=… dbname=…) is not taken; write it as a URL: postgresql://user@host:5432/dbname " +
			"(the password in PGPASSWORD or ~/.pgpass); a SQLite file of such a name is written ./NAME"}
	}
	return File(ctx, db, readOnly)
}

// Postgres opens the PostgreSQL database at url (migrating it unless readOnly; docs/operations/cluster.md).
// Errors are *run.Error, naming the URL without its password: invalid_state (a schema this
// build does not know), storage (the server is unreachable or failing; Details db) or
// invalid_request (a malformed URL, a refused login). Any number of engines open one database
// (the engine attaches to it: store.Leaser).
func Postgres(ctx context.Context, url string, readOnly bool) (store.Store, error) {
	var st *postgres.Store
	var err error
	if readOnly {
		st, err = postgres.OpenReadOnly(ctx, url)
	} else {
		st, err = postgres.Open(ctx, url)
	}
	if err == nil {
		return st, nil
	}
	db := postgres.Redact(url)
	var se *postgres.SchemaError
	if errors.As(err, &se) {
		return nil, &run.Error{Code: run.CodeInvalidState, Message: se.Error(), Err: err}
	}
	if fe := postgres.AsFault(db, err); fe != nil {
		return nil, &run.Error{Code: run.CodeStorage, Message: "db: " + fe.Error(), Err: err, Details: map[string]any{"db": db}}
	}
	return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("db: cannot open %s: %v", db, err), Err: err}
}

// File opens the SQLite database at path, creating it and its folder when needed; readOnly
// opens an existing one beside its owner. Errors are *run.Error: invalid_state (a schema this
// build does not know), storage (a full disk, a corrupted file; Details db and corrupt),
// db_locked (another process owns it; Details holder and db) or invalid_request.
func File(ctx context.Context, path string, readOnly bool) (store.Store, error) {
	if readOnly {
		st, err := sqlite.OpenReadOnly(ctx, path)
		if err != nil {
			return nil, openError(path, err)
		}
		return st, nil
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("db: cannot create the folder of %s: %v", path, err), Err: err}
		}
	}
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, openError(path, err)
	}
	return st, nil
}

func openError(path string, err error) error {
	var se *sqlite.SchemaError
	if errors.As(err, &se) {
		return &run.Error{Code: run.CodeInvalidState, Message: se.Error(), Err: err}
	}
	if fe := sqlite.AsFault(path, err); fe != nil {
		return &run.Error{Code: run.CodeStorage, Message: "db: " + fe.Error(), Err: err,
			Details: map[string]any{"db": path, "corrupt": fe.Corrupt}}
	}
	var le *sqlite.LockedError
	if errors.As(err, &le) {
		return &run.Error{Code: run.CodeDBLocked, Message: le.Error(), Err: err,
			Details: map[string]any{"holder": le.Holder, "db": path}}
	}
	return &run.Error{Code: run.CodeInvalidRequest, Message: fmt.Sprintf("db: cannot open %s: %v", path, err), Err: err}
}

// IsFault reports whether err, returned by a store, is a storage fault (a full disk, an I/O
// error, a corrupted file, a database server that is down or unreachable) rather than a bug or a
// missing record.
func IsFault(err error) bool {
	return sqlite.AsFault("", err) != nil || postgres.AsFault("", err) != nil
}

// SetForkHook makes fn hear about the descriptors holding the owner locks of file databases
// (see engine.SetForkHook).
func SetForkHook(fn func(fd int, held bool)) { sqlite.SetForkHook(fn) }
