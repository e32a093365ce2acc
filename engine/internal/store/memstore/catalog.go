package memstore

import (
	"context"
	"slices"
	"strings"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

var _ store.Catalog = (*Store)(nil)

// SaveWorkflow implements store.Catalog.
func (s *Store) SaveWorkflow(_ context.Context, w store.WorkflowVersion) (store.WorkflowVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return store.WorkflowVersion{}, store.ErrClosed
	}
	if s.workflows == nil {
		s.workflows = make(map[string][]store.WorkflowVersion)
	}
	vs := s.workflows[w.Name]
	found := -1
	for i := range vs {
		vs[i].Current = false
		if vs[i].SpecHash == w.SpecHash {
			found = i
		}
	}
	if found < 0 {
		w.Version = len(vs) + 1
		w.Spec = slices.Clone(w.Spec)
		vs = append(vs, w)
		found = len(vs) - 1
	}
	vs[found].Current, vs[found].RegisteredAt = true, w.RegisteredAt.UTC()
	s.workflows[w.Name] = vs
	return vs[found], nil
}

// RemoveWorkflow implements store.Catalog.
func (s *Store) RemoveWorkflow(_ context.Context, name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, store.ErrClosed
	}
	removed := false
	for i := range s.workflows[name] {
		removed = removed || s.workflows[name][i].Current
		s.workflows[name][i].Current = false
	}
	return removed, nil
}

// WorkflowVersions implements store.Catalog.
func (s *Store) WorkflowVersions(_ context.Context, name string) ([]store.WorkflowVersion, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrClosed
	}
	var out []store.WorkflowVersion
	for n, vs := range s.workflows {
		if name != "" && n != name {
			continue
		}
		for i := len(vs) - 1; i >= 0; i-- {
			out = append(out, vs[i])
		}
	}
	slices.SortStableFunc(out, func(a, b store.WorkflowVersion) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return b.Version - a.Version
	})
	return out, nil
}
