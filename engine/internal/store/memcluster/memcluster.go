// Package memcluster is an in-memory database that several engines of one process share, with
// the features of the PostgreSQL store that make a cluster: leases (store.Leaser), the claims
// of schedule slots (store.SlotClaimer) and the durable queue of tool calls (store.CallQueue).
// It exists for fast unit tests of the cluster logic (membership, sweep and takeover, hand-over,
// the call queue and its relay) on a stub clock (engine/internal/clock), with no PostgreSQL; it
// passes the same storetest suites as the PostgreSQL store (ExerciseLeaser, ExerciseCallQueue).
//
// A DB holds the runs in any store.Store (New; NewMem uses a memstore) and, beside them, the
// tables PostgreSQL keeps for a cluster: the engines, each run's owner and lease, the queued
// calls and their reports, the claimed slots. Open returns one engine's handle on it, as
// postgres.Open does: attach it (Attach) and it writes as that engine, fenced by the leases.
// Every time it compares is its clock's (the database server's now() in PostgreSQL), so a test
// moves leases and heartbeats forward with the stub clock's Advance.
//
// It is not the memory engine's store: an engine turns leasing on when its store implements
// store.Leaser, so a memory engine (memstore alone) keeps running every run itself. Two engines
// of a test share a DB this way:
//
//	clk := clock.NewStub(t0)
//	db := memcluster.NewMem(clk)
//	a, b := db.Open(), db.Open() // each engine's store; Attach makes each an engine
//	…
//	clk.Advance(lease + time.Second) // a's leases expire unless it beat meanwhile
//
// The handles' SlotClaimer is not found by an engine's scheduler, which looks for it on the
// fire history (store.FireLog, which a handle is not): hand it to the scheduler directly.
//
// What it does not model:
//   - Latency and loss. A wake-up (ListenCalls) is delivered to every listener registered, in
//     the order the changes were made, at once, and never lost; a ListenCalls registers as it
//     starts, so a change made while it is being called may be missed (as on PostgreSQL, whose
//     LISTEN starts asynchronously: wait for a first wake-up). PostgreSQL's notifications arrive
//     later, and a connection that fails loses them (ListenCalls returns its error). Nothing
//     fails by itself: a test cuts one engine off with Fail.
//   - Transactions with other writers of the inner store: the DB's lock orders every change made
//     through its handles, so a write made to the inner store directly is not fenced.
//   - Read-only handles (postgres.OpenReadOnly), control requests (store.Controller), the fire
//     history (store.FireLog, ScheduleAdmitter) and the inner store's optional features (Pruner,
//     AttemptLog, Catalog): a handle has store.Store, Leaser, SlotClaimer and CallQueue, and
//     store.Assets (the inner store's, as the PostgreSQL store has it: the content cache of
//     engines sharing a database) only.
//   - PostgreSQL's types: texts of the queue are cleaned as PostgreSQL's TEXT needs (no NUL,
//     valid UTF-8) like the PostgreSQL store does, but times keep their nanoseconds.
package memcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/clock"
	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memslots"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/memstore"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

var (
	_ store.Store       = (*Store)(nil)
	_ store.Leaser      = (*Store)(nil)
	_ store.SlotClaimer = (*Store)(nil)
	_ store.CallQueue   = (*Store)(nil)
)

// DB is the database the engines share. The zero value is not usable; use New or NewMem. Safe
// for concurrent use.
type DB struct {
	inner store.Store
	clock clock.Clock

	// The slots of scarce resources (resources.go), made on their first use.
	slotsOnce sync.Once
	slotTab   *memslots.Table

	// mu orders every change made through the handles: Writes (with their fence), claims,
	// heartbeats and the queue. Reads of runs go to the inner store without it.
	mu        sync.Mutex
	leases    map[string]*runLease // by run id; no entry: no owner (written by a store not attached)
	engines   map[string]*engineRow
	calls     map[int64]*call
	nonces    map[string]int64
	lastCall  int64
	slots     map[slotKey]string // the engine that claimed each slot
	listeners map[*listener]struct{}
}

// runLease is a run's owner and lease (the columns owner and lease_until of PostgreSQL's
// workflows table). until is zero when no engine holds the run.
type runLease struct {
	owner string
	until time.Time
}

type engineRow struct {
	info store.EngineInfo // Live is computed by Engines
}

type slotKey struct {
	schedule string
	slot     int64
}

// New returns a database keeping its runs in inner (which must be empty, or hold runs no engine
// owns yet) and reading the time from c. Close closes inner.
func New(inner store.Store, c clock.Clock) *DB {
	return &DB{
		inner:     inner,
		clock:     c,
		leases:    map[string]*runLease{},
		engines:   map[string]*engineRow{},
		calls:     map[int64]*call{},
		nonces:    map[string]int64{},
		slots:     map[slotKey]string{},
		listeners: map[*listener]struct{}{},
	}
}

// NewMem returns a database on a new memstore.
func NewMem(c clock.Clock) *DB { return New(memstore.New(), c) }

// Close closes the inner store; the handles fail with its errors (store.ErrClosed) afterwards.
func (db *DB) Close() error { return db.inner.Close() }

// Open returns a new handle on db, not attached: an engine's store (postgres.Open).
func (db *DB) Open() *Store {
	return &Store{db: db, done: make(chan struct{}), cut: make(chan struct{})}
}

func (db *DB) now() time.Time { return db.clock.Now() }

// live reports whether l is a lease some engine holds at now: until is inclusive, as
// PostgreSQL's lease_until >= now().
func (l *runLease) live(now time.Time) bool {
	return l != nil && !l.until.IsZero() && !l.until.Before(now)
}

// Store is one engine's handle on a DB: store.Store, Leaser, SlotClaimer and CallQueue. Close
// closes the handle only (the DB and its inner store stay open for the other handles).
type Store struct {
	db     *DB
	lease  atomic.Pointer[attachment] // set by Attach, cleared by Detach
	closed atomic.Bool
	once   sync.Once
	done   chan struct{} // closed by Close: ends ListenCalls

	failMu sync.Mutex
	fail   error         // Fail's error, nil when the handle works
	cut    chan struct{} // closed by Fail(err != nil): ends ListenCalls
}

// Fail makes every method of the handle return err (Close aside) until Fail(nil), and its
// ListenCalls return err: the engine lost the database (a network cut, a server that does not
// answer) while the others go on. Wrap store.ErrConnectionLost in err for a write whose outcome
// is unknown. Nothing the handle does while it fails reaches the database.
func (s *Store) Fail(err error) {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	if err != nil && s.fail == nil {
		close(s.cut)
	}
	if err == nil && s.fail != nil {
		s.cut = make(chan struct{})
	}
	s.fail = err
}

// failing returns the channel closed when the handle fails, and Fail's error.
func (s *Store) failing() (chan struct{}, error) {
	s.failMu.Lock()
	defer s.failMu.Unlock()
	return s.cut, s.fail
}

// attachment is the engine a handle acts as.
type attachment struct {
	id    string
	lease time.Duration
}

func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	_, err := s.failing()
	return err
}

// attached returns the engine the handle acts as, or an error when it is closed or not attached.
func (s *Store) attached() (*attachment, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	a := s.lease.Load()
	if a == nil {
		return nil, errors.New("store: not attached (call Attach first)")
	}
	return a, nil
}

// Close closes the handle: further calls return store.ErrClosed, and its ListenCalls return.
// It does not detach the engine (as the PostgreSQL store's Close does not): its leases expire.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.once.Do(func() { close(s.done) })
	return nil
}

// Write applies b to the inner store. For an attached handle it is fenced as the PostgreSQL
// store's: a batch that updates a run, or writes steps, workflow-scoped idempotency entries,
// events or attempts of a run, that another engine owns (live, finished or expired) fails whole with
// store.ErrLeaseLost (file records and cache entries too); the runs it creates, and those it updates to an unfinished status, get
// this engine as their owner with a new lease; a terminal update releases the lease. Whoever
// writes, a run that b ends cancels its calls still queued or claimed.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	a := s.lease.Load()
	if a != nil {
		if err := db.fence(a.id, b, now); err != nil {
			return err
		}
	}
	if err := db.inner.Write(ctx, b); err != nil {
		return err
	}
	if a != nil {
		for i := range b.CreateRuns {
			db.leases[b.CreateRuns[i].ID] = &runLease{owner: a.id, until: now.Add(a.lease)}
		}
	}
	for i := range b.RunUpdates {
		u := &b.RunUpdates[i]
		if u.Status.Terminal() {
			db.cancelRunCalls(u.ID, now)
		}
		if a == nil {
			continue
		}
		l := db.leases[u.ID]
		if l == nil {
			l = &runLease{}
			db.leases[u.ID] = l
		}
		if unfinished(u.Status) {
			l.owner, l.until = a.id, now.Add(a.lease)
		} else {
			l.until = time.Time{} // the owner stays, for the record
		}
	}
	return nil
}

// fence returns store.ErrLeaseLost when b writes to a run (not one it creates) that an engine
// other than me owns, whether its lease is live, released or expired (the PostgreSQL store's
// sqlFence): a run changes owner only through ClaimRun and Acquire.
func (db *DB) fence(me string, b *store.Batch, now time.Time) error {
	created := map[string]bool{}
	for i := range b.CreateRuns {
		created[b.CreateRuns[i].ID] = true
	}
	check := func(what, id string) error {
		if id == "" || created[id] {
			return nil
		}
		if l := db.leases[id]; l != nil && l.owner != "" && l.owner != me {
			return fmt.Errorf("%s of run %s: %w", what, id, store.ErrLeaseLost)
		}
		return nil
	}
	for i := range b.RunUpdates {
		if err := check("updating", b.RunUpdates[i].ID); err != nil {
			return err
		}
	}
	for i := range b.Steps {
		if err := check("writing step "+b.Steps[i].Key, b.Steps[i].RunID); err != nil {
			return err
		}
	}
	for i := range b.Idempotency {
		if err := check("writing an idempotency entry", b.Idempotency[i].RunID); err != nil {
			return err
		}
	}
	for i := range b.Events {
		if err := check("appending an event", b.Events[i].RunID); err != nil {
			return err
		}
	}
	for i := range b.Attempts {
		if err := check("writing an attempt", b.Attempts[i].RunID); err != nil {
			return err
		}
	}
	for i := range b.Files {
		if err := check("writing a file record", b.Files[i].RunID); err != nil {
			return err
		}
	}
	for i := range b.CacheEntries {
		if err := check("writing a cache entry", b.CacheEntries[i].RunID); err != nil {
			return err
		}
	}
	return nil
}

// unfinished reports whether a run of status s can be orchestrated: pending, running, waiting
// or paused (PostgreSQL's sqlUnfinished).
func unfinished(s run.Status) bool {
	switch s {
	case run.StatusPending, run.StatusRunning, run.StatusWaiting, run.StatusPaused:
		return true
	}
	return false
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	if err := s.check(); err != nil {
		return store.Run{}, err
	}
	return s.db.inner.GetRun(ctx, id)
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.db.inner.ListRuns(ctx, f)
}

// ListSteps implements store.Store.
func (s *Store) ListSteps(ctx context.Context, runID string) ([]store.Step, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.db.inner.ListSteps(ctx, runID)
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]run.Event, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.db.inner.ListEvents(ctx, f)
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context) (uint64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	return s.db.inner.LastSeq(ctx)
}

// GetIdempotency implements store.Store.
func (s *Store) GetIdempotency(ctx context.Context, scope, runID, key string, now time.Time) (store.IdempotencyEntry, bool, error) {
	if err := s.check(); err != nil {
		return store.IdempotencyEntry{}, false, err
	}
	return s.db.inner.GetIdempotency(ctx, scope, runID, key, now)
}

// PurgeExpired implements store.Store.
func (s *Store) PurgeExpired(ctx context.Context, now time.Time) (int, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	return s.db.inner.PurgeExpired(ctx, now)
}

// MarkInterrupted implements store.Store: it interrupts every unfinished run of the inner store,
// whoever holds it. An engine on a shared database does not call it (it claims expired runs).
func (s *Store) MarkInterrupted(ctx context.Context, now time.Time, in store.Interruption) ([]string, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	return s.db.inner.MarkInterrupted(ctx, now, in)
}

// PutArtefact implements store.ArtefactStore.
func (s *Store) PutArtefact(ctx context.Context, data []byte) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	return s.db.inner.PutArtefact(ctx, data)
}

// GetArtefact implements store.ArtefactStore.
func (s *Store) GetArtefact(ctx context.Context, sha256 string) ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.db.inner.GetArtefact(ctx, sha256)
}
