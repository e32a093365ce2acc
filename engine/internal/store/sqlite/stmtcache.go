package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// maxCachedStmts bounds a stmtCache: past it, queries run unprepared (a query text with its
// LIMIT written in, say, has as many forms as limits asked for).
const maxCachedStmts = 64

// stmtCache holds read statements prepared once by query text (database/sql prepares each on
// the connections that run it, as they do). The zero value is ready; close closes them.
type stmtCache struct {
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	closed bool
}

// query runs q with args on db, through its prepared statement when it has one or can make one.
func (c *stmtCache) query(ctx context.Context, db *sql.DB, q string, args ...any) (*sql.Rows, error) {
	if st := c.stmt(ctx, db, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return db.QueryContext(ctx, q, args...)
}

// stmt returns q's statement, preparing it when there is room; nil when there is none or the
// prepare failed (the query then runs unprepared, and reports the error itself).
func (c *stmtCache) stmt(ctx context.Context, db *sql.DB, q string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.stmts[q]; ok {
		return st
	}
	if c.closed || len(c.stmts) >= maxCachedStmts {
		return nil
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	if c.stmts == nil {
		c.stmts = map[string]*sql.Stmt{}
	}
	c.stmts[q] = st
	return st
}

func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, st := range c.stmts {
		_ = st.Close()
	}
	c.stmts = nil
}
