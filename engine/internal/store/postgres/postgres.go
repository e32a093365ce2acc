// Package postgres is the PostgreSQL implementation of store.Store (docs/operations/cluster.md), on
// jackc/pgx v5 and its connection pool: the same records as the SQLite store, in a database
// named by a postgres:// or postgresql:// URL, with numbered embedded migrations.
//
// Migrations: the files of migrations/ (NNNN_name.sql) are applied in order, each recorded in
// the table schema_migrations, all in one transaction that first takes a transaction-level
// advisory lock (migrationLock): engines that start at once on a new database migrate it once,
// the others wait and then find it migrated. A database migrated by a newer dcc-flow is refused
// with a *SchemaError.
//
// Writes: Write queues its batch on a group committer (store/groupcommit, the scheme the SQLite
// store uses): the batches queued at one moment are applied in one transaction, with one
// statement per table for the steps, idempotency entries and events (unnest of arrays), the
// statements pipelined in one round trip. When the group fails (a duplicate run id, an unknown
// run), it is applied again batch by batch, each in a SAVEPOINT, so that only the failing batch
// fails. Reads go through the pool and see committed data only.
//
// Event sequence numbers: PostgreSQL sequences hand out numbers at nextval time, not at commit,
// so a transaction that drew seq 5 may commit after one that drew 6, and a reader following
// events by seq would skip 5. So seq is not a sequence: the writer reserves its numbers with
// UPDATE store_counters SET value = value + n … RETURNING, as the last statement before COMMIT.
// The row lock that UPDATE takes is held until the transaction ends, so a second transaction
// appending events (of this engine or of another engine on the same database) waits for the
// first to commit and then numbers after it: events commit in seq order, and a reader that has
// seen seq N will never see a smaller one appear. The lock is held for the time of one commit,
// and group commit appends the events of many batches under one.
//
// Durability is PostgreSQL's: Write returns after COMMIT, durable per the server's
// synchronous_commit (on by default).
//
// Many engines per database: no lock keeps a second read-write engine out. Each read-write
// engine attaches (Attach, store.Leaser): it registers in the engines table and orchestrates
// each unfinished run under a lease in the run's row (owner, lease_until), which it renews with
// its heartbeat; another engine takes a run over once its lease expired (ClaimRun). See
// lease.go and docs/operations/cluster.md.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/groupcommit"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Advisory lock keys (pg_advisory_lock takes a bigint; these spell "dccflow" + a digit).
const (
	migrationLock int64 = 0x6463_6366_6c6f_7701 // held by the migrating transaction
)

// maxGroup bounds how many batches one transaction applies.
const maxGroup = 512

// ErrReadOnly is returned by the writing methods of a store opened with OpenReadOnly.
var ErrReadOnly = errors.New("store: the database is open read-only")

// Store is a store.Store on a PostgreSQL database. Create it with Open; Close it when done.
type Store struct {
	name string // the URL without its password, for messages
	pool *pgxpool.Pool
	// lockPool holds the schedules' admission locks (admit.go); nil on a read-only store.
	lockPool *pgxpool.Pool
	lockWait time.Duration // LockSchedule's wait; 0 = lockWait (admit.go)
	// writeWait bounds one group commit; 0 = writeTimeout (write.go; tests set it).
	writeWait time.Duration
	// broken, once set, is returned by every later write.
	broken   atomic.Pointer[FaultError]
	lease    atomic.Pointer[leaseState] // set by Attach (lease.go)
	readOnly bool
	closed   atomic.Bool
	// refusedFires counts the refused fires recorded per schedule, to trim them every
	// RefusedFiresSlack (features.go).
	refusedFires store.RefusedFiresCounter
	gc           groupcommit.Committer[*store.Batch]
	commits      atomic.Int64
	retries      atomic.Int64 // group commits tried again (commitGroup)
	resets       atomic.Int64 // pool resets after a lost connection (dropConns)
}

var (
	_ store.Store            = (*Store)(nil)
	_ store.Pruner           = (*Store)(nil)
	_ store.Controller       = (*Store)(nil)
	_ store.FireLog          = (*Store)(nil)
	_ store.DeliveryFinder   = (*Store)(nil)
	_ store.ReplayFinder     = (*Store)(nil)
	_ store.Catalog          = (*Store)(nil)
	_ store.Leaser           = (*Store)(nil)
	_ store.SlotClaimer      = (*Store)(nil)
	_ store.ScheduleAdmitter = (*Store)(nil)
	_ store.CommitObserver   = (*Store)(nil)
)

// libpqKeywordRe matches the start of a libpq keyword/value connection string ("host=db
// dbname=flow password=…"), which Open does not take: see IsKeywordString.
// Any word followed by "=" is taken as one: libpq has dozens of keywords (sslpassword,
// gssencmode, channel_binding, …) and adds more.
var libpqKeywordRe = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)

// IsKeywordString reports whether db looks like a libpq keyword/value connection string
// ("host=db.studio dbname=flow …"): it starts with a word and "=". Such a string is
// refused rather than taken as a SQLite file name (with the password in the name); a file really
// named so is written with a folder, as "./host=x".
func IsKeywordString(db string) bool { return libpqKeywordRe.MatchString(db) }

// IsURL reports whether db names a PostgreSQL database: a postgres:// or postgresql:// URL.
func IsURL(db string) bool {
	l := strings.ToLower(db)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// Redact returns the URL with its password replaced by "xxxxx", for messages and logs.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "postgresql://(an unparsable URL)"
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// SchemaError is returned by Open for a database whose schema is newer than this dcc-flow.
type SchemaError struct {
	DB      string // the redacted URL
	Found   int
	Current int
}

func (e *SchemaError) Error() string {
	return fmt.Sprintf("database %s has schema version %d, newer than this dcc-flow (%d); upgrade dcc-flow to open it",
		e.DB, e.Found, e.Current)
}

// Open connects to the database at rawURL and migrates it to the current schema. Other engines
// may have it open too: an engine attaches (Attach) before it writes runs. It does not recover
// runs: the engine claims the runs whose lease expired (ClaimRun).
func Open(ctx context.Context, rawURL string) (*Store, error) {
	return open(ctx, rawURL, false)
}

// OpenReadOnly connects to a database beside the engines that run it: every read works, Write
// and the other writing methods return ErrReadOnly, and RequestControl asks the engine that
// runs a run to act on it. A database of another schema version is refused (a read-write
// engine migrates it).
func OpenReadOnly(ctx context.Context, rawURL string) (*Store, error) {
	return open(ctx, rawURL, true)
}

// open opens the store.
func open(ctx context.Context, rawURL string, readOnly bool) (*Store, error) {
	name := Redact(rawURL)
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", name, redactErr(err, rawURL))
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "dcc-flow"
	}
	if cfg.MaxConns < 8 && !strings.Contains(rawURL, "pool_max_conns=") {
		cfg.MaxConns = 8 // the writer, the heartbeat, readers beside them
	}
	lockCfg := cfg.Copy()
	lockCfg.MaxConns, lockCfg.MinConns = lockPoolConns, 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", name, redactErr(err, rawURL))
	}
	s := &Store{name: name, pool: pool, readOnly: readOnly}
	if !readOnly { // connects on first use
		if s.lockPool, err = pgxpool.NewWithConfig(ctx, lockCfg); err != nil {
			pool.Close()
			return nil, fmt.Errorf("database %s: %w", name, redactErr(err, rawURL))
		}
	}
	s.gc.Max = maxGroup
	s.gc.Commit = s.commitGroup
	fail := func(err error) (*Store, error) {
		pool.Close()
		if s.lockPool != nil {
			s.lockPool.Close()
		}
		if fe := AsFault(name, err); fe != nil {
			return nil, fe
		}
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		return fail(fmt.Errorf("connecting to %s: %w", name, redactErr(err, rawURL)))
	}
	if readOnly {
		version, err := schemaVersion(ctx, pool)
		if err != nil {
			return fail(err)
		}
		if current := SchemaVersion(); version != current {
			if version > current {
				return fail(&SchemaError{DB: name, Found: version, Current: current})
			}
			return fail(fmt.Errorf("database %s has schema version %d, older than this dcc-flow (%d): "+
				"open it once for writing to migrate it", name, version, current))
		}
		return s, nil
	}
	if err := migrate(ctx, pool, name); err != nil {
		return fail(err)
	}
	return s, nil
}

// redactErr returns err with rawURL's password taken out of its text (pgx quotes the
// connection string in some of its errors).
func redactErr(err error, rawURL string) error {
	u, perr := url.Parse(rawURL)
	if perr != nil {
		// Neither pgx's error nor url.Parse's may be shown: both quote a part of the text, which
		// may be the password ("postgresql:// host=… password=…").
		return errors.New("it is not a valid URL; write it as postgresql://user@host:5432/dbname, " +
			"percent-encoding spaces and other special characters (the password is best left to PGPASSWORD or ~/.pgpass)")
	}
	pw, has := u.User.Password()
	if !has || pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}

// migrations returns the embedded migration file names, in order.
func migrations() []string {
	entries, _ := migrationFS.ReadDir("migrations")
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// SchemaVersion returns the schema version this package writes.
func SchemaVersion() int { return len(migrations()) }

const sqlMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    BIGINT PRIMARY KEY,
	name       TEXT NOT NULL,
	applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`

// schemaVersion returns the highest migration applied, 0 for a database without them.
func schemaVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass('schema_migrations') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v)
	return v, err
}

// migrate applies the migrations the database lacks, in one transaction under migrationLock.
func migrate(ctx context.Context, pool *pgxpool.Pool, name string) error {
	names := migrations()
	current := len(names)
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrating %s: %w", name, err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("migrating %s: %w", name, err)
	}
	if _, err := tx.Exec(ctx, sqlMigrationsTable); err != nil {
		return fmt.Errorf("migrating %s: %w", name, err)
	}
	version, err := schemaVersion(ctx, tx)
	if err != nil {
		return fmt.Errorf("migrating %s: %w", name, err)
	}
	if version > current {
		return &SchemaError{DB: name, Found: version, Current: current}
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
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return fmt.Errorf("migrating %s to version %d (%s): %w", name, i+1, names[i], err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, i+1, names[i]); err != nil {
			return fmt.Errorf("migrating %s to version %d: %w", name, i+1, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrating %s: %w", name, err)
	}
	return nil
}

// Migrate migrates the database at rawURL to the current schema without opening a store (test
// templates, an operator's upgrade step).
func Migrate(ctx context.Context, rawURL string) error {
	pool, err := pgxpool.New(ctx, rawURL)
	if err != nil {
		return redactErr(err, rawURL)
	}
	defer pool.Close()
	return migrate(ctx, pool, Redact(rawURL))
}

// Name returns the database's URL without its password.
func (s *Store) Name() string { return s.name }

// ReadOnly reports whether the store was opened with OpenReadOnly.
func (s *Store) ReadOnly() bool { return s.readOnly }

// Commits returns how many write transactions were committed (for tests of group commit).
func (s *Store) Commits() int64 { return s.commits.Load() }

// Close waits for the batches already queued to be committed, releases the database and closes
// the connections. Further calls return store.ErrClosed. Closing twice is not an error.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.gc.Close()
	s.pool.Close()
	if s.lockPool != nil {
		s.lockPool.Close()
	}
	return nil
}

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// checkWrite is check for the methods that write: a read-only store refuses them.
func (s *Store) checkWrite() error {
	if err := s.check(); err != nil {
		return err
	}
	if s.readOnly {
		return ErrReadOnly
	}
	if fe := s.broken.Load(); fe != nil {
		return fe
	}
	return nil
}
