package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// PruneChunk is the most runs one prune transaction deletes. The writer connection is held
// for one chunk at a time, so the group commit of the runs in progress waits at most the
// time of one chunk, not the whole prune: about 20 ms for runs of 10 steps and 20 events
// (BenchmarkPrune: 79 µs per run at 1,000 runs, 94 µs at 10,000, so the cost is linear).
const PruneChunk = 200

// pruneHook, when set (by tests), is called after each prune transaction commits, with the
// number of runs deleted so far.
var pruneHook func(deleted int)

// finishedStatuses returns the SQL placeholders and arguments of the finished statuses among
// statuses (all four when statuses is empty); none when statuses names only unfinished ones.
func finishedStatuses(statuses []run.Status) (marks []string, args []any) {
	for _, st := range []run.Status{run.StatusCompleted, run.StatusFailed, run.StatusCancelled, run.StatusInterrupted} {
		if len(statuses) == 0 || slices.Contains(statuses, st) {
			marks = append(marks, "?")
			args = append(args, string(st))
		}
	}
	return marks, args
}

// Prune deletes the runs in a finished status (one of statuses, or any when statuses is
// empty) that finished before olderThan, PruneChunk runs per transaction (PruneCandidates,
// then PruneRuns).
func (s *Store) Prune(ctx context.Context, olderThan time.Time, statuses []run.Status) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	runs, err := s.PruneCandidates(ctx, olderThan, statuses, 0)
	if err != nil || len(runs) == 0 {
		return 0, err
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	return s.PruneRuns(ctx, ids, olderThan, statuses, nil)
}

// PruneCandidates lists the runs Prune would delete, earliest finish first (store.Pruner).
// It is one read through the status index, without the runs' specs, inputs or progress.
func (s *Store) PruneCandidates(ctx context.Context, olderThan time.Time, statuses []run.Status, limit int) ([]store.Run, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	marks, args := finishedStatuses(statuses)
	if len(marks) == 0 {
		return nil, nil
	}
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, name, status, origin, created_at, finished_at FROM workflows
		WHERE status IN (`+strings.Join(marks, ", ")+`) AND finished_at != 0 AND finished_at < ?
		ORDER BY finished_at, id LIMIT ?`, append(args, nanos(olderThan), limit)...)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		var r store.Run
		var status string
		var created, finished int64
		if err := rows.Scan(&r.ID, &r.Name, &status, &r.Origin, &created, &finished); err != nil {
			return nil, s.fault(err)
		}
		r.Status, r.CreatedAt, r.FinishedAt = run.Status(status), sqlrow.FromNanos(created), sqlrow.FromNanos(finished)
		out = append(out, r)
	}
	return out, s.fault(rows.Err())
}

// PruneRuns deletes those of ids that still qualify (store.Pruner), PruneChunk per
// transaction; their steps, events and workflow-scoped idempotency entries go with them (ON
// DELETE CASCADE and a trigger). Each transaction first keeps the largest seq in store_meta, so
// that the next owner does not number events from a smaller one. The freed pages stay in the
// file, on its free list, and later writes reuse them: the file does not shrink (auto_vacuum is
// off; VACUUM would rewrite the whole file while holding the writer).
func (s *Store) PruneRuns(ctx context.Context, ids []string, olderThan time.Time, statuses []run.Status, progress func(deleted int)) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	marks, statusArgs := finishedStatuses(statuses)
	if len(marks) == 0 {
		return 0, nil
	}
	deleted := 0
	for len(ids) > 0 {
		if err := ctx.Err(); err != nil {
			return deleted, context.Cause(ctx)
		}
		chunk := ids[:min(len(ids), PruneChunk)]
		ids = ids[len(chunk):]
		n, err := s.pruneChunk(ctx, chunk, marks, statusArgs, olderThan)
		if err != nil {
			return deleted, err
		}
		deleted += n
		if pruneHook != nil {
			pruneHook(deleted)
		}
		if progress != nil {
			progress(deleted)
		}
	}
	return deleted, nil
}

// pruneChunk deletes the runs of ids that still qualify, in one transaction.
func (s *Store) pruneChunk(ctx context.Context, ids []string, marks []string, statusArgs []any, olderThan time.Time) (int, error) {
	if s.checkLock != nil {
		if err := s.checkLock(); err != nil {
			return 0, err
		}
	}
	if fe := s.broken.Load(); fe != nil {
		return 0, fe
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, s.fault(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO store_meta (key, value)
		SELECT 'last_seq', coalesce(max(seq), 0) FROM workflow_events WHERE true
		ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)`); err != nil {
		return 0, fmt.Errorf("pruning runs: %w", s.fault(err))
	}
	args := make([]any, 0, len(ids)+len(statusArgs)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(append(args, statusArgs...), nanos(olderThan))
	res, err := tx.ExecContext(ctx, `DELETE FROM workflows WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)
		AND status IN (`+strings.Join(marks, ", ")+`) AND finished_at != 0 AND finished_at < ?`, args...)
	if err != nil {
		return 0, fmt.Errorf("pruning runs: %w", s.fault(err))
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("pruning runs: %w", s.fault(err))
	}
	if s.ckpt != nil {
		s.ckpt.committed() // a long prune writes the WAL too: let the checkpointer keep up
	}
	return int(n), nil
}
