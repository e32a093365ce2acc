package memcluster

import (
	"context"
	"fmt"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
)

var _ store.Assets = (*Store)(nil)

// assets returns the inner store's store.Assets, or an error when it has none.
func (s *Store) assets() (store.Assets, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	a, ok := s.db.inner.(store.Assets)
	if !ok {
		return nil, fmt.Errorf("memcluster: the inner store (%T) keeps no file records or cache entries (store.Assets)", s.db.inner)
	}
	return a, nil
}

// Files implements store.Assets: the inner store's.
func (s *Store) Files(ctx context.Context, f store.FileFilter) ([]store.FileRecord, error) {
	a, err := s.assets()
	if err != nil {
		return nil, err
	}
	return a.Files(ctx, f)
}

// CacheEntries implements store.Assets: the inner store's.
func (s *Store) CacheEntries(ctx context.Context, key string, now time.Time) ([]store.CacheEntry, error) {
	a, err := s.assets()
	if err != nil {
		return nil, err
	}
	return a.CacheEntries(ctx, key, now)
}

// ListCache implements store.Assets: the inner store's.
func (s *Store) ListCache(ctx context.Context, f store.CacheFilter) ([]store.CacheEntry, error) {
	a, err := s.assets()
	if err != nil {
		return nil, err
	}
	return a.ListCache(ctx, f)
}

// PurgeCache implements store.Assets: the inner store's, ordered with the handles' writes.
func (s *Store) PurgeCache(ctx context.Context, f store.CacheFilter) (int, error) {
	a, err := s.assets()
	if err != nil {
		return 0, err
	}
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	return a.PurgeCache(ctx, f)
}

// ConfirmFiles implements store.Assets: the inner store's, ordered with the handles' writes.
func (s *Store) ConfirmFiles(ctx context.Context, recs []store.FileRecord) (int, error) {
	a, err := s.assets()
	if err != nil {
		return 0, err
	}
	s.db.mu.Lock()
	defer s.db.mu.Unlock()
	return a.ConfirmFiles(ctx, recs)
}
