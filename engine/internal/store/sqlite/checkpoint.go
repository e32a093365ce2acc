package sqlite

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"
)

// Checkpoints: the writer connection runs with wal_autocheckpoint off, and a checkpointer
// goroutine copies the WAL into the database file on a connection of its own, so that the
// copy and its two fsyncs (most of a checkpoint's cost: measured 40–60 µs per step when the
// writer did it, every 1,000 pages) are paid beside the writes, not inside one of them.
//
// A checkpoint running beside the writer (PASSIVE) never blocks it, but it cannot let SQLite
// start the WAL over from its beginning: that happens when a write transaction begins with
// every frame of the WAL copied, and under steady writes new frames always arrive while the
// checkpointer copies. So once the WAL holds restartFrames frames or more, the checkpointer
// asks the leader to finish the job: before its next transaction, the leader runs one more
// PASSIVE checkpoint itself, which copies only what was written since the checkpointer's
// (little), and the transaction that follows restarts the WAL (unless a reader still holds an
// old snapshot; then the request is made again after the next checkpoint).
const (
	// checkpointEvery is how many commits wake the checkpointer.
	checkpointEvery = 128
	// checkpointIdle bounds how long a store that stopped writing keeps its last commits in
	// the WAL before they are copied into the database file.
	checkpointIdle = time.Second
	// restartFrames is the WAL size (in pages) at which the leader restarts the WAL: 4,096 pages
	// of 4 KiB, 16 MiB.
	restartFrames = 4096
	// walSizeLimit is what a WAL file is cut back to when it restarts (journal_size_limit):
	// a WAL that grew while a reader held an old snapshot does not keep its size.
	walSizeLimit = 64 << 20
)

// checkpointer runs the checkpoints of one store opened for writing (see above).
type checkpointer struct {
	db      *sql.DB       // its own connection to the database
	kick    chan struct{} // wakes the loop; capacity 1
	stop    chan struct{}
	done    chan struct{}
	commits atomic.Int64 // commits since the last wake-up
	restart atomic.Bool  // the leader is asked to checkpoint before its next transaction
	passes  atomic.Int64 // checkpoints the checkpointer completed (for tests)
	// restarts counts the passes that found the WAL holding fewer frames than the pass before:
	// it was started over in between (for tests). lastFrames is the previous pass's count,
	// used by the checkpointer's goroutine only.
	restarts   atomic.Int64
	lastFrames int64
	catchUps   atomic.Int64 // checkpoints the leader ran to restart the WAL (for tests)
}

func startCheckpointer(path string) (*checkpointer, error) {
	db, err := openWriting(path)
	if err != nil {
		return nil, err
	}
	c := &checkpointer{db: db, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.loop()
	return c, nil
}

// committed is called by the leader after each commit.
func (c *checkpointer) committed() {
	if c.commits.Add(1) >= checkpointEvery {
		c.wake()
	}
}

func (c *checkpointer) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop() {
	defer close(c.done)
	idle := time.NewTimer(checkpointIdle)
	defer idle.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		case <-idle.C:
			if c.commits.Load() == 0 {
				idle.Reset(checkpointIdle)
				continue
			}
		}
		c.commits.Store(0)
		c.pass()
		idle.Reset(checkpointIdle)
	}
}

// pass runs one PASSIVE checkpoint and asks the leader to restart a WAL grown past
// restartFrames.
func (c *checkpointer) pass() {
	var busy, frames, copied int64
	err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &copied)
	if err != nil {
		return // the next pass tries again; a failing database fails its writes too
	}
	c.passes.Add(1)
	if frames < c.lastFrames {
		c.restarts.Add(1)
	}
	c.lastFrames = frames
	if frames >= restartFrames {
		c.restart.Store(true)
	}
}

// close stops the loop and closes the connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}

// beforeTransaction is called by the leader before it begins a transaction on w: if the
// checkpointer asked for it, the leader checkpoints what the checkpointer has not copied
// yet, so that its transaction restarts the WAL. An error is left for the next attempt.
func (c *checkpointer) beforeTransaction(w *wconn) {
	if !c.restart.CompareAndSwap(true, false) {
		return
	}
	if w.exec("PRAGMA wal_checkpoint(PASSIVE)") == nil {
		c.catchUps.Add(1)
	}
}
