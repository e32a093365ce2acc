// Package memstore is the in-memory store.Store: the default engine's persistence. Nothing
// survives the process; "durable" means "visible to every reader". It is built to be cheap per
// write (one mutex, no copies of JSON values) and compact per record, so a foreach of 100,000
// items stays well inside the memory budget.
package memstore

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/run"
)

var _ store.Store = (*Store)(nil)

// chunkSize is the number of events per chunk of the event log. Chunks never move, so appending
// never copies old events.
const chunkSize = 4096

// Store is an in-memory store.Store. The zero value is not usable; use New.
//
// Write keeps the json.RawMessage slices of the batch it is given and the List/Get methods
// return them shared: neither side may modify them afterwards.
type Store struct {
	mu        sync.RWMutex
	closed    bool
	seq       uint64 // last assigned event Seq; event Seq s is at index s-1 of the log
	chunks    [][]run.Event
	runs      map[string]*runRec
	idem      map[idemKey]store.IdempotencyEntry
	artefacts map[string][]byte
}

type runRec struct {
	run      store.Run
	steps    []*store.Step
	stepIdx  map[string]int32
	eventSeq []uint64 // Seqs of the run's events, ascending
}

type idemKey struct{ scope, runID, key string }

// New returns an empty store.
func New() *Store {
	return &Store{
		runs:      make(map[string]*runRec),
		idem:      make(map[idemKey]store.IdempotencyEntry),
		artefacts: make(map[string][]byte),
	}
}

// Write implements store.Store.
func (s *Store) Write(ctx context.Context, b *store.Batch) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	if err := s.check(b); err != nil {
		return err
	}
	for i := range b.CreateRuns {
		r := b.CreateRuns[i]
		r.EnvAllow = slices.Clone(r.EnvAllow)
		s.runs[r.ID] = &runRec{run: r}
	}
	for _, u := range b.RunUpdates {
		rec := s.runs[u.ID]
		rec.run.Status, rec.run.Error, rec.run.Progress = u.Status, cloneRunError(u.Error), u.Progress
		rec.run.UpdatedAt, rec.run.FinishedAt = u.UpdatedAt, u.FinishedAt
	}
	for i := range b.Steps {
		st := &b.Steps[i]
		rec := s.runs[st.RunID]
		if idx, ok := rec.stepIdx[st.Key]; ok {
			*rec.steps[idx] = *st
			continue
		}
		if rec.stepIdx == nil {
			rec.stepIdx = make(map[string]int32)
		}
		row := *st
		rec.stepIdx[st.Key] = int32(len(rec.steps))
		rec.steps = append(rec.steps, &row)
	}
	for _, e := range b.Idempotency {
		s.idem[idemKey{e.Scope, e.RunID, e.Key}] = e
	}
	for i := range b.Events {
		s.seq++
		b.Events[i].Seq = s.seq
		s.appendEvent(b.Events[i])
		if rec := s.runs[b.Events[i].RunID]; rec != nil {
			rec.eventSeq = append(rec.eventSeq, s.seq)
		}
	}
	return nil
}

// check validates a batch before anything is applied.
func (s *Store) check(b *store.Batch) error {
	created := map[string]bool{}
	for _, r := range b.CreateRuns {
		if r.ID == "" {
			return fmt.Errorf("memstore: creating a run with an empty id")
		}
		if _, ok := s.runs[r.ID]; ok || created[r.ID] {
			return fmt.Errorf("creating run %s: %w", r.ID, store.ErrExists)
		}
		created[r.ID] = true
	}
	known := func(id string) bool { return created[id] || s.runs[id] != nil }
	for _, u := range b.RunUpdates {
		if !known(u.ID) {
			return fmt.Errorf("updating run %s: %w", u.ID, store.ErrNotFound)
		}
	}
	for _, st := range b.Steps {
		if !known(st.RunID) {
			return fmt.Errorf("writing step %s of run %s: %w", st.Key, st.RunID, store.ErrNotFound)
		}
	}
	for _, e := range b.Events {
		if e.RunID != "" && !known(e.RunID) {
			return fmt.Errorf("appending a %s event of run %s: %w", e.Type, e.RunID, store.ErrNotFound)
		}
	}
	return nil
}

func (s *Store) appendEvent(e run.Event) {
	n := len(s.chunks)
	if n == 0 || len(s.chunks[n-1]) == chunkSize {
		s.chunks = append(s.chunks, make([]run.Event, 0, chunkSize))
		n++
	}
	s.chunks[n-1] = append(s.chunks[n-1], e)
}

func (s *Store) event(seq uint64) run.Event {
	i := seq - 1
	return s.chunks[i/chunkSize][i%chunkSize]
}

func cloneRunError(e *store.RunError) *store.RunError {
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

func cloneRun(r store.Run) store.Run {
	r.Error = cloneRunError(r.Error)
	r.EnvAllow = slices.Clone(r.EnvAllow)
	return r
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.Run{}, store.ErrClosed
	}
	rec, ok := s.runs[id]
	if !ok {
		return store.Run{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return cloneRun(rec.run), nil
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []store.Run
	for _, rec := range s.runs {
		r := &rec.run
		if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, r.Status) {
			continue
		}
		if f.Name != "" && r.Name != f.Name {
			continue
		}
		if !f.Since.IsZero() && r.CreatedAt.Before(f.Since) {
			continue
		}
		if !f.Until.IsZero() && !r.CreatedAt.Before(f.Until) {
			continue
		}
		out = append(out, cloneRun(*r))
	}
	slices.SortFunc(out, func(a, b store.Run) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// ListSteps implements store.Store.
func (s *Store) ListSteps(ctx context.Context, runID string) ([]store.Step, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	rec, ok := s.runs[runID]
	if !ok {
		return nil, fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
	}
	if len(rec.steps) == 0 {
		return nil, nil
	}
	out := make([]store.Step, len(rec.steps))
	for i, st := range rec.steps {
		out[i] = *st
	}
	return out, nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]run.Event, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []run.Event
	if f.RunID != "" {
		rec := s.runs[f.RunID]
		if rec == nil {
			return nil, nil
		}
		i := sort.Search(len(rec.eventSeq), func(i int) bool { return rec.eventSeq[i] > f.AfterSeq })
		for ; i < len(rec.eventSeq) && (f.Limit <= 0 || len(out) < f.Limit); i++ {
			out = append(out, s.event(rec.eventSeq[i]))
		}
		return out, nil
	}
	for seq := f.AfterSeq + 1; seq <= s.seq && (f.Limit <= 0 || len(out) < f.Limit); seq++ {
		out = append(out, s.event(seq))
	}
	return out, nil
}

// LastSeq implements store.Store.
func (s *Store) LastSeq(ctx context.Context) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	return s.seq, nil
}

// GetIdempotency implements store.Store.
func (s *Store) GetIdempotency(ctx context.Context, scope, runID, key string, now time.Time) (store.IdempotencyEntry, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.IdempotencyEntry{}, false, store.ErrClosed
	}
	e, ok := s.idem[idemKey{scope, runID, key}]
	if !ok || expired(e, now) {
		return store.IdempotencyEntry{}, false, nil
	}
	return e, true, nil
}

func expired(e store.IdempotencyEntry, now time.Time) bool {
	return !e.ExpiresAt.IsZero() && !now.Before(e.ExpiresAt)
}

// PurgeExpired implements store.Store.
func (s *Store) PurgeExpired(ctx context.Context, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	n := 0
	for k, e := range s.idem {
		if expired(e, now) {
			delete(s.idem, k)
			n++
		}
	}
	return n, nil
}

// MarkInterrupted implements store.Store.
func (s *Store) MarkInterrupted(ctx context.Context, now time.Time) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var ids []string
	for id, rec := range s.runs {
		if rec.run.Status.Terminal() {
			continue
		}
		rec.run.Status = run.StatusInterrupted
		rec.run.UpdatedAt, rec.run.FinishedAt = now, now
		for _, st := range rec.steps {
			if !st.Status.Terminal() {
				st.Status = run.StepInterrupted
				st.UpdatedAt, st.FinishedAt = now, now
			}
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// PutArtefact implements store.ArtefactStore.
func (s *Store) PutArtefact(ctx context.Context, data []byte) (string, error) {
	sum := sha256.Sum256(data)
	h := hex.EncodeToString(sum[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", store.ErrClosed
	}
	if _, ok := s.artefacts[h]; !ok {
		s.artefacts[h] = slices.Clone(data)
	}
	return h, nil
}

// GetArtefact implements store.ArtefactStore.
func (s *Store) GetArtefact(ctx context.Context, sha string) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	b, ok := s.artefacts[sha]
	if !ok {
		return nil, fmt.Errorf("artefact %s: %w", sha, store.ErrNotFound)
	}
	return slices.Clone(b), nil
}

// Close implements store.Store. It drops every record.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.runs, s.idem, s.artefacts, s.chunks = nil, nil, nil, nil
	return nil
}
