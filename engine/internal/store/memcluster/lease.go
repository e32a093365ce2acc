package memcluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

// Leases (store.Leaser), as the PostgreSQL store keeps them (postgres/lease.go), on the DB's
// clock.

// maxDepth bounds the walk up a run's parents (Leased), as PostgreSQL's recursive query does.
const maxDepth = 64

func list(v []string) []string {
	if v == nil {
		return []string{}
	}
	return slices.Clone(v)
}

// Attach registers e (its row replaced, but for StartedAt and Closing, when its id is
// registered already) and makes the handle act as it. The rows of engines silent for ten
// leases (at least a minute) are deleted.
func (s *Store) Attach(ctx context.Context, e store.EngineInfo) error {
	if err := s.check(); err != nil {
		return err
	}
	if e.ID == "" || e.Lease <= 0 {
		return fmt.Errorf("store: Attach needs an engine id and a lease > 0 (got %q, %s)", e.ID, e.Lease)
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	row := db.engines[e.ID]
	if row == nil {
		row = &engineRow{info: store.EngineInfo{ID: e.ID, StartedAt: now}}
		db.engines[e.ID] = row
	}
	row.info.Host, row.info.PID, row.info.Lease = e.Host, e.PID, e.Lease
	row.info.Tools, row.info.Lanes, row.info.Remotes = list(e.Tools), list(e.Lanes), list(e.Remotes)
	row.info.HeartbeatAt = now
	s.lease.Store(&attachment{id: e.ID, lease: e.Lease})
	for id, r := range db.engines {
		if r.info.HeartbeatAt.Before(now.Add(-max(10*r.info.Lease, time.Minute))) {
			delete(db.engines, id)
		}
	}
	return nil
}

// Heartbeat renews the engine's row (registering it again when it was deleted) and the leases
// of those of runIDs it owns that have not finished, and returns those, in the order of runIDs.
func (s *Store) Heartbeat(ctx context.Context, e store.EngineInfo, runIDs []string) ([]string, error) {
	a, err := s.attached()
	if err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	row := db.engines[a.id]
	if row == nil {
		row = &engineRow{info: store.EngineInfo{ID: a.id, Host: e.Host, PID: e.PID, Lease: a.lease, StartedAt: now}}
		db.engines[a.id] = row
	}
	row.info.HeartbeatAt = now
	row.info.Tools, row.info.Lanes, row.info.Remotes = list(e.Tools), list(e.Lanes), list(e.Remotes)
	owned := []string{}
	seen := map[string]bool{}
	for _, id := range runIDs {
		l := db.leases[id]
		if seen[id] || l == nil || l.owner != a.id {
			continue
		}
		r, err := db.inner.GetRun(ctx, id)
		if err != nil || !unfinished(r.Status) {
			continue
		}
		seen[id] = true
		l.until = now.Add(a.lease)
		owned = append(owned, id)
	}
	return owned, nil
}

// Expired returns the top-level unfinished runs that no live lease holds, oldest first (ties:
// smaller id first); a paused one only while it has a step instance in flight.
func (s *Store) Expired(ctx context.Context, limit int) ([]store.Run, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	runs, err := db.inner.ListRuns(ctx, store.RunFilter{Statuses: []run.Status{run.StatusPending, run.StatusRunning, run.StatusWaiting, run.StatusPaused}})
	if err != nil {
		return nil, err
	}
	sort.Slice(runs, func(i, j int) bool {
		if c := runs[i].CreatedAt.Compare(runs[j].CreatedAt); c != 0 {
			return c < 0
		}
		return runs[i].ID < runs[j].ID
	})
	out := []store.Run{}
	for _, r := range runs {
		if r.ParentRunID != "" || db.leases[r.ID].live(now) {
			continue
		}
		if r.Status == run.StatusPaused {
			inFlight, err := db.inFlight(ctx, r.ID)
			if err != nil {
				return nil, err
			}
			if len(inFlight) == 0 {
				continue
			}
		}
		out = append(out, store.Run{ID: r.ID, Name: r.Name, Status: r.Status, SpecJSON: r.SpecJSON, CreatedAt: r.CreatedAt})
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

// inFlight returns the steps of run id whose status is not terminal (pending, running, retrying,
// waiting_approval, waiting_resources).
func (db *DB) inFlight(ctx context.Context, id string) ([]store.Step, error) {
	steps, err := db.inner.ListSteps(ctx, id)
	if err != nil {
		return nil, err
	}
	var out []store.Step
	for _, st := range steps {
		if !st.Status.Terminal() {
			out = append(out, st)
		}
	}
	return out, nil
}

// ClaimRun takes run id and its unfinished child runs over when no live lease holds it, and
// interrupts them in one write of the inner store (as PostgreSQL's transaction does).
func (s *Store) ClaimRun(ctx context.Context, id string, now time.Time, in store.Interruption) (bool, error) {
	a, err := s.attached()
	if err != nil {
		return false, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	at := db.now()
	root, err := db.inner.GetRun(ctx, id)
	if err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, err
	}
	if !unfinished(root.Status) || db.leases[id].live(at) {
		return false, nil
	}
	// Its unfinished child runs (sub-workflows) go with it: the parent's resume resumes them.
	runs := []store.Run{root}
	for i := 0; i < len(runs); i++ {
		kids, err := db.inner.ListRuns(ctx, store.RunFilter{ParentRunID: runs[i].ID})
		if err != nil {
			return false, err
		}
		for _, k := range kids {
			if unfinished(k.Status) && !slices.ContainsFunc(runs, func(r store.Run) bool { return r.ID == k.ID }) {
				runs = append(runs, k)
			}
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].ID < runs[j].ID })
	b := &store.Batch{}
	for _, r := range runs {
		steps, err := db.inFlight(ctx, r.ID)
		if err != nil {
			return false, err
		}
		for _, st := range steps {
			st.Status, st.UpdatedAt, st.Insert = run.StepInterrupted, now, false
			b.Steps = append(b.Steps, st)
		}
		if r.Status == run.StatusPaused {
			continue // a paused run stays paused (Unpause resumes it)
		}
		// The progress as committed (GetRun of an unfinished run), its interrupted steps counted.
		p := r.Progress
		p.Completed += len(steps)
		p.Total = max(p.Total, p.Completed)
		b.RunUpdates = append(b.RunUpdates, store.RunUpdate{ID: r.ID, Status: run.StatusInterrupted, Error: in.Error,
			Progress: p, UpdatedAt: now, FinishedAt: now})
		b.Events = append(b.Events, run.Event{RunID: r.ID, Time: now, Type: run.EventInterrupted, Status: string(run.StatusInterrupted),
			Progress: p, Detail: in.Detail})
	}
	// The inner store directly: the run's calls stay for its resume to adopt (a claim is no end).
	if err := db.inner.Write(ctx, b); err != nil {
		return false, fmt.Errorf("interrupting run %s to take it over: %w", id, err)
	}
	for _, r := range runs {
		l := &runLease{owner: a.id}
		if r.ID == id {
			l.until = at.Add(a.lease)
		}
		db.leases[r.ID] = l
	}
	return true, nil
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// Acquire makes this engine the owner of run id, with a new lease, unless another engine holds
// a live lease on it. Whatever the run's status.
func (s *Store) Acquire(ctx context.Context, id string) (bool, string, error) {
	a, err := s.attached()
	if err != nil {
		return false, "", err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	if _, err := db.inner.GetRun(ctx, id); err != nil {
		if isNotFound(err) {
			return false, "", fmt.Errorf("run %s: %w", id, store.ErrNotFound)
		}
		return false, "", err
	}
	l := db.leases[id]
	if l.live(now) && l.owner != a.id {
		return false, l.owner, nil
	}
	db.leases[id] = &runLease{owner: a.id, until: now.Add(a.lease)}
	return true, "", nil
}

// Holder returns the engine holding a live lease on run id, "" when none or this one.
func (s *Store) Holder(ctx context.Context, id string) (string, error) {
	if err := s.check(); err != nil {
		return "", err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if _, err := db.inner.GetRun(ctx, id); err != nil {
		if isNotFound(err) {
			return "", fmt.Errorf("run %s: %w", id, store.ErrNotFound)
		}
		return "", err
	}
	l := db.leases[id]
	if !l.live(db.now()) {
		return "", nil
	}
	if a := s.lease.Load(); a != nil && a.id == l.owner {
		return "", nil
	}
	return l.owner, nil
}

// Leased reports whether a live lease holds run id or one of the runs above it (at most 64
// parents up).
func (s *Store) Leased(ctx context.Context, id string) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	for depth := 0; id != "" && depth <= maxDepth; depth++ {
		r, err := db.inner.GetRun(ctx, id)
		if err != nil {
			if isNotFound(err) {
				if depth == 0 {
					return false, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
				}
				return false, nil // a parent pruned away
			}
			return false, err
		}
		if db.leases[id].live(now) {
			return true, nil
		}
		id = r.ParentRunID
	}
	return false, nil
}

// Detach releases the engine's leases, deletes its row, wakes the listeners ("h:ID") and makes
// the handle act as no engine.
func (s *Store) Detach(ctx context.Context) error {
	a, err := s.attached()
	if err != nil {
		return err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, l := range db.leases {
		if l.owner == a.id {
			l.until = time.Time{}
		}
	}
	delete(db.engines, a.id)
	db.notify("h:" + a.id)
	s.lease.Store(nil)
	return nil
}

// Closing marks the engine closing.
func (s *Store) Closing(ctx context.Context) error {
	a, err := s.attached()
	if err != nil {
		return err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	if row := db.engines[a.id]; row != nil {
		row.info.Closing = true
	}
	return nil
}

// Engines lists the registered engines by id; Live while the last heartbeat is less than a
// lease old.
func (s *Store) Engines(ctx context.Context) ([]store.EngineInfo, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	now := db.now()
	out := []store.EngineInfo{}
	for _, row := range db.engines {
		e := row.info
		e.Tools, e.Lanes, e.Remotes = slices.Clone(e.Tools), slices.Clone(e.Lanes), slices.Clone(e.Remotes)
		e.Live = e.HeartbeatAt.Add(e.Lease).After(now)
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return strings.Compare(out[i].ID, out[j].ID) < 0 })
	return out, nil
}

// ClaimSlot records the fire of scheduleID due at slot, once across every handle; the claims
// of scheduleID more than a day older than slot are forgotten.
func (s *Store) ClaimSlot(ctx context.Context, scheduleID string, slot time.Time) (bool, error) {
	if err := s.check(); err != nil {
		return false, err
	}
	db := s.db
	db.mu.Lock()
	defer db.mu.Unlock()
	old := slot.Add(-24 * time.Hour).UnixNano()
	for k := range db.slots {
		if k.schedule == scheduleID && k.slot < old {
			delete(db.slots, k)
		}
	}
	k := slotKey{scheduleID, slot.UnixNano()}
	if _, taken := db.slots[k]; taken {
		return false, nil
	}
	engine := ""
	if a := s.lease.Load(); a != nil {
		engine = a.id
	}
	db.slots[k] = engine
	return true, nil
}
