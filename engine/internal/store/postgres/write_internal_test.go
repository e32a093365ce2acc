package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
	"github.com/dcc-flow/dcc-flow/internal/pgtest"
)

// A group commit that the write timeout ends after its group was sent has an unknown outcome:
// pgx closes the connection at the deadline, and the server, which holds the whole pipeline,
// may still commit it. Its error wraps store.ErrConnectionLost (code storage), so the engine
// gives the run up to the takeover path instead of failing it (docs/operations/cluster.md, "A database
// restart"). Here the write waits for a row lock another session holds.
func TestWriteTimeoutAfterSendIsAnUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	url := pgtest.DB(t)
	s := openTest(t, url)
	now := time.Now()
	if err := s.Write(ctx, &store.Batch{CreateRuns: []store.Run{{ID: "r", SpecJSON: json.RawMessage(`{}`),
		Status: run.StatusRunning, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	blocker, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(ctx)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM workflows WHERE id = 'r' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	s.writeWait = 300 * time.Millisecond
	start := time.Now()
	err = s.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning,
		UpdatedAt: time.Now()}}})
	took := time.Since(start)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, store.ErrConnectionLost) || AsFault(s.name, err) == nil || run.CodeOf(err) != run.CodeStorage {
		t.Fatalf("a write the timeout ended after it was sent: %v (code %s); want a storage fault wrapping ErrConnectionLost",
			err, run.CodeOf(err))
	}
	if took > 5*time.Second {
		t.Fatalf("the write timeout of 300 ms took %s", took)
	}
	s.writeWait = 0
	if err := s.Write(ctx, &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning,
		UpdatedAt: time.Now()}}}); err != nil {
		t.Fatalf("the next write: %v", err)
	}
}

// closeLost is a pipeline whose statements all succeed and whose end (br.Close) finds that the
// server ended the session: what a restart between the last result and the Sync's answer
// leaves.
type closeLost struct{}

func (closeLost) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults { return closeLostResults{} }

type closeLostResults struct{ pgx.BatchResults }

func (closeLostResults) Exec() (pgconn.CommandTag, error) {
	return pgconn.NewCommandTag("UPDATE 1"), nil
}
func (closeLostResults) Close() error {
	return &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
}

// The end of a pipeline is the COMMIT only when the pipeline is its own implicit transaction: a
// connection lost there leaves the write's outcome unknown. In a transaction (the savepoint
// path of commitOnce, which applies each batch of a group in a SAVEPOINT) it is not, and the
// session ended before the transaction's COMMIT was sent: nothing was applied, so the group is
// sent again instead of giving its runs up.
func TestApplyEndIsTheCommitOnlyWhenImplicit(t *testing.T) {
	s := &Store{name: "postgresql://db/flow"}
	b := &store.Batch{RunUpdates: []store.RunUpdate{{ID: "r", Status: run.StatusRunning, UpdatedAt: time.Now()}}}
	var ce *commitError
	_, err := s.apply(context.Background(), closeLost{}, []*store.Batch{b}, true)
	if !errors.As(err, &ce) || notApplied(err) {
		t.Fatalf("implicit: %v; want a *commitError, outcome unknown", err)
	}
	ce = nil
	_, err = s.apply(context.Background(), closeLost{}, []*store.Batch{b}, false)
	if err == nil || errors.As(err, &ce) || !connectionLost(err) || !notApplied(err) {
		t.Fatalf("in a transaction: %v; want a lost connection that proves nothing was applied", err)
	}
}
