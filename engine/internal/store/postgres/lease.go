package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Leases (store.Leaser, docs/operations/cluster.md "Leases"). Every time in this file is the server's
// (now()), never an engine's clock: hosts whose clocks disagree still agree on who holds a run.

// leaseState is what Attach sets: the engine this store acts as.
type leaseState struct {
	id   string
	secs float64 // the lease, in seconds
}

const (
	sqlUnfinished   = `('pending', 'running', 'waiting', 'paused')`
	sqlStepInFlight = `('pending', 'running', 'retrying', 'waiting_approval', 'waiting_resources')`
	// sqlFree is true for a run row that no live lease holds.
	sqlFree = `(lease_until IS NULL OR lease_until < now())`
)

// leaseArgs returns the owner and lease arguments of the run statements: NULLs for a store
// that is not attached (no owner is written, no lease checked).
func (s *Store) leaseArgs() (owner any, secs any) {
	if l := s.lease.Load(); l != nil {
		return l.id, l.secs
	}
	return nil, nil
}

func (s *Store) attached() (*leaseState, error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	l := s.lease.Load()
	if l == nil {
		return nil, errors.New("store: not attached (call Attach first)")
	}
	return l, nil
}

func jsonList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Attach registers e and makes the store write e.ID as the owner of the runs it starts.
func (s *Store) Attach(ctx context.Context, e store.EngineInfo) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	if e.ID == "" || e.Lease <= 0 {
		return fmt.Errorf("store: Attach needs an engine id and a lease > 0 (got %q, %s)", e.ID, e.Lease)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO engines (id, host, pid, lease_secs, tools, lanes, remotes) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, lease_secs = excluded.lease_secs,
		tools = excluded.tools, lanes = excluded.lanes, remotes = excluded.remotes, heartbeat_at = now()`,
		e.ID, text(e.Host), int64(e.PID), e.Lease.Seconds(), jsonList(e.Tools), jsonList(e.Lanes), jsonList(e.Remotes)); err != nil {
		return s.fault(fmt.Errorf("registering engine %s in %s: %w", e.ID, s.name, err))
	}
	s.lease.Store(&leaseState{id: e.ID, secs: e.Lease.Seconds()})
	// The rows of engines that died without closing go once they are long silent.
	_, _ = s.pool.Exec(ctx, `DELETE FROM engines WHERE heartbeat_at < now() - make_interval(secs => greatest(lease_secs * 10, 60))`)
	return nil
}

// Heartbeat renews the engine's row and the leases of the runs of runIDs it owns.
func (s *Store) Heartbeat(ctx context.Context, e store.EngineInfo, runIDs []string) ([]string, error) {
	l, err := s.attached()
	if err != nil {
		return nil, err
	}
	if runIDs == nil {
		runIDs = []string{}
	}
	// One round trip: the engine row (inserted again if someone deleted it) and the leases.
	var q pgx.Batch
	q.Queue(`INSERT INTO engines (id, host, pid, lease_secs, tools, lanes, remotes) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = now(), tools = excluded.tools, lanes = excluded.lanes, remotes = excluded.remotes`,
		l.id, text(e.Host), int64(e.PID), l.secs, jsonList(e.Tools), jsonList(e.Lanes), jsonList(e.Remotes))
	q.Queue(`UPDATE workflows SET lease_until = now() + make_interval(secs => $2)
		WHERE owner = $1 AND id = ANY($3) AND status IN `+sqlUnfinished+` RETURNING id`, l.id, l.secs, runIDs)
	br := s.pool.SendBatch(ctx, &q)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, s.fault(fmt.Errorf("heartbeat of engine %s: %w", l.id, err))
	}
	rows, err := br.Query()
	if err != nil {
		return nil, s.fault(fmt.Errorf("renewing the leases of engine %s: %w", l.id, err))
	}
	owned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.fault(fmt.Errorf("renewing the leases of engine %s: %w", l.id, err))
	}
	return owned, s.fault(br.Close())
}

// Expired returns the top-level unfinished runs no live lease holds (a sub-workflow's child
// run goes with its parent: ClaimRun interrupts it with the parent, whose resume resumes it).
func (s *Store) Expired(ctx context.Context, limit int) ([]store.Run, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1 << 30
	}
	rows, err := s.pool.Query(ctx, `SELECT id, name, status, spec_json, created_at FROM workflows w
		WHERE status IN `+sqlUnfinished+` AND `+sqlFree+` AND parent_run_id IS NULL
		AND (status <> 'paused' OR EXISTS (SELECT 1 FROM workflow_steps st WHERE st.run_id = w.id AND st.status IN `+sqlStepInFlight+`))
		ORDER BY created_at, id LIMIT $1`, limit)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.Run
	for rows.Next() {
		var r store.Run
		var status string
		var created int64
		if err := rows.Scan(&r.ID, &r.Name, &status, &r.SpecJSON, &created); err != nil {
			return nil, s.fault(err)
		}
		r.Status, r.CreatedAt = run.Status(status), sqlrow.FromNanos(created)
		out = append(out, r)
	}
	return out, s.fault(rows.Err())
}

// ClaimRun takes run id (and its unfinished child runs) over when no live lease holds it.
func (s *Store) ClaimRun(ctx context.Context, id string, now time.Time, in store.Interruption) (bool, error) {
	l, err := s.attached()
	if err != nil {
		return false, err
	}
	runErr, err := runErrorJSON(in.Error)
	if err != nil {
		return false, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, s.fault(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	// The conditional UPDATE is the claim: of engines claiming at once, the first takes the
	// row lock; the others wait, then PostgreSQL evaluates the WHERE again on the row as the
	// first committed it (a live lease) and they match nothing.
	type claimed struct{ id, status string }
	var root claimed
	err = tx.QueryRow(ctx, `UPDATE workflows SET owner = $2, lease_until = now() + make_interval(secs => $3)
		WHERE id = $1 AND status IN `+sqlUnfinished+` AND `+sqlFree+` RETURNING id, status`, id, l.id, l.secs).Scan(&root.id, &root.status)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, s.fault(err)
	}
	// Its unfinished child runs (sub-workflows) go with it: the parent's resume resumes them.
	rows, err := tx.Query(ctx, `WITH RECURSIVE tree(id) AS (
			SELECT w.id FROM workflows w WHERE w.parent_run_id = $1 AND w.status IN `+sqlUnfinished+`
			UNION SELECT w.id FROM workflows w JOIN tree t ON w.parent_run_id = t.id WHERE w.status IN `+sqlUnfinished+`)
		UPDATE workflows w SET owner = $2, lease_until = NULL FROM tree WHERE w.id = tree.id RETURNING w.id, w.status`, id, l.id)
	if err != nil {
		return false, s.fault(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
		var c claimed
		return c, r.Scan(&c.id, &c.status)
	})
	if err != nil {
		return false, s.fault(err)
	}
	got = append(got, root)
	sort.Slice(got, func(i, j int) bool { return got[i].id < got[j].id })
	at := nanos(now)
	b := &store.Batch{}
	for _, c := range got {
		if _, err := tx.Exec(ctx, `UPDATE workflow_steps SET status = 'interrupted', updated_at = $1
			WHERE run_id = $2 AND status IN `+sqlStepInFlight, at, c.id); err != nil {
			return false, s.fault(err)
		}
		if c.status == string(run.StatusPaused) {
			continue // a paused run stays paused (Unpause resumes it)
		}
		var completed, total int64
		if err := tx.QueryRow(ctx, `UPDATE workflows SET status = 'interrupted', error = $1, updated_at = $2, finished_at = $2,
			completed = c.completed, total = greatest(c.completed, c.total)
			FROM (SELECT (SELECT count(*) FROM workflow_steps s WHERE s.run_id = $3 AND `+stepFinished+`) AS completed,
				coalesce((SELECT e.total FROM workflow_events e WHERE e.run_id = $3 ORDER BY e.seq DESC LIMIT 1),
					(SELECT total FROM workflows WHERE id = $3)) AS total) c
			WHERE id = $3 RETURNING workflows.completed, workflows.total`, runErr, at, c.id).Scan(&completed, &total); err != nil {
			return false, s.fault(err)
		}
		b.Events = append(b.Events, run.Event{RunID: c.id, Time: now, Type: run.EventInterrupted, Status: string(run.StatusInterrupted),
			Progress: run.Progress{Completed: int(completed), Total: int(total)}, Detail: in.Detail})
	}
	if len(b.Events) > 0 {
		if _, err := s.apply(ctx, tx, []*store.Batch{b}, false); err != nil {
			return false, s.fault(fmt.Errorf("appending the interrupted events: %w", err))
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, s.fault(err)
	}
	return true, nil
}

// Acquire makes this engine the owner of run id unless another engine holds a live lease.
func (s *Store) Acquire(ctx context.Context, id string) (bool, string, error) {
	l, err := s.attached()
	if err != nil {
		return false, "", err
	}
	var owner *string
	var mine bool
	err = s.pool.QueryRow(ctx, `WITH u AS (UPDATE workflows SET owner = $2, lease_until = now() + make_interval(secs => $3)
			WHERE id = $1 AND (owner IS NULL OR owner = $2 OR `+sqlFree+`) RETURNING 1)
		SELECT (SELECT count(*) FROM u) = 1, (SELECT owner FROM workflows WHERE id = $1)`, id, l.id, l.secs).Scan(&mine, &owner)
	if err != nil {
		return false, "", s.fault(err)
	}
	if mine {
		return true, "", nil
	}
	if owner == nil {
		return false, "", fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return false, *owner, nil
}

// Holder returns the engine holding a live lease on run id, "" when none or this one.
func (s *Store) Holder(ctx context.Context, id string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	var owner *string
	var live bool
	err := s.pool.QueryRow(ctx, `SELECT owner, lease_until IS NOT NULL AND lease_until >= now() FROM workflows WHERE id = $1`, id).Scan(&owner, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return "", s.fault(err)
	}
	if owner == nil || !live {
		return "", nil
	}
	if l := s.lease.Load(); l != nil && l.id == *owner {
		return "", nil
	}
	return *owner, nil
}

// Leased reports whether a live lease holds run id or a run above it (store.Leaser).
func (s *Store) Leased(ctx context.Context, id string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	var found int
	var live bool
	err := s.pool.QueryRow(ctx, `WITH RECURSIVE up (id, parent, depth) AS (
			SELECT id, parent_run_id, 0 FROM workflows WHERE id = $1
			UNION ALL SELECT w.id, w.parent_run_id, up.depth + 1 FROM workflows w JOIN up ON w.id = up.parent WHERE up.depth < 64)
		SELECT count(*), coalesce(bool_or(w.lease_until IS NOT NULL AND w.lease_until >= now()), false)
		FROM up JOIN workflows w ON w.id = up.id`, id).Scan(&found, &live)
	if err != nil {
		return false, s.fault(err)
	}
	if found == 0 {
		return false, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return live, nil
}

// Detach releases the engine's leases and deletes its row.
func (s *Store) Detach(ctx context.Context) error {
	l, err := s.attached()
	if err != nil {
		return err
	}
	var q pgx.Batch
	q.Queue(`UPDATE workflows SET lease_until = NULL WHERE owner = $1 AND lease_until IS NOT NULL`, l.id)
	q.Queue(`DELETE FROM engines WHERE id = $1`, l.id)
	// The other engines' queue listeners take 'h:' as "sweep now" (engine/queue.go).
	q.Queue(`SELECT pg_notify('`+callsChannel+`', 'h:' || $1::text)`, l.id)
	if err := s.pool.SendBatch(ctx, &q).Close(); err != nil {
		return s.fault(fmt.Errorf("detaching engine %s: %w", l.id, err))
	}
	s.lease.Store(nil)
	return nil
}

// Closing marks the engine closing (store.Leaser).
func (s *Store) Closing(ctx context.Context) error {
	l, err := s.attached()
	if err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, `UPDATE engines SET closing = true WHERE id = $1`, l.id); err != nil {
		return s.fault(fmt.Errorf("marking engine %s closing: %w", l.id, err))
	}
	return nil
}

// Engines lists the registered engines.
func (s *Store) Engines(ctx context.Context) ([]store.EngineInfo, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, host, pid, lease_secs, tools, lanes, remotes, started_at, heartbeat_at,
		heartbeat_at > now() - make_interval(secs => lease_secs), closing FROM engines ORDER BY id`)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.EngineInfo
	for rows.Next() {
		var e store.EngineInfo
		var pid int64
		var secs float64
		var tools, lanes, remotes string
		if err := rows.Scan(&e.ID, &e.Host, &pid, &secs, &tools, &lanes, &remotes, &e.StartedAt, &e.HeartbeatAt, &e.Live, &e.Closing); err != nil {
			return nil, s.fault(err)
		}
		e.PID, e.Lease = int(pid), time.Duration(secs*float64(time.Second))
		_ = json.Unmarshal([]byte(tools), &e.Tools)
		_ = json.Unmarshal([]byte(lanes), &e.Lanes)
		_ = json.Unmarshal([]byte(remotes), &e.Remotes)
		out = append(out, e)
	}
	return out, s.fault(rows.Err())
}

// ClaimSlot records the fire of scheduleID due at slot, once across every engine.
func (s *Store) ClaimSlot(ctx context.Context, scheduleID string, slot time.Time) (bool, error) {
	if err := s.checkWrite(); err != nil {
		return false, err
	}
	engine := ""
	if l := s.lease.Load(); l != nil {
		engine = l.id
	}
	var q pgx.Batch
	q.Queue(`DELETE FROM schedule_slots WHERE schedule_id = $1 AND slot < $2`, text(scheduleID), nanos(slot.Add(-24*time.Hour)))
	q.Queue(`INSERT INTO schedule_slots (schedule_id, slot, engine_id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`,
		text(scheduleID), nanos(slot), engine)
	br := s.pool.SendBatch(ctx, &q)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return false, s.fault(fmt.Errorf("claiming a fire of %s: %w", scheduleID, err))
	}
	tag, err := br.Exec()
	if err != nil {
		return false, s.fault(fmt.Errorf("claiming a fire of %s: %w", scheduleID, err))
	}
	return tag.RowsAffected() == 1, s.fault(br.Close())
}
