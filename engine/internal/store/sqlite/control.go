package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
)

// ErrReadOnly is returned by the writing methods of a store opened with OpenReadOnly.
var ErrReadOnly = errors.New("store: the database is open read-only (another process owns it)")

// The control_requests table carries control requests between processes (store.Controller).
var _ store.Controller = (*Store)(nil)

// ctlConn is the connection a read-only store files control requests through, opened on first
// use: the only writes such a store makes, each one row in its own short transaction.
type ctlConn struct {
	mu sync.Mutex
	db *sql.DB
}

func (c *ctlConn) get(path string) (*sql.DB, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		db, err := openWriting(path)
		if err != nil {
			return nil, err
		}
		c.db = db
	}
	return c.db, nil
}

func (c *ctlConn) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.db == nil {
		return nil
	}
	err := c.db.Close()
	c.db = nil
	return err
}

// RequestControl files a request for the owner and returns its id. It works on a read-only
// store too (it is how such a store acts on a run).
func (s *Store) RequestControl(ctx context.Context, r store.ControlRequest) (int64, error) {
	if err := s.check(); err != nil {
		return 0, err
	}
	if !store.ValidControlAction(r.Action) {
		return 0, fmt.Errorf("control request: unknown action %q (approve, cancel, pause or unpause)", r.Action)
	}
	db := s.w
	if s.readOnly {
		var err error
		if db, err = s.ctl.get(s.path); err != nil {
			return 0, err
		}
	}
	res, err := db.ExecContext(ctx, `INSERT INTO control_requests (run_id, action, step_key, approved, reason, by, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?)`, r.RunID, r.Action, r.StepKey, r.Approved, r.Reason, r.By, nanos(r.CreatedAt))
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// ControlAnswer returns the answer to request id (Handled false while pending).
func (s *Store) ControlAnswer(ctx context.Context, id int64) (store.ControlAnswer, error) {
	if err := s.check(); err != nil {
		return store.ControlAnswer{}, err
	}
	var a store.ControlAnswer
	var handled int64
	err := s.r.QueryRowContext(ctx, `SELECT handled_at, error_code, error FROM control_requests WHERE id = ?`, id).
		Scan(&handled, &a.ErrorCode, &a.Error)
	if err != nil {
		return a, err
	}
	a.Handled = handled != 0
	return a, nil
}

// PendingControl returns the requests not answered yet, oldest first.
func (s *Store) PendingControl(ctx context.Context) ([]store.ControlRequest, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, run_id, action, step_key, approved, reason, by, created_at
		FROM control_requests WHERE handled_at = 0 ORDER BY id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.ControlRequest
	for rows.Next() {
		var r store.ControlRequest
		var created int64
		if err := rows.Scan(&r.ID, &r.RunID, &r.Action, &r.StepKey, &r.Approved, &r.Reason, &r.By, &created); err != nil {
			return nil, err
		}
		r.CreatedAt = sqlrow.FromNanos(created)
		out = append(out, r)
	}
	return out, rows.Err()
}

// AnswerControl records the outcome of request id (code and message "" for success).
func (s *Store) AnswerControl(ctx context.Context, id int64, now time.Time, code, message string) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	_, err := s.w.ExecContext(ctx, `UPDATE control_requests SET handled_at = ?, error_code = ?, error = ? WHERE id = ?`,
		max(nanos(now), 1), code, message, id)
	return err
}
