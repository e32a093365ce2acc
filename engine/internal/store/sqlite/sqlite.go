// Package sqlite is the SQLite implementation of store.Store (DESIGN §5), on modernc.org/sqlite
// (pure Go, no cgo): one database file, WAL journal, numbered embedded migrations.
//
// Writes: every Write call hands its batch to one committer goroutine, which applies the
// batches waiting at that moment in one BEGIN IMMEDIATE … COMMIT transaction (group commit),
// each inside its own SAVEPOINT so that one failing batch (a duplicate run id, an unknown run)
// fails alone. Write returns once the transaction holding its batch has committed. Reads use a
// separate connection pool and see committed data only.
//
// Durability: the database runs with synchronous=NORMAL in WAL mode, so a committed transaction
// survives a crash of the process (the SIGKILL test) but the last transactions may be lost on a
// power failure or an OS crash, before the WAL is checkpointed. That is the trade SQLite
// documents for WAL + NORMAL, and what lets a wide fan-out commit many steps per fsync.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// maxGroup bounds how many batches one transaction applies.
const maxGroup = 512

// Store is a store.Store backed by one SQLite file. Create it with Open; Close it when done.
type Store struct {
	path string
	w    *sql.DB // the single writer connection
	r    *sql.DB // readers

	queue     chan *pending
	closing   chan struct{}
	committed chan struct{} // closed when the committer has returned
	closeOnce sync.Once
	closed    atomic.Bool

	stmts map[string]*sql.Stmt // the write statements, prepared on w

	seq atomic.Uint64 // the last event sequence number assigned
	ord int64         // the last step order assigned (committer only)

	commits atomic.Int64 // transactions committed (group commit is visible in tests)

	readOnly bool   // opened with OpenReadOnly: no committer, no owner lock
	unlock   func() // releases the owner lock (a no-op for a read-only store)
	ctl      ctlConn
}

var _ store.Store = (*Store)(nil)

type pending struct {
	b    *store.Batch
	done chan error
}

// SchemaError is returned by Open for a database whose schema is newer than this dcc-flow.
type SchemaError struct {
	Path    string
	Found   int
	Current int
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("database %s has schema version %d, newer than this dcc-flow (%d); upgrade dcc-flow to open it",
		e.Path, e.Found, e.Current)
}

// LockedError is returned by Open when another process owns the database: one process at a
// time writes a database (it assigns event sequence numbers and recovers crashed runs); the
// others open it with OpenReadOnly.
type LockedError struct {
	Path   string
	Holder string // "pid 1234 (dcc-flow serve …) since 2026-11-23T10:02:00Z", or "" if unknown
}

func (e *LockedError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another process"
	}
	return fmt.Sprintf("database %s is in use by %s; open it read-only to look at its runs, "+
		"stop that process, or use another database", e.Path, holder)
}

// Open opens (creating it if needed) the database file at path for writing and migrates it to
// the current schema. The calling process becomes the database's owner until Close: another
// process's Open fails with a *LockedError (see OpenReadOnly). A database written by a newer
// dcc-flow is refused with a *SchemaError. Open does not recover interrupted runs: the engine
// calls MarkInterrupted.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("sqlite store: a file path is required (got %q)", path)
	}
	unlock, err := lockOwner(path)
	if err != nil {
		return nil, err
	}
	s, err := open(ctx, path)
	if err != nil {
		unlock()
		return nil, err
	}
	s.unlock = unlock
	go s.commitLoop()
	return s, nil
}

// OpenReadOnly opens an existing database without owning it, alongside the process that does:
// every read works (and sees what the owner commits), Write and MarkInterrupted return
// ErrReadOnly, and RequestControl asks the owner to approve or cancel a run. A database of
// another schema version is refused (the owner migrates it).
func OpenReadOnly(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("sqlite store: a file path is required (got %q)", path)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("opening %s read-only: %w", path, err)
	}
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	var version int
	if err := r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		r.Close()
		return nil, fmt.Errorf("opening %s read-only: %w", path, err)
	}
	if current := SchemaVersion(); version != current {
		r.Close()
		if version > current {
			return nil, &SchemaError{Path: path, Found: version, Current: current}
		}
		return nil, fmt.Errorf("database %s has schema version %d, older than this dcc-flow (%d): "+
			"open it once for writing to migrate it", path, version, current)
	}
	s := &Store{path: path, r: r, readOnly: true, unlock: func() {}, closing: make(chan struct{}),
		committed: make(chan struct{})}
	close(s.committed)
	return s, nil
}

// ReadOnly reports whether the store was opened with OpenReadOnly.
func (s *Store) ReadOnly() bool { return s.readOnly }

func open(ctx context.Context, path string) (*Store, error) {
	w, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := migrate(ctx, w, path); err != nil {
		w.Close()
		return nil, err
	}
	r, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	s := &Store{path: path, w: w, r: r, queue: make(chan *pending, 4096), closing: make(chan struct{}), committed: make(chan struct{})}
	var seq, ord sql.NullInt64
	if err := w.QueryRowContext(ctx, `SELECT (SELECT max(seq) FROM workflow_events), (SELECT max(ord) FROM workflow_steps)`).Scan(&seq, &ord); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	s.seq.Store(uint64(seq.Int64))
	s.ord = ord.Int64
	s.stmts = map[string]*sql.Stmt{}
	for _, q := range writeStatements {
		st, err := w.PrepareContext(ctx, q)
		if err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("preparing the statements of %s: %w", path, err)
		}
		s.stmts[q] = st
	}
	return s, nil
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "foreign_keys(1)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// migrate applies the embedded migrations the database lacks, each in its own transaction,
// tracking the version in PRAGMA user_version.
func migrate(ctx context.Context, db *sql.DB, path string) error {
	entries, err := migrationFS.ReadDir("migrations")
	if err != nil {
		return err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	current := len(names)
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return fmt.Errorf("reading the schema version of %s: %w", path, err)
	}
	if version > current {
		return &SchemaError{Path: path, Found: version, Current: current}
	}
	for i := version; i < current; i++ {
		n, err := strconv.Atoi(strings.SplitN(names[i], "_", 2)[0])
		if err != nil || n != i+1 {
			return fmt.Errorf("migration %s is misnumbered (want %04d_…)", names[i], i+1)
		}
		body, err := migrationFS.ReadFile("migrations/" + names[i])
		if err != nil {
			return err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrating %s to version %d: %w", path, i+1, err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrating %s to version %d (%s): %w", path, i+1, names[i], err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrating %s to version %d: %w", path, i+1, err)
		}
	}
	return nil
}

// SchemaVersion returns the schema version this package writes.
func SchemaVersion() int {
	entries, _ := migrationFS.ReadDir("migrations")
	return len(entries)
}

// Path returns the database file.
func (s *Store) Path() string { return s.path }

// Commits returns how many write transactions were committed (for tests of group commit).
func (s *Store) Commits() int64 { return s.commits.Load() }

// Close stops the committer after the batches already handed to it and closes the database.
// Further calls return store.ErrClosed. Closing twice is not an error.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.closing)
		<-s.committed
		err = s.closeDBs()
		if s.unlock != nil {
			s.unlock()
		}
	})
	return err
}

func (s *Store) closeDBs() error {
	for _, st := range s.stmts {
		st.Close()
	}
	errs := []error{s.r.Close(), s.ctl.close()}
	if s.w != nil {
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}

// Write applies b atomically and durably (see the package comment): it returns once the
// transaction holding b has committed. ctx bounds the wait for a place in the queue only: a
// batch handed to the committer is always applied or failed as a whole.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if s.readOnly {
		return ErrReadOnly
	}
	p := &pending{b: b, done: make(chan error, 1)}
	select {
	case s.queue <- p:
	case <-s.closing:
		return store.ErrClosed
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return <-p.done
}

func (s *Store) commitLoop() {
	defer close(s.committed)
	for {
		var first *pending
		select {
		case first = <-s.queue:
		case <-s.closing:
			// Apply what is already queued, then stop.
			for {
				select {
				case p := <-s.queue:
					s.commitGroup([]*pending{p})
				default:
					return
				}
			}
		}
		group := []*pending{first}
	drain:
		for len(group) < maxGroup {
			select {
			case p := <-s.queue:
				group = append(group, p)
			default:
				break drain
			}
		}
		s.commitGroup(group)
	}
}

// commitGroup applies the batches of group in one transaction. It first applies them all
// directly; if one fails, it rolls back and applies them again each in its own SAVEPOINT, so that
// only the failing batch fails (savepoints cost a sub-journal write per page, so they are only
// paid for when a batch fails).
func (s *Store) commitGroup(group []*pending) {
	errs, err := s.tryGroup(group, false)
	if err == errRetryWithSavepoints {
		errs, err = s.tryGroup(group, true)
	}
	for i, p := range group {
		if err != nil {
			p.done <- err
		} else {
			p.done <- errs[i]
		}
	}
}

var errRetryWithSavepoints = errors.New("a batch failed: retry the group with savepoints")

func (s *Store) tryGroup(group []*pending, savepoints bool) ([]error, error) {
	ctx := context.Background()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: begin: %w", err)
	}
	t := &txn{ctx: ctx, tx: tx, stmts: s.stmts}
	errs := make([]error, len(group))
	seq, ord := s.seq.Load(), s.ord
	for i, p := range group {
		if savepoints {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT b"); err != nil {
				tx.Rollback()
				return nil, err
			}
		}
		seqBefore, ordBefore := seq, ord
		if err := apply(t, p.b, &seq, &ord); err != nil {
			if !savepoints {
				tx.Rollback()
				if len(group) == 1 {
					return []error{err}, nil
				}
				return nil, errRetryWithSavepoints
			}
			errs[i] = err
			seq, ord = seqBefore, ordBefore
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO b"); err != nil {
				tx.Rollback()
				return nil, err
			}
		}
		if savepoints {
			if _, err := tx.ExecContext(ctx, "RELEASE b"); err != nil {
				tx.Rollback()
				return nil, err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("sqlite store: commit: %w", err)
	}
	s.commits.Add(1)
	s.seq.Store(seq)
	s.ord = ord
	return errs, nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
