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
	if f.SelectsNone() {
		return nil, nil
	}
	if f.PagesAWideSelection(maxPagedLimit) {
		return s.filesPaged(ctx, f)
	}
	return s.queryFiles(ctx, &f, 0)
}

// pagedProbe and pagedWindow tune filesPaged: a page of Limit records is read from the table
// in id order from AfterID, in windows of 2×Limit ids, then twice that, and so on up to
// pagedWindow×Limit ids in all, unless the first window did not fill the page and the selection
// has fewer than pagedProbe×Limit records: then it is read through the index of its
// conditions. A page of more than maxPagedLimit records is read through the index (its windows
// could overflow).
const (
	maxPagedLimit = 1 << 20
	pagedProbe    = 4
	pagedWindow   = 30
)

// filesPaged is Files for a page (Limit > 0) of a selection an index answers but not in id
// order — the records under a directory, of a run or a step, of the attempts listed — as the
// SQLite store does it (see its filesPaged): through the index, each page would read the
// whole selection and sort what is past AfterID (100 pages of 1,000 of 100,000 records under a
// directory took 5.5 s that way), so a page of a large selection is read from the table by id.
// The planner reads a window of ids whole (a bitmap scan of the primary key) when it expects
// few rows, as it does of a table it has no statistics of yet, and it would count a selection
// with a bitmap scan of its whole index, so the first window is small and read before any
// count: a page of a dense selection reads about 2×Limit rows and nothing else.
func (s *Store) filesPaged(ctx context.Context, f store.FileFilter) ([]store.FileRecord, error) {
	var first *int64
	if err := s.pool.QueryRow(ctx, `SELECT min(id) FROM file_records WHERE id > $1`, f.AfterID).Scan(&first); err != nil {
		return nil, s.fault(err)
	}
	if first == nil {
		return nil, nil // no record past AfterID
	}
	var out []store.FileRecord
	next := *first // the first id not read yet
	for window := int64(2 * f.Limit); next-*first < int64(f.Limit)*pagedWindow; window *= 2 {
		page := f
		page.AfterID, page.Limit = next-1, f.Limit-len(out)
		got, err := s.queryFiles(ctx, &page, next+window)
		if out, next = append(out, got...), next+window; err != nil || len(out) == f.Limit {
			return out, err
		}
		if window > int64(2*f.Limit) {
			continue
		}
		// The first window did not fill the page: a small selection is read through its index.
		var args []any
		where := fileWhere(&f, func(v any) string {
			args = append(args, v)
			return fmt.Sprintf("$%d", len(args))
		})
		var n int
		if err := s.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 1 FROM file_records WHERE %s LIMIT %d) x`,
			strings.Join(where, ` AND `), f.Limit*pagedProbe), args...).Scan(&n); err != nil {
			return nil, s.fault(err)
		}
		if n < f.Limit*pagedProbe {
			break
		}
	}
	rest := f
	rest.AfterID, rest.Limit = next-1, f.Limit-len(out)
	more, err := s.queryFiles(ctx, &rest, 0)
	return append(out, more...), err
}

// fileWhere returns the conditions of f but for its paging (AfterID, Limit), adding their
// arguments with arg.
func fileWhere(f *store.FileFilter, arg func(any) string) []string {
	var where []string
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
	} else if !f.WithPatterns {
		where = append(where, `role <> '`+string(store.FilePattern)+`'`)
	}
	if f.Path != "" {
		// Through the key's index: the key of the path, then the path itself (a Windows path's
		// key is shared by its case variants).
		p := text(f.Path)
		where = append(where, sqlKey+` = `+arg(pathkey.Key(p))+` AND path = `+arg(p))
	}
	if f.Under != "" {
		exact, lo, hi := pathkey.Range(text(f.Under))
		where = append(where, `(`+sqlKey+` = `+arg(exact)+` OR `+sqlKey+` >= `+arg(lo)+` AND `+sqlKey+` < `+arg(hi)+`)`)
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
	return where
}

// queryFiles runs the query of f (but for an empty Attempts): as the planner plans it, or, when
// before is not 0, over the rows of ids past AfterID and before it only, read whole (OFFSET 0
// keeps the planner from pushing the conditions into that read, and from using their indexes).
func (s *Store) queryFiles(ctx context.Context, f *store.FileFilter, before int64) ([]store.FileRecord, error) {
	var args []any
	where := fileWhere(f, func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	})
	from := `file_records`
	switch {
	case before != 0:
		from = fmt.Sprintf(`(SELECT * FROM file_records WHERE id > %d AND id < %d ORDER BY id OFFSET 0) w`, f.AfterID, before)
	case f.AfterID > 0:
		where = append(where, fmt.Sprintf(`id > %d`, f.AfterID))
	}
	q := `SELECT ` + sqlrow.FileColumns + ` FROM ` + from
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

// CacheEntries implements store.Assets in one query (one round trip), through the unique
// indexes cache_entries_key and file_records_attempt: each entry with the file records of its
// attempt as a JSON array (sqlrow.CacheLookupColumns).
func (s *Store) CacheEntries(ctx context.Context, key string, now time.Time) ([]store.CacheEntry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+sqlrow.CacheColumns+`, (SELECT json_agg(json_build_array(`+sqlrow.CacheFileFields+`) ORDER BY f.id)
		FROM file_records f WHERE f.run_id = c.run_id AND f.step_key = c.step_key
		AND f.attempt = c.attempt AND f.role <> '`+string(store.FilePattern)+`')::text
		FROM cache_entries c WHERE key = $1 AND (expires_at = 0 OR expires_at > $2) ORDER BY `+cacheOrder, text(key), nanos(now))
	if err != nil {
		return nil, s.fault(err)
	}
	defer rows.Close()
	var out []store.CacheEntry
	for rows.Next() {
		e, err := sqlrow.CacheLookup(rows)
		if err != nil {
			return nil, s.fault(err)
		}
		out = append(out, e)
	}
	return out, s.fault(rows.Err())
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

// ConfirmFiles implements store.Assets: one UPDATE of the records whose ids, states, hashes and
// stats are recs's (through the primary key), which another engine's concurrent write of the
// same records waits for or follows.
func (s *Store) ConfirmFiles(ctx context.Context, recs []store.FileRecord) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, nil
	}
	n := len(recs)
	id, size, mod, dev, ino, at := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	hash := make([]string, n)
	for i, r := range recs {
		id[i], hash[i], size[i], mod[i] = r.ID, text(r.Hash), r.Size, nanos(r.ModTime)
		dev[i], ino[i], at[i] = int64(r.Dev), int64(r.Ino), nanos(r.VerifiedAt)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE file_records f SET verified_at = c.at
		FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
			AS c(id, hash, size, mod_time, dev, ino, at)
		WHERE f.id = c.id AND f.state = 'ok' AND f.hash = c.hash AND f.size = c.size AND f.mod_time = c.mod_time
			AND f.dev = c.dev AND f.ino = c.ino AND f.verified_at < c.at`, id, hash, size, mod, dev, ino, at)
	if err != nil {
		return 0, s.fault(fmt.Errorf("confirming file records: %w", err))
	}
	return int(tag.RowsAffected()), nil
}
