// Package sqlite is the SQLite implementation of store.Store (docs/design/architecture.md,
// "Durability"), on modernc.org/sqlite (pure Go, no cgo): one database file, WAL journal,
// numbered embedded migrations.
//
// Writes: Write queues its batch on a group committer (store/groupcommit, shared with the
// PostgreSQL store); one writer at a time, the leader, applies the batches queued at that moment
// in one BEGIN IMMEDIATE … COMMIT transaction (group commit), so that one failing batch (a
// duplicate run id, an unknown run) fails alone (see commitGroup). A Write that finds no leader
// leads itself, in its own goroutine: an idle store commits without a goroutine handoff. A
// leader commits one group, the one holding its own batch, then hands the lead to the first
// batch still queued, whose writer commits the next group. Write returns once
// the transaction holding its batch has committed. Reads use a separate connection pool and see
// committed data only.
//
// Durability: the database runs with synchronous=NORMAL in WAL mode, so a committed transaction
// survives a crash of the process (the SIGKILL test) but the last transactions may be lost on a
// power failure or an OS crash, before the WAL is checkpointed. That is the trade SQLite
// documents for WAL + NORMAL, and what lets a wide fan-out commit many steps per fsync.
//
// Checkpoints (copying the WAL into the database file) run beside the writes, on a connection
// of their own (see checkpoint.go), not inside the commit that happens to fill the WAL.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
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
	"github.com/dcc-flow/dcc-flow/engine/internal/store/groupcommit"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// maxGroup bounds how many batches one transaction applies.
const maxGroup = 512

// Store is a store.Store backed by one SQLite file. Create it with Open; Close it when done.
type Store struct {
	path string

	// The slots of scarce resources and their mirror (resources.go), made on their first use.
	slotsOnce sync.Once
	slots     *slotState
	w         *sql.DB // the single writer connection
	r         *sql.DB // readers

	// gc is the write queue: batches waiting for a leader, committed in groups (see Write).
	gc        groupcommit.Committer[*store.Batch]
	closeOnce sync.Once
	closed    atomic.Bool
	// refusedFires counts the refused fires recorded per schedule, to trim them every
	// RefusedFiresSlack (fires.go).
	refusedFires store.RefusedFiresCounter

	// readStmts are the read queries of the asset lookups a cached step makes (assets.go),
	// prepared once: preparing one cost as much as running it.
	readStmts stmtCache

	wc   *wconn        // the writer's driver connection and its prepared statements (leader only)
	ckpt *checkpointer // nil for a read-only store, which never commits

	seq atomic.Uint64 // the last event sequence number assigned
	ord int64         // the last step order assigned (committer only)

	commits atomic.Int64 // transactions committed (group commit is visible in tests)

	// broken is set once a statement found the file malformed, or the owner lock was lost:
	// every later Write returns it.
	broken atomic.Pointer[FaultError]

	readOnly bool   // opened with OpenReadOnly: no committer, no owner lock
	unlock   func() // releases the owner lock (a no-op for a read-only store)
	// checkLock makes sure the owner lock is still held (see ownerLock.check), before each
	// transaction; nil for a read-only store.
	checkLock func() error
	ctl       ctlConn
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.Pruner         = (*Store)(nil)
	_ store.CommitObserver = (*Store)(nil)
)

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
	Holder string // "pid 1234 (python3 dcc-flow) since 2026-11-23T10:02:00Z", or "" if unknown
	// HolderExited: the process Holder names has exited; a process it forked without exec
	// holds the lock it inherited.
	HolderExited bool
	// LockFileLost: the lock file was deleted or replaced while its owner runs; the owner
	// still holds the database itself.
	LockFileLost bool
	Others       []int // pids of the processes that have the lock file (or the database) open, when known
}

func (e *LockedError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "another process"
	}
	others := ""
	if len(e.Others) > 0 {
		s := make([]string, len(e.Others))
		for i, p := range e.Others {
			s[i] = strconv.Itoa(p)
		}
		others = " (pid " + strings.Join(s, ", pid ") + ")"
	}
	switch {
	case e.LockFileLost:
		return fmt.Sprintf("database %s is in use by another process%s, although its lock file %s.lock was deleted "+
			"or replaced; open it read-only to look at its runs, stop that process, or use another database", e.Path, others, e.Path)
	case e.HolderExited:
		return fmt.Sprintf("database %s is locked by a process that %s started without exec (a fork() child, "+
			"e.g. a multiprocessing worker), which inherited the lock: that process has exited; stop its children%s, "+
			"open the database read-only, or use another database", e.Path, holder, others)
	}
	return fmt.Sprintf("database %s is in use by %s; open it read-only to look at its runs, "+
		"stop that process, or use another database", e.Path, holder)
}

// Open opens (creating it if needed) the database file at path for writing and migrates it to
// the current schema. A new database, its -wal, -shm and .lock files are created 0600, whatever
// the umask (makePrivate); the .lock file is removed by Close. The calling process becomes the database's owner until Close: another
// process's Open fails with a *LockedError (see OpenReadOnly). A database written by a newer
// dcc-flow is refused with a *SchemaError. Open does not recover interrupted runs: the engine
// calls MarkInterrupted.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" || path == ":memory:" {
		return nil, fmt.Errorf("sqlite store: a file path is required (got %q)", path)
	}
	fromImage(path) // a new database, when the process has made others (fresh.go)
	unlock, checkLock, err := lockOwner(path)
	if err != nil {
		return nil, err
	}
	makePrivate(path)
	s, err := open(ctx, path)
	if err != nil {
		unlock()
		return nil, err
	}
	s.unlock, s.checkLock = unlock, checkLock
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
	// mode=ro: a viewer never writes, and may not be able to (a read-only share, a file it may
	// only read). A WAL database whose -shm and -wal files do not exist and cannot be created
	// there opens only as immutable: a snapshot, right for a share nobody writes (not when a
	// -wal file holds commits the snapshot would miss: then the error stands).
	var r *sql.DB
	var version int
	var err error
	for _, immutable := range []bool{false, true} {
		if r, err = sql.Open("sqlite", viewerDSN(path, immutable)); err != nil {
			return nil, fmt.Errorf("opening %s: %w", path, err)
		}
		r.SetMaxOpenConns(4)
		r.SetMaxIdleConns(4) // as openReaders
		if err = r.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err == nil {
			break
		}
		r.Close()
		fe := AsFault(path, err)
		if fe != nil && !immutable && !walPending(path) {
			continue // no -wal with commits it would miss: the snapshot is the whole database
		}
		if fe != nil {
			return nil, fe
		}
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
	s := &Store{path: path, r: r, readOnly: true, unlock: func() {}}
	return s, nil
}

// ReadOnly reports whether the store was opened with OpenReadOnly.
func (s *Store) ReadOnly() bool { return s.readOnly }

func open(ctx context.Context, path string) (*Store, error) {
	fi, err := os.Stat(path)
	empty := err == nil && fi.Size() == 0 // a new database (makePrivate created it)
	w, err := openWriting(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		if fe := AsFault(path, err); fe != nil {
			return nil, fe
		}
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	// A malformed file opens fine and fails later, at the page that is damaged: look at every
	// page now (when the file is not too large to read at each open), before writing into it.
	if err := checkIntegrity(ctx, w, path); err != nil {
		w.Close()
		return nil, err
	}
	from, err := migrate(ctx, w, path)
	if err != nil {
		w.Close()
		if fe := AsFault(path, err); fe != nil {
			return nil, fe
		}
		return nil, err
	}
	if from == 0 && empty {
		keepImage(ctx, w, path) // fresh.go
	}
	r, err := openReaders(path)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	s := &Store{path: path, w: w, r: r}
	s.gc.Max, s.gc.Commit = maxGroup, s.commitGroup
	if s.ckpt, err = startCheckpointer(path); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	var seq, ord sql.NullInt64
	if err := w.QueryRowContext(ctx, `SELECT max(coalesce((SELECT max(seq) FROM workflow_events), 0),
		coalesce((SELECT value FROM store_meta WHERE key = 'last_seq'), 0)), (SELECT max(ord) FROM workflow_steps)`).Scan(&seq, &ord); err != nil {
		s.closeDBs()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	s.seq.Store(uint64(seq.Int64))
	s.ord = ord.Int64
	return s, nil
}

// openWriting returns a handle on one long-lived connection to path that can write: the
// writer's, the checkpointer's, a read-only store's control requests.
func openWriting(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	return db, nil
}

// walPending reports whether the database at path has a non-empty -wal file: commits an
// immutable (WAL-less) view would not see.
func walPending(path string) bool {
	fi, err := os.Stat(path + "-wal")
	return err == nil && fi.Size() > 0
}

// viewerDSN is the data source of a read-only store's connections: read-only (mode=ro), and
// immutable when asked (no locks, no WAL: the file must not change while open).
func viewerDSN(path string, immutable bool) string {
	q := url.Values{}
	q.Set("mode", "ro")
	if immutable {
		q.Set("immutable", "1")
	}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "query_only(1)")
	return "file:" + path + "?" + q.Encode()
}

// openReaders returns the pool of query-only connections to path that reads go through.
func openReaders(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	// All 4 kept open: database/sql keeps 2 idle by default, and concurrent reads (a foreach's
	// cache lookups) then closed and opened the others again (a schema read and the statements
	// prepared anew each time: most of what such a read cost).
	db.SetMaxIdleConns(4)
	return db, nil
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	for _, p := range []string{"journal_mode(WAL)", "busy_timeout(10000)", "foreign_keys(1)", "synchronous(NORMAL)"} {
		q.Add("_pragma", p)
	}
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		// The checkpointer checkpoints (see checkpoint.go), not the writing connections.
		q.Add("_pragma", "wal_autocheckpoint(0)")
		q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// migrate applies the embedded migrations the database lacks, each in its own transaction,
// tracking the version in PRAGMA user_version, and returns the version it found (0: a new
// database; the current version: nothing to do).
func migrate(ctx context.Context, db *sql.DB, path string) (int, error) {
	entries, err := migrationFS.ReadDir("migrations")
	if err != nil {
		return 0, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	current := len(names)
	var version int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return 0, fmt.Errorf("reading the schema version of %s: %w", path, err)
	}
	if version > current {
		return version, &SchemaError{Path: path, Found: version, Current: current}
	}
	for i := version; i < current; i++ {
		n, err := strconv.Atoi(strings.SplitN(names[i], "_", 2)[0])
		if err != nil || n != i+1 {
			return version, fmt.Errorf("migration %s is misnumbered (want %04d_…)", names[i], i+1)
		}
		body, err := migrationFS.ReadFile("migrations/" + names[i])
		if err != nil {
			return version, err
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return version, fmt.Errorf("migrating %s to version %d: %w", path, i+1, err)
		}
		if _, err := tx.ExecContext(ctx, string(body)); err != nil {
			tx.Rollback()
			return version, fmt.Errorf("migrating %s to version %d (%s): %w", path, i+1, names[i], err)
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			tx.Rollback()
			return version, err
		}
		if err := tx.Commit(); err != nil {
			return version, fmt.Errorf("migrating %s to version %d: %w", path, i+1, err)
		}
	}
	return version, nil
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

// Close waits for the batches already queued to be committed and closes the database.
// Further calls return store.ErrClosed. Closing twice is not an error.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.gc.Close()
		err = s.closeDBs()
		if s.unlock != nil {
			s.unlock()
		}
	})
	return err
}

func (s *Store) closeDBs() error {
	s.readStmts.close()
	errs := []error{s.r.Close(), s.ctl.close()}
	if s.ckpt != nil {
		errs = append(errs, s.ckpt.close())
	}
	if s.w != nil { // closed last: closing the last connection checkpoints and deletes the WAL
		if s.wc != nil {
			// The statements belong to the driver connection: close them on it.
			if c, err := s.w.Conn(context.Background()); err == nil {
				_ = c.Raw(func(dc any) error {
					if s.wc.dc == dc {
						s.wc.close()
					}
					return nil
				})
				c.Close()
			}
		}
		errs = append(errs, s.w.Close())
	}
	return errors.Join(errs...)
}

// Write applies b atomically and durably (see the package comment): it returns once the
// transaction holding b has committed. ctx bounds nothing but the start: a batch queued is
// always applied or failed as a whole.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	if s.readOnly {
		return ErrReadOnly
	}
	if fe := s.broken.Load(); fe != nil {
		return fe
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	err := s.gc.Do(b)
	if errors.Is(err, groupcommit.ErrClosed) {
		return store.ErrClosed
	}
	return err
}

// commitGroup applies the batches of group in one transaction. It first applies them all at
// once (applyAll: multi-row statements); if that fails, it rolls back and applies them again
// batch by batch, each in its own SAVEPOINT, so that only the failing batch fails, with an error
// naming its row (savepoints cost a sub-journal write per page, so they are only paid for when a
// batch fails).
func (s *Store) commitGroup(group []*store.Batch) ([]error, error) {
	if s.checkLock != nil {
		if err := s.checkLock(); err != nil {
			fe := &FaultError{Path: s.path, Lost: true, Err: err}
			s.broken.CompareAndSwap(nil, fe)
			return nil, fe
		}
	}
	errs, err := s.tryGroup(group, false)
	if err == errRetryWithSavepoints {
		errs, err = s.tryGroup(group, true)
	}
	if err != nil {
		return nil, s.fault(err)
	}
	for i := range errs {
		errs[i] = s.fault(errs[i])
	}
	return errs, nil
}

// ObserveCommits implements store.CommitObserver: fn is called after each group commit.
func (s *Store) ObserveCommits(fn func(store.Commit)) { groupcommit.ObserveCommits(&s.gc, fn) }

var errRetryWithSavepoints = errors.New("a batch failed: retry the group with savepoints")

// tryGroup applies the batches of group in one transaction on the writer connection, through
// its driver connection and the statements prepared on it (see wconn).
func (s *Store) tryGroup(group []*store.Batch, savepoints bool) (errs []error, err error) {
	ctx := context.Background()
	c, err := s.w.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	defer c.Close()
	err = c.Raw(func(dc any) error {
		w := s.wc
		if w == nil || w.dc != dc {
			// First use, or database/sql replaced the connection: prepare anew.
			w = &wconn{dc: dc, stmts: map[string]driver.Stmt{}}
			s.wc = w
		}
		errs, err = s.applyGroup(w, group, savepoints)
		return err
	})
	return errs, err
}

func (s *Store) applyGroup(w *wconn, group []*store.Batch, savepoints bool) ([]error, error) {
	s.ckpt.beforeTransaction(w)
	if err := w.exec(sqlBegin); err != nil {
		return nil, fmt.Errorf("sqlite store: begin: %w", err)
	}
	rollback := func() { _ = w.exec(sqlRollback) }
	errs := make([]error, len(group))
	seq, ord := s.seq.Load(), s.ord
	if !savepoints {
		if err := applyAll(w, group, &seq, &ord); err != nil {
			rollback()
			return nil, errRetryWithSavepoints
		}
	} else {
		if err := applyEach(w, group, errs, &seq, &ord); err != nil {
			rollback()
			return nil, err
		}
	}
	if err := w.exec(sqlCommit); err != nil {
		rollback() // if the transaction is still open
		return nil, fmt.Errorf("sqlite store: commit: %w", err)
	}
	s.commits.Add(1)
	s.ckpt.committed()
	s.seq.Store(seq)
	s.ord = ord
	return errs, nil
}

// applyEach applies the batches of group one by one, each in its own SAVEPOINT, so that a
// failing batch fails alone (its error in errs) and leaves no trace.
func applyEach(w *wconn, group []*store.Batch, errs []error, seq *uint64, ord *int64) error {
	for i, b := range group {
		if err := w.exec(sqlSavepoint); err != nil {
			return err
		}
		seqBefore, ordBefore := *seq, *ord
		if err := apply(w, b, seq, ord); err != nil {
			errs[i] = err
			*seq, *ord = seqBefore, ordBefore
			if rbErr := w.exec(sqlRollbackTo); rbErr != nil {
				// SQLite rolled the whole transaction back on the batch's error (a full disk, a
				// file size limit, an I/O error), savepoint and all: that error says why, not
				// "no such savepoint".
				return err
			}
		}
		if err := w.exec(sqlRelease); err != nil {
			return err
		}
	}
	return nil
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}
