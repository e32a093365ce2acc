package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/dcc-flow/dcc-flow/engine/internal/store"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/pathkey"
	"github.com/dcc-flow/dcc-flow/engine/internal/store/sqlrow"
)

var _ store.Assets = (*Store)(nil)

// sqlKey is the key of a file record's path (migration 0013): the expression of the index
// file_records_path_key, which a query must spell the same way for SQLite to use it.
const sqlKey = `coalesce(path_key, path)`

// Files implements store.Assets.
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
	return s.filesIndexed(ctx, &f, "")
}

// filesIndexed is Files as SQLite plans it: through the index the conditions of f name, if any
// (index, when not "", is NOT INDEXED), sorting what it selects by id, with the conditions
// extra besides.
func (s *Store) filesIndexed(ctx context.Context, f *store.FileFilter, index string, extra ...string) ([]store.FileRecord, error) {
	where, args, err := fileWhere(f)
	if err != nil {
		return nil, err
	}
	if f.AfterID > 0 {
		where, args = append(where, `id > ?`), append(args, f.AfterID)
	}
	where = append(where, extra...)
	q := `SELECT ` + sqlrow.FileColumns + ` FROM file_records` + index
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY id`
	if f.Limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	return s.queryFiles(ctx, q, args)
}

// pagedProbe and pagedWindow tune filesPaged: a page of Limit records of a selection of fewer
// than pagedProbe×Limit records is read through the index of its conditions; else the table is
// read in id order from AfterID, through at most pagedWindow×Limit ids (SQLite steps over a
// row it does not select in about 20 ns: 256,000 of them cost some 5 ms). A page of more than
// maxPagedLimit records is read through the index (its window could overflow).
const (
	maxPagedLimit = 1 << 20
	pagedProbe    = 4
	pagedWindow   = 256
)

// filesPaged is Files for a page (Limit > 0) of a selection an index answers but not in id
// order: the records under a directory (the key index), of a run or a step (the unique index,
// whose entries of a run are by step, attempt, role and path), of the attempts listed. Through
// such an index a query cannot start past AfterID: each page would read the whole selection
// and sort what is past AfterID, so reading a selection would cost the square of its size
// (100 pages of 1,000 of 100,000 records under a directory: a first page took 30 ms, against
// 4–5 ms for a page read by id). So a count through the index, capped at pagedProbe×Limit
// entries, tells a small selection, read through the index, from a large one, whose page is
// read from the table in id order instead, from the first id past AfterID through a window of
// pagedWindow×Limit ids; what the window did not fill (the selection's records are sparse
// there, or there are no more) is read through the index, past the window.
func (s *Store) filesPaged(ctx context.Context, f store.FileFilter) ([]store.FileRecord, error) {
	where, args, err := fileWhere(&f)
	if err != nil {
		return nil, err
	}
	probe := f.Limit * pagedProbe
	var n int
	var first sql.NullInt64
	if err := s.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM (SELECT 1 FROM file_records WHERE `+
		strings.Join(where, ` AND `)+` LIMIT ?)), (SELECT min(id) FROM file_records WHERE id > ?)`,
		append(args, probe, f.AfterID)...).Scan(&n, &first); err != nil {
		return nil, s.fault(err)
	}
	if n < probe || !first.Valid {
		return s.filesIndexed(ctx, &f, "")
	}
	end := first.Int64 + int64(f.Limit)*pagedWindow
	out, err := s.filesIndexed(ctx, &f, ` NOT INDEXED`, fmt.Sprintf(`id < %d`, end))
	if err != nil || len(out) == f.Limit {
		return out, err
	}
	rest := f
	rest.AfterID, rest.Limit = end-1, f.Limit-len(out)
	more, err := s.filesIndexed(ctx, &rest, "")
	return append(out, more...), err
}

// fileWhere returns the conditions of f but for its paging (AfterID, Limit).
func fileWhere(f *store.FileFilter) (where []string, args []any, err error) {
	if f.RunID != "" {
		where, args = append(where, `run_id = ?`), append(args, f.RunID)
	}
	if f.StepKey != "" {
		where, args = append(where, `step_key = ?`), append(args, f.StepKey)
	}
	if f.Attempt != 0 {
		where, args = append(where, `attempt = ?`), append(args, int64(f.Attempt))
	}
	if f.Role != "" {
		where, args = append(where, `role = ?`), append(args, string(f.Role))
	} else if !f.WithPatterns {
		where = append(where, `role <> '`+string(store.FilePattern)+`'`)
	}
	if f.Path != "" {
		// Through the key's index: the key of the path, then the path itself (a Windows path's
		// key is shared by its case variants).
		where, args = append(where, sqlKey+` = ? AND path = ?`), append(args, pathkey.Key(f.Path), f.Path)
	}
	if f.Under != "" {
		exact, lo, hi := pathkey.Range(f.Under)
		where = append(where, `(`+sqlKey+` = ? OR `+sqlKey+` >= ? AND `+sqlKey+` < ?)`)
		args = append(args, exact, lo, hi)
	}
	if f.Attempts != nil {
		refs := make([][3]any, len(f.Attempts))
		for i, a := range f.Attempts {
			refs[i] = [3]any{a.RunID, a.StepKey, a.Attempt}
		}
		b, err := json.Marshal(refs)
		if err != nil {
			return nil, nil, err
		}
		where = append(where, `(run_id, step_key, attempt) IN (SELECT json_extract(value, '$[0]'),
			json_extract(value, '$[1]'), json_extract(value, '$[2]') FROM json_each(?))`)
		args = append(args, string(b))
	}
	return where, args, nil
}

// CacheEntries implements store.Assets in one query (cacheLookupQuery), through the unique
// indexes cache_entries_key and file_records_attempt. A ctx already done is its error; once the
// query started, ctx is not watched: the read of one key's rows is short, and watching a
// context costs database/sql and the SQLite driver a goroutine each per query, together about
// as much as the query (some 20 µs: a cached step makes one such read).
func (s *Store) CacheEntries(ctx context.Context, key string, now time.Time) ([]store.CacheEntry, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows, err := s.readStmts.query(context.WithoutCancel(ctx), s.r, cacheLookupQuery, key, nanos(now))
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
	if err := rows.Err(); err != nil {
		return nil, s.fault(err)
	}
	store.SortCache(out)
	return out, nil
}

// cacheLookupQuery selects the unexpired entries of a key (?1, at ?2) with the file records of
// their attempts (sqlrow.CacheLookupColumns), in one statement; unordered, entries and records
// (an ORDER BY costs SQLite a sorter even for the one row a key mostly has): CacheEntries and
// sqlrow.CacheLookup sort them.
const cacheLookupQuery = `SELECT ` + sqlrow.CacheColumns + `, (SELECT json_group_array(json_array(` + sqlrow.CacheFileFields + `))
		FROM file_records f WHERE f.run_id = c.run_id AND f.step_key = c.step_key AND f.attempt = c.attempt
			AND f.role <> '` + string(store.FilePattern) + `')
	FROM cache_entries c WHERE key = ?1 AND (expires_at = 0 OR expires_at > ?2)`

// cacheOrder is the order cache entries are listed in: newest first; for the same CreatedAt,
// by key, run, step and attempt.
const cacheOrder = `created_at DESC, key, run_id, step_key, attempt`

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
	rows, err := s.readStmts.query(ctx, s.r, q, args...)
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
	if f.Key != "" {
		where, args = append(where, `key = ?`), append(args, f.Key)
	}
	if f.Tool != "" {
		where, args = append(where, `tool = ?`), append(args, f.Tool)
	}
	if f.Workflow != "" {
		where, args = append(where, `workflow = ?`), append(args, f.Workflow)
	}
	if f.RunID != "" {
		where, args = append(where, `run_id = ?`), append(args, f.RunID)
	}
	if !f.Before.IsZero() {
		where, args = append(where, `created_at < ?`), append(args, nanos(f.Before))
	}
	if len(where) == 0 {
		return "", nil
	}
	return ` WHERE ` + strings.Join(where, ` AND `), args
}

// PurgeCache implements store.Assets: one DELETE on the writer connection, between two group
// commits.
func (s *Store) PurgeCache(ctx context.Context, f store.CacheFilter) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	if s.checkLock != nil {
		if err := s.checkLock(); err != nil {
			return 0, err
		}
	}
	if fe := s.broken.Load(); fe != nil {
		return 0, fe
	}
	where, args := cacheWhere(&f)
	res, err := s.w.ExecContext(ctx, `DELETE FROM cache_entries`+where, args...)
	if err != nil {
		return 0, fmt.Errorf("purging the cache: %w", s.fault(err))
	}
	n, _ := res.RowsAffected()
	if s.ckpt != nil {
		s.ckpt.committed()
	}
	return int(n), nil
}

// ConfirmFiles implements store.Assets: one UPDATE on the writer connection, between two group
// commits, of the records whose ids, states, hashes and stats are recs's (the records as a JSON
// array, read by json_each, through the primary key).
func (s *Store) ConfirmFiles(ctx context.Context, recs []store.FileRecord) (int, error) {
	if err := s.checkWrite(); err != nil {
		return 0, err
	}
	if len(recs) == 0 {
		return 0, nil
	}
	if s.checkLock != nil {
		if err := s.checkLock(); err != nil {
			return 0, err
		}
	}
	if fe := s.broken.Load(); fe != nil {
		return 0, fe
	}
	rows := make([][7]any, len(recs))
	for i, r := range recs {
		rows[i] = [7]any{r.ID, r.Hash, r.Size, nanos(r.ModTime), int64(r.Dev), int64(r.Ino), nanos(r.VerifiedAt)}
	}
	b, err := json.Marshal(rows)
	if err != nil {
		return 0, err
	}
	res, err := s.w.ExecContext(ctx, sqlFileConfirm, string(b))
	if err != nil {
		return 0, fmt.Errorf("confirming file records: %w", s.fault(err))
	}
	n, _ := res.RowsAffected()
	if s.ckpt != nil {
		s.ckpt.committed()
	}
	return int(n), nil
}

// sqlFileConfirm sets verified_at from a JSON array of [id, hash, size, mod_time, dev, ino,
// verified_at] (ConfirmFiles).
const sqlFileConfirm = `UPDATE file_records SET verified_at = c.at
	FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS hash, json_extract(value, '$[2]') AS size,
		json_extract(value, '$[3]') AS mod_time, json_extract(value, '$[4]') AS dev, json_extract(value, '$[5]') AS ino,
		json_extract(value, '$[6]') AS at FROM json_each(?)) AS c
	WHERE file_records.id = c.id AND file_records.state = 'ok' AND file_records.hash = c.hash AND file_records.size = c.size
		AND file_records.mod_time = c.mod_time AND file_records.dev = c.dev AND file_records.ino = c.ino
		AND file_records.verified_at < c.at`

func (s *Store) queryFiles(ctx context.Context, q string, args []any) ([]store.FileRecord, error) {
	rows, err := s.readStmts.query(ctx, s.r, q, args...)
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
