package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// openTest opens the database at url as a store of this package, closed when the test ends.
func openTest(t *testing.T, url string) *Store {
	t.Helper()
	s, err := open(context.Background(), url, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A LockSchedule that waits longer than its bound for another engine's admission fails with
// PostgreSQL's lock timeout (the fire then fails, and is retried), not a storage fault, and its
// connection goes back to the lock pool usable: once the holder released the lock, it is taken.
// A holder's connection that dies releases the lock with its session.
func TestLockScheduleTimesOutAndRecovers(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	a := openTest(t, url)
	b := openTest(t, url)
	b.lockWait = 200 * time.Millisecond
	unlock, err := a.LockSchedule(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	for range lockPoolConns + 1 { // more than the pool holds: each failure returned its connection
		start := time.Now()
		_, err = b.LockSchedule(ctx, "nightly")
		if err == nil || !strings.Contains(err.Error(), "lock timeout") || !strings.Contains(err.Error(), "schedule nightly") || AsFault("", err) != nil {
			t.Fatalf("a lock held by another store: %v; want the lock timeout, naming the schedule, not a fault", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("the timeout of 200 ms took %s", d)
		}
	}
	unlock()
	unlockB, err := b.LockSchedule(ctx, "nightly")
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	// The holder's session dies (its connection is terminated by the server): a waiter gets it.
	var pid int
	conn, err := b.lockPool.Acquire(ctx) // another connection of b's lock pool
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := conn.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	a.lockWait = 5 * time.Second
	unlockA, err := a.LockSchedule(ctx, "nightly")
	if err != nil {
		t.Fatalf("after the holder's session died: %v", err)
	}
	unlockA()
	unlockB() // its ROLLBACK fails on the dead connection, which the pool then drops
	again, err := b.LockSchedule(ctx, "nightly")
	if err != nil {
		t.Fatalf("b after its dead connection: %v", err)
	}
	again()
}

// A wait under a millisecond is a lock_timeout of 1 ms, not 0 (which PostgreSQL takes as no
// timeout at all): the admission fails with the lock timeout instead of waiting for ever.
func TestLockScheduleWaitUnderAMillisecondTimesOut(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	a := openTest(t, url)
	b := openTest(t, url)
	unlock, err := a.LockSchedule(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	b.lockWait = 500 * time.Microsecond
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := b.LockSchedule(wctx, "nightly"); err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("a wait of 0.5 ms for a held lock: %v; want the lock timeout", err)
	}
}

// After a server restart the idle connections of the lock pool are dead: the first admission
// that meets one fails (a storage fault) and resets the lock pool, so the next admissions
// connect anew instead of each failing on another dead connection.
func TestLockScheduleResetsTheLockPoolOnALostConnection(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openTest(t, url)
	var unlocks []func()
	for i := range lockPoolConns { // every connection of the lock pool, then idle
		unlock, err := s.LockSchedule(ctx, fmt.Sprintf("s%d", i))
		if err != nil {
			t.Fatal(err)
		}
		unlocks = append(unlocks, unlock)
	}
	for _, unlock := range unlocks {
		unlock()
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()) x`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n < lockPoolConns {
		t.Fatalf("terminated %d sessions; want the %d of the lock pool at least", n, lockPoolConns)
	}
	time.Sleep(20 * time.Millisecond) // the FATAL message is on the pooled sockets
	failed := 0
	for range lockPoolConns {
		unlock, err := s.LockSchedule(ctx, "nightly")
		if err != nil {
			if AsFault("", err) == nil {
				t.Fatalf("on a dead connection: %v; want a storage fault", err)
			}
			failed++
			continue
		}
		unlock()
	}
	if failed > 1 {
		t.Fatalf("%d of %d admissions failed after the restart; want at most the first", failed, lockPoolConns)
	}
}
