package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/pathkey"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
)

var _ store.Assets = (*Store)(nil)

// sqlKey is the key of a file record's path (migration 0012): the expression of the index
// file_records_path_key, which a query must spell the same way for PostgreSQL to use it.
const sqlKey = `coalesce(path_key, path)`

// Files implements store.Assets. Texts are compared as stored: cleaned as PostgreSQL's TEXT
// needs (text), as they were when written.
func (s *Store) Files(ctx context.Context, f store.FileFilter) ([]store.FileRecord, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if f.Attempts != nil && len(f.Attempts) == 0 {
		return nil, nil // any of no attempts: none
	}
	if f.Under != "" && f.Limit > 0 && f.Limit <= maxUnderPage && f.Path == "" && f.RunID == "" && f.Attempts == nil {
		return s.filesUnder(ctx, f)
	}
	return s.queryFiles(ctx, &f, sqlKey)
}

// underProbe and underWindow tune filesUnder: a page of Limit records under a directory that
// holds fewer than underProbe×Limit records is read through the key index and sorted; else the
// table is read in ID order from AfterID, in windows of 2×Limit IDs, then twice that, and so on
// up to underWindow×Limit IDs in all.
// A page of more than maxUnderPage records is read as SQL plans it (its windows would be
// larger than most directories, and their sizes could overflow).
const (
	maxUnderPage = 1 << 20
	underProbe   = 4
	underWindow  = 30
)

// filesUnder is Files for a page (Limit > 0) of the records under a directory, with no other
// indexed condition, as the SQLite store does it (see its filesUnder): the records are wanted in
// ID order, which the key index does not have, so a page of a directory of many records is read
// from the table by ID, not through the key index and a sort of the whole directory at each
// page (100 pages of 1,000 of 100,000 records took 5.5 s that way). A capped count through the
// key index (an ordered index scan, which stops at the cap: a bitmap scan would read it all)
// tells a directory of few records, read through it. The planner reads a window of IDs whole
// (a bitmap scan of the primary key) when it expects few rows, which it does of a table it has
// no statistics of yet, so the windows start small and grow: a page of a dense directory reads
// about 2×Limit rows.
func (s *Store) filesUnder(ctx context.Context, f store.FileFilter) ([]store.FileRecord, error) {
	_, lo, hi := pathkey.Range(text(f.Under)) // the directory itself is one record at most: it does not change the plan
	probe := f.Limit * underProbe
	var n int
	var first *int64
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM file_records
			WHERE `+sqlKey+` >= $1 AND `+sqlKey+` < $2 ORDER BY `+sqlKey+` LIMIT $3) x),
			(SELECT min(id) FROM file_records WHERE id > $4)`,
		lo, hi, probe, f.AfterID).Scan(&n, &first); err != nil {
		return nil, s.fault(err)
	}
	if n < probe || first == nil {
		return s.queryFiles(ctx, &f, sqlKey)
	}
	var out []store.FileRecord
	start, window := *first, int64(2*f.Limit)
	for read := int64(0); read < int64(f.Limit*underWindow); read, start, window = read+window, start+window, 2*window {
		// The key spelt otherwise than the index's expression, so that the planner cannot choose it.
		page := f
		page.AfterID, page.Limit = start-1, f.Limit-len(out)
		got, err := s.queryFiles(ctx, &page, `coalesce(path_key, path, '')`, fmt.Sprintf(`id < %d`, start+window))
		if out = append(out, got...); err != nil || len(out) == f.Limit {
			return out, err
		}
	}
	rest := f
	rest.AfterID, rest.Limit = start-1, f.Limit-len(out)
	more, err := s.queryFiles(ctx, &rest, sqlKey)
	return append(out, more...), err
}

// queryFiles runs the query of f (but for an empty Attempts), with key as the expression of a
// path's key and the conditions extra besides.
func (s *Store) queryFiles(ctx context.Context, f *store.FileFilter, key string, extra ...string) ([]store.FileRecord, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.RunID != "" {
		where = append(where, `run_id = `+arg(text(f.RunID)))
	}
	if f.StepKey != "" {
		where = append(where, `step_key = `+arg(text(f.StepKey)))
	}
	if f.Attempt != 0 {
		where = append(where, `attempt = `+arg(int64(f.Attempt)))
	}
	if f.Role != "" {
		where = append(where, `role = `+arg(text(string(f.Role))))
	}
	if f.Path != "" {
		// Through the key's index: the key of the path, then the path itself (a Windows path's
		// key is shared by its case variants).
		p := text(f.Path)
		where = append(where, key+` = `+arg(pathkey.Key(p))+` AND path = `+arg(p))
	}
	if f.Under != "" {
		exact, lo, hi := pathkey.Range(text(f.Under))
		where = append(where, `(`+key+` = `+arg(exact)+` OR `+key+` >= `+arg(lo)+` AND `+key+` < `+arg(hi)+`)`)
	}
	if f.Attempts != nil {
		n := len(f.Attempts)
		runs, keys, atts := make([]string, n), make([]string, n), make([]int64, n)
		for i, a := range f.Attempts {
			runs[i], keys[i], atts[i] = text(a.RunID), text(a.StepKey), int64(a.Attempt)
		}
		where = append(where, `(run_id, step_key, attempt) IN (SELECT * FROM unnest(`+arg(runs)+`::text[], `+arg(keys)+
			`::text[], `+arg(atts)+`::bigint[]))`)
	}
	if f.AfterID > 0 {
		where = append(where, `id > `+arg(f.AfterID))
	}
	where = append(where, extra...)
	q := `SELECT ` + sqlrow.FileColumns + ` FROM file_records`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY id`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.FileRecord
	for rows.Next() {
		r, err := sqlrow.File(rows)
		if err != nil {
			return nil, s.fault(err)
		}
		out = append(out, r)
	}
	return out, s.fault(rows.Err())
}

// cacheOrder is the order cache entries are listed in: newest first; for the same CreatedAt,
// by key, run, step and attempt, byte-wise.
const cacheOrder = `created_at DESC, key, run_id COLLATE "C", step_key, attempt`

// CacheEntries implements store.Assets, through the unique index cache_entries_key.
func (s *Store) CacheEntries(ctx context.Context, key string, now time.Time) ([]store.CacheEntry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.queryCache(ctx, `SELECT `+sqlrow.CacheColumns+` FROM cache_entries
		WHERE key = $1 AND (expires_at = 0 OR expires_at > $2) ORDER BY `+cacheOrder, text(key), nanos(now))
}

// ListCache implements store.Assets.
func (s *Store) ListCache(ctx context.Context, f store.CacheFilter) ([]store.CacheEntry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	where, args := cacheWhere(&f)
	q := `SELECT ` + sqlrow.CacheColumns + ` FROM cache_entries` + where + ` ORDER BY ` + cacheOrder
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	return s.queryCache(ctx, q, args...)
}

func (s *Store) queryCache(ctx context.Context, q string, args ...any) ([]store.CacheEntry, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.CacheEntry
	for rows.Next() {
		e, err := sqlrow.Cache(rows)
		if err != nil {
			return nil, s.fault(err)
		}
		out = append(out, e)
	}
	return out, s.fault(rows.Err())
}

// cacheWhere returns the WHERE clause of f ("" when it selects every entry).
func cacheWhere(f *store.CacheFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Key != "" {
		where = append(where, `key = `+arg(text(f.Key)))
	}
	if f.Tool != "" {
		where = append(where, `tool = `+arg(text(f.Tool)))
	}
	if f.Workflow != "" {
		where = append(where, `workflow = `+arg(text(f.Workflow)))
	}
	if f.RunID != "" {
		where = append(where, `run_id = `+arg(text(f.RunID)))
	}
	if !f.Before.IsZero() {
		where = append(where, `created_at < `+arg(nanos(f.Before)))
	}
	if len(where) == 0 {
		return "", nil
	}
	return ` WHERE ` + strings.Join(where, ` AND `), args
}

// PurgeCache implements store.Assets: one DELETE, which another engine's concurrent write of
// the same entries waits for or follows.
func (s *Store) PurgeCache(ctx context.Context, f store.CacheFilter) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	where, args := cacheWhere(&f)
	tag, err := s.pool.Exec(ctx, `DELETE FROM cache_entries`+where, args...)
	if err != nil {
		return 0, s.fault(fmt.Errorf("purging the cache: %w", err))
	}
	return int(tag.RowsAffected()), nil
}
