package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dcc-flow/dcc-flow/engine/run"
)

// FaultError is a storage fault: the database could not be reached, read or written because of
// the server or the network, not because of what was asked (the server is down or restarting,
// the connection was lost, its disk is full, it reports an I/O error or corrupted data). Its
// code is storage (run.CodeOf).
type FaultError struct {
	DB   string // the redacted URL
	Lost bool   // the owner lock was lost to another engine: this store writes nothing more
	Err  error
}

func (e *FaultError) Error() string {
	if e.Lost {
		return fmt.Sprintf("this engine no longer owns database %s, so it writes nothing more to it: %v; "+
			"stop this engine (its runs are the other engine's now, interrupted)", e.DB, e.Err)
	}
	return fmt.Sprintf("database %s: %v; check that the PostgreSQL server is running and reachable and that its disk "+
		"has room, then try again", e.DB, e.Err)
}

func (e *FaultError) Unwrap() error { return e.Err }

// ErrorCode is run.CodeStorage (see run.CodeOf).
func (e *FaultError) ErrorCode() string { return run.CodeStorage }

// AsFault returns err as a *FaultError of the database db when it is a storage fault, else nil:
// a connection that failed or was lost, and the server errors of SQLSTATE class 08 (connection
// exception), 53 (insufficient resources: disk full, out of memory, too many connections), 57P01
// to 57P03 (the server shutting down or starting), 58 (system error: I/O) and XX001/XX002
// (corrupted data or index).
func AsFault(db string, err error) *FaultError {
	if err == nil {
		return nil
	}
	var fe *FaultError
	if errors.As(err, &fe) {
		return fe
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil // the caller gave up (a write that times out is made a fault by commitGroup)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		c := pe.Code
		if strings.HasPrefix(c, "08") || strings.HasPrefix(c, "53") || strings.HasPrefix(c, "58") ||
			c == "57P01" || c == "57P02" || c == "57P03" || c == "XX001" || c == "XX002" {
			return &FaultError{DB: db, Err: err}
		}
		return nil
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "conn closed") {
		return &FaultError{DB: db, Err: err}
	}
	return nil
}

// fault returns err, an error of a connection of the main pool, as a *FaultError when it is a
// storage fault (after dropConns).
func (s *Store) fault(err error) error { return s.faultOf(s.pool, err) }

// faultOf is fault for an error of a connection of pool (the main pool or the lock pool).
func (s *Store) faultOf(pool *pgxpool.Pool, err error) error {
	if fe := AsFault(s.name, err); fe != nil {
		s.dropConnsOf(pool, err)
		return fe
	}
	return err
}

// dropConns closes every connection of the main pool when err, an error of one of them, is a
// lost connection (dropConnsOf).
func (s *Store) dropConns(err error) { s.dropConnsOf(s.pool, err) }

// dropConnsOf closes every connection of pool (pgxpool's Reset; those in use when they are
// released) when err, an error of one of them, is a lost connection: after a server restart
// every idle connection of the pool is dead, and each would otherwise fail one more statement
// (a heartbeat, a claim's renewal, a schedule's admission lock) before the pool replaced it;
// pgxpool pings only the connections idle for over a second. The next statements connect anew.
// The other pool learns it from its own first lost connection.
func (s *Store) dropConnsOf(pool *pgxpool.Pool, err error) {
	if connectionLost(err) {
		s.resets.Add(1)
		pool.Reset()
	}
}

// Resets returns how many times a lost connection made the store close its pooled connections
// (for tests).
func (s *Store) Resets() int64 { return s.resets.Load() }
