package memstore

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/pathkey"
)

var _ store.Assets = (*Store)(nil)

// assets are the file records and cache entries of the store (store.Assets). Records are kept
// in ID order (IDs only grow; a replaced record keeps its place and ID), with indexes of their
// positions by path, by attempt and by run, rebuilt when Prune deletes records.
type assets struct {
	files  []fileRec
	lastID int64 // the last ID given: never given again, also after a Prune
	byKey  map[fileKey]int32
	byPath map[string][]int32 // positions, ascending
	byAtt  map[store.AttemptRef][]int32
	byRun  map[string][]int32
	cache  map[string]map[store.AttemptRef]store.CacheEntry // by key
}

type fileRec struct {
	store.FileRecord
	key string // pathkey.Key(Path)
}

type fileKey struct {
	ref  store.AttemptRef
	role store.FileRole
	path string
}

// putFiles upserts records (s.mu held; their runs exist).
func (s *Store) putFiles(rs []store.FileRecord) {
	a := &s.assets
	if a.byKey == nil {
		a.byKey = map[fileKey]int32{}
		a.byPath = map[string][]int32{}
		a.byAtt = map[store.AttemptRef][]int32{}
		a.byRun = map[string][]int32{}
	}
	for _, r := range rs {
		ref := store.AttemptRef{RunID: r.RunID, StepKey: r.StepKey, Attempt: r.Attempt}
		k := fileKey{ref, r.Role, r.Path}
		if i, ok := a.byKey[k]; ok {
			r.ID = a.files[i].ID
			a.files[i].FileRecord = r
			continue
		}
		a.lastID++
		r.ID = a.lastID
		a.add(fileRec{FileRecord: r, key: pathkey.Key(r.Path)})
	}
}

// add appends r to the records and indexes.
func (a *assets) add(r fileRec) {
	i := int32(len(a.files))
	a.files = append(a.files, r)
	ref := store.AttemptRef{RunID: r.RunID, StepKey: r.StepKey, Attempt: r.Attempt}
	a.byKey[fileKey{ref, r.Role, r.Path}] = i
	a.byPath[r.Path] = append(a.byPath[r.Path], i)
	a.byAtt[ref] = append(a.byAtt[ref], i)
	a.byRun[r.RunID] = append(a.byRun[r.RunID], i)
}

// dropRuns deletes the records and cache entries of the runs gone (s.mu held).
func (a *assets) dropRuns(gone func(runID string) bool) {
	for key, es := range a.cache {
		for ref := range es {
			if gone(ref.RunID) {
				delete(es, ref)
			}
		}
		if len(es) == 0 {
			delete(a.cache, key)
		}
	}
	some := false
	for id := range a.byRun {
		if gone(id) {
			some = true
			break
		}
	}
	if !some {
		return
	}
	old := a.files
	a.files = nil
	a.byKey, a.byPath, a.byAtt, a.byRun = map[fileKey]int32{}, map[string][]int32{}, map[store.AttemptRef][]int32{}, map[string][]int32{}
	for _, r := range old {
		if !gone(r.RunID) {
			a.add(r)
		}
	}
}

// Files implements store.Assets. It reads the positions of the narrowest index that applies
// (an exact path, an attempt, a run, the attempts listed), else every record from AfterID on.
func (s *Store) Files(ctx context.Context, f store.FileFilter) ([]store.FileRecord, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	a := &s.assets
	if f.SelectsNone() {
		return nil, nil
	}
	var cand []int32
	indexed := true
	switch {
	case f.Path != "":
		cand = a.byPath[f.Path]
	case f.RunID != "" && f.StepKey != "" && f.Attempt != 0:
		cand = a.byAtt[store.AttemptRef{RunID: f.RunID, StepKey: f.StepKey, Attempt: f.Attempt}]
	case f.Attempts != nil:
		for _, ref := range f.Attempts {
			cand = append(cand, a.byAtt[ref]...)
		}
		slices.Sort(cand)
		cand = slices.Compact(cand)
	case f.RunID != "":
		cand = a.byRun[f.RunID]
	default:
		indexed = false
	}
	var exact, lo, hi string
	if f.Under != "" {
		exact, lo, hi = pathkey.Range(f.Under)
	}
	var refs map[store.AttemptRef]bool
	if f.Attempts != nil {
		refs = make(map[store.AttemptRef]bool, len(f.Attempts))
		for _, r := range f.Attempts {
			refs[r] = true
		}
	}
	match := func(r *fileRec) bool {
		switch {
		case r.ID <= f.AfterID,
			f.RunID != "" && r.RunID != f.RunID,
			f.StepKey != "" && r.StepKey != f.StepKey,
			f.Attempt != 0 && r.Attempt != f.Attempt,
			f.Role != "" && r.Role != f.Role,
			f.Role == "" && !f.WithPatterns && r.Role == store.FilePattern,
			f.Path != "" && r.Path != f.Path,
			f.Under != "" && r.key != exact && (r.key < lo || r.key >= hi),
			refs != nil && !refs[store.AttemptRef{RunID: r.RunID, StepKey: r.StepKey, Attempt: r.Attempt}]:
			return false
		}
		return true
	}
	// The first position past AfterID: positions are in ID order.
	after := func(n int, id func(int) int64) int {
		return sort.Search(n, func(i int) bool { return id(i) > f.AfterID })
	}
	var out []store.FileRecord
	full := func() bool { return f.Limit > 0 && len(out) >= f.Limit }
	if indexed {
		for _, i := range cand[after(len(cand), func(j int) int64 { return a.files[cand[j]].ID }):] {
			if full() {
				break
			}
			if r := &a.files[i]; match(r) {
				out = append(out, r.FileRecord)
			}
		}
		return out, nil
	}
	for i := after(len(a.files), func(j int) int64 { return a.files[j].ID }); i < len(a.files) && !full(); i++ {
		if r := &a.files[i]; match(r) {
			out = append(out, r.FileRecord)
		}
	}
	return out, nil
}

// putCache upserts cache entries (s.mu held; their runs exist).
func (s *Store) putCache(es []store.CacheEntry) {
	a := &s.assets
	if a.cache == nil {
		a.cache = map[string]map[store.AttemptRef]store.CacheEntry{}
	}
	for _, e := range es {
		m := a.cache[e.Key]
		if m == nil {
			m = map[store.AttemptRef]store.CacheEntry{}
			a.cache[e.Key] = m
		}
		e.Files = nil // read from the records (CacheEntries)
		m[store.AttemptRef{RunID: e.RunID, StepKey: e.StepKey, Attempt: e.Attempt}] = e
	}
}

// cacheMatch reports whether f selects e.
func cacheMatch(e *store.CacheEntry, f *store.CacheFilter) bool {
	return (f.Key == "" || e.Key == f.Key) && (f.Tool == "" || e.Tool == f.Tool) && (f.Workflow == "" || e.Workflow == f.Workflow) &&
		(f.RunID == "" || e.RunID == f.RunID) && (f.Before.IsZero() || e.CreatedAt.Before(f.Before))
}

// CacheEntries implements store.Assets.
func (s *Store) CacheEntries(ctx context.Context, key string, now time.Time) ([]store.CacheEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	a := &s.assets
	var out []store.CacheEntry
	for ref, e := range a.cache[key] {
		if e.ExpiresAt.IsZero() || e.ExpiresAt.After(now) {
			for _, i := range a.byAtt[ref] { // in the order recorded: by ID
				if a.files[i].Role != store.FilePattern {
					e.Files = append(e.Files, a.files[i].FileRecord)
				}
			}
			out = append(out, e)
		}
	}
	store.SortCache(out)
	return out, nil
}

// ListCache implements store.Assets.
func (s *Store) ListCache(ctx context.Context, f store.CacheFilter) ([]store.CacheEntry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []store.CacheEntry
	s.eachCache(&f, func(_ map[store.AttemptRef]store.CacheEntry, _ store.AttemptRef, e *store.CacheEntry) {
		out = append(out, *e)
	})
	store.SortCache(out)
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// PurgeCache implements store.Assets.
func (s *Store) PurgeCache(ctx context.Context, f store.CacheFilter) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	n := 0
	s.eachCache(&f, func(m map[store.AttemptRef]store.CacheEntry, ref store.AttemptRef, _ *store.CacheEntry) {
		delete(m, ref)
		n++
	})
	for key, m := range s.assets.cache {
		if len(m) == 0 {
			delete(s.assets.cache, key)
		}
	}
	return n, nil
}

// eachCache calls fn with each entry f selects (fn may delete it from m).
func (s *Store) eachCache(f *store.CacheFilter, fn func(m map[store.AttemptRef]store.CacheEntry, ref store.AttemptRef, e *store.CacheEntry)) {
	for key, m := range s.assets.cache {
		if f.Key != "" && key != f.Key {
			continue
		}
		for ref, e := range m {
			if cacheMatch(&e, f) {
				fn(m, ref, &e)
			}
		}
	}
}

// ConfirmFiles implements store.Assets.
func (s *Store) ConfirmFiles(ctx context.Context, recs []store.FileRecord) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, store.ErrClosed
	}
	a := &s.assets
	n := 0
	for _, r := range recs {
		i, ok := sort.Find(len(a.files), func(j int) int {
			switch id := a.files[j].ID; {
			case r.ID < id:
				return -1
			case r.ID > id:
				return 1
			}
			return 0
		})
		if !ok {
			continue
		}
		f := &a.files[i].FileRecord
		if f.State == store.FileOK && f.Hash == r.Hash && f.Size == r.Size && f.ModTime.Equal(r.ModTime) && f.Dev == r.Dev &&
			f.Ino == r.Ino && f.VerifiedAt.Before(r.VerifiedAt) {
			f.VerifiedAt = r.VerifiedAt
			n++
		}
	}
	return n, nil
}
