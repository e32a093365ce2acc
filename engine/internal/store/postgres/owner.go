package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// ownerCheckEvery is how often a read-write store makes sure it still holds the owner lock, in
// nanoseconds (tests change it).
var ownerCheckEvery atomic.Int64

func init() { ownerCheckEvery.Store(int64(2 * time.Second)) }

// ownerWatch keeps the owner lock of a read-write store. The lock lives in one server session:
// when that connection is lost (a server restart, a network cut) the lock goes with it. The
// watcher pings the session every ownerCheckEvery; once it fails it reconnects and takes the lock
// again. If another engine took it meanwhile, this store has lost the database: every later write
// fails with a *FaultError (Lost), code storage, rather than writing beside the new owner (which
// has recovered this engine's runs as interrupted).
type ownerWatch struct {
	s    *Store
	cfg  *pgx.ConnConfig
	stop chan struct{}
	done sync.WaitGroup

	mu   sync.Mutex
	conn *pgx.Conn // holds the lock; nil while it is being taken again
}

func (s *Store) watchOwner(cfg *pgx.ConnConfig, conn *pgx.Conn) {
	w := &ownerWatch{s: s, cfg: cfg, conn: conn, stop: make(chan struct{})}
	s.ownerW = w
	w.done.Add(1)
	go w.run()
}

func (w *ownerWatch) run() {
	defer w.done.Done()
	t := time.NewTicker(time.Duration(ownerCheckEvery.Load()))
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		if lost := w.check(); lost {
			return
		}
	}
}

// check pings the lock's session, takes the lock again on a new one when it is gone, and
// reports whether the lock is lost for good.
func (w *ownerWatch) check() (lost bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != nil {
		if err := w.conn.Ping(ctx); err == nil {
			return false
		}
		w.conn.Close(ctx)
		w.conn = nil
	}
	conn, err := pgx.ConnectConfig(ctx, w.cfg)
	if err != nil {
		return false // the server is still away: writes fail meanwhile; try again later
	}
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, ownerLock).Scan(&got); err != nil {
		conn.Close(ctx)
		return false
	}
	if !got {
		holder := lockHolder(ctx, conn)
		conn.Close(ctx)
		if holder == "" {
			holder = "another engine"
		}
		w.s.broken.CompareAndSwap(nil, &FaultError{DB: w.s.name, Lost: true,
			Err: fmt.Errorf("its connection to the server was lost, and %s took the database meanwhile", holder)})
		return true
	}
	w.conn = conn
	return false
}

// close stops the watcher and ends the lock's session (its advisory lock goes with it).
func (w *ownerWatch) close() error {
	close(w.stop)
	w.done.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		return nil
	}
	err := w.conn.Close(context.Background())
	w.conn = nil
	return err
}
