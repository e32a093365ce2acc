package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/run"
	sqlitedrv "modernc.org/sqlite"
)

// FaultError is a storage fault: the database file could not be read or written because of
// the storage, not because of what was asked (a full disk, an I/O error, a read-only file, a
// corrupted file). Its code is storage (run.CodeOf). A store that meets a corrupted file
// (Corrupt) refuses every later write: writing into a malformed b-tree spreads the damage.
type FaultError struct {
	Path    string
	Corrupt bool   // the file is malformed (SQLITE_CORRUPT, SQLITE_NOTADB, or quick_check found damage)
	Lost    bool   // the owner lock was lost (its lock file deleted, and another process took it)
	Detail  string // what quick_check reported, when it found the damage
	Err     error
}

func (e *FaultError) Error() string {
	if e.Lost {
		return fmt.Sprintf("this process no longer owns database %s, so it writes nothing more to it: %v; "+
			"stop this engine (do not delete %s.lock while dcc-flow runs)", e.Path, e.Err, e.Path)
	}
	if e.Corrupt {
		what := ""
		if e.Err != nil {
			what = e.Err.Error()
		}
		if e.Detail != "" {
			what = "quick_check: " + e.Detail
		}
		return fmt.Sprintf("database %s is corrupted (%s); dcc-flow does not write into a damaged file: restore it "+
			"from a backup, or move it aside (sqlite3's .recover command may salvage its runs) and start a new database", e.Path, what)
	}
	return fmt.Sprintf("database %s: %v; free disk space or fix the storage (permissions, the device), then try again", e.Path, e.Err)
}

func (e *FaultError) Unwrap() error { return e.Err }

// ErrorCode is run.CodeStorage (see run.CodeOf).
func (e *FaultError) ErrorCode() string { return run.CodeStorage }

// SQLite primary result codes of storage faults.
const (
	codePerm     = 3
	codeReadOnly = 8
	codeIOErr    = 10
	codeCorrupt  = 11
	codeFull     = 13
	codeCantOpen = 14
	codeProtocol = 15
	codeNoLFS    = 22
	codeNotADB   = 26
)

// AsFault returns err as a *FaultError of the database at path when it is a storage fault (an
// SQLite error of class I/O, full, corrupt, not-a-database, read-only, cannot-open…), else nil.
func AsFault(path string, err error) *FaultError {
	if err == nil {
		return nil
	}
	var fe *FaultError
	if errors.As(err, &fe) {
		return fe
	}
	var se *sqlitedrv.Error
	if !errors.As(err, &se) {
		return nil
	}
	switch se.Code() & 0xff {
	case codeCorrupt, codeNotADB:
		return &FaultError{Path: path, Corrupt: true, Err: err}
	case codePerm, codeReadOnly, codeIOErr, codeFull, codeCantOpen, codeProtocol, codeNoLFS:
		return &FaultError{Path: path, Err: err}
	}
	return nil
}

// fault returns err, as a *FaultError when it is a storage fault; a corrupted file makes the
// store refuse every later write.
func (s *Store) fault(err error) error {
	fe := AsFault(s.path, err)
	if fe == nil {
		return err
	}
	if fe.Corrupt {
		s.broken.CompareAndSwap(nil, fe)
	}
	return fe
}

// QuickCheckMaxBytes bounds the database files Open checks with PRAGMA quick_check: it reads
// the whole file (≈ 35 ms for 10,000 runs, 13 MB, warm; ≈ 2.6 ms per MB), so a larger file
// opens without it, and its damage is found when a read or write meets it (code storage, and
// the store refuses further writes).
const QuickCheckMaxBytes = 128 << 20

// quickCheckMaxBytes is QuickCheckMaxBytes (tests lower it).
var quickCheckMaxBytes int64 = QuickCheckMaxBytes

// checkIntegrity runs PRAGMA quick_check on the database at path when its file is at most
// QuickCheckMaxBytes, and returns a *FaultError when the file is malformed.
func checkIntegrity(ctx context.Context, db *sql.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() > quickCheckMaxBytes || fi.Size() == 0 {
		return nil
	}
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check(3)")
	if err != nil {
		if fe := AsFault(path, err); fe != nil {
			return fe
		}
		return fmt.Errorf("checking %s: %w", path, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("checking %s: %w", path, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		if fe := AsFault(path, err); fe != nil {
			return fe
		}
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if len(problems) > 0 {
		return &FaultError{Path: path, Corrupt: true, Detail: strings.Join(problems, "; ")}
	}
	return nil
}
