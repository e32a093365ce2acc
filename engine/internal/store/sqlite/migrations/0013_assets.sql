-- Assets (store.Assets, docs/guide/assets.md): the files each attempt read and wrote, the content
-- cache of the steps with cache: on, and the environment an attempt ran in. Written in the
-- transaction of the attempts (Batch.Files, Batch.CacheEntries); deleted with their run (ON
-- DELETE CASCADE: Prune). Times are Unix nanoseconds, 0 for none; empty texts are NULL.
--
-- file_records: one row per (run_id, step_key, attempt, role, path); writing the same one again
-- replaces its other columns and keeps its id (AUTOINCREMENT: an id is never used twice, also
-- once the newest rows were pruned, so paging by id never sees a row twice). dev and ino hold
-- the bits of the uint64s. path_key is the path's key for Under (store/pathkey: the path upper-
-- cased with '/' as '\' for a Windows-form path), NULL when it is the path itself (a POSIX-form
-- path): the index file_records_path_key is on coalesce(path_key, path), the key of every row,
-- and serves both the lookups by exact path (key = Key(p) AND path = p: one entry but for the
-- case variants of a Windows path) and the Under ranges (key = dir OR key in [dir+sep,
-- dir+sep+1), byte-wise: the BINARY collation). The unique index serves the lookups by
-- attempt, by step and by run (the cascade of a run's deletion).
CREATE TABLE file_records (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    step_key    TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    role        TEXT NOT NULL,
    path        TEXT NOT NULL,
    path_key    TEXT,
    state       TEXT NOT NULL,
    size        INTEGER NOT NULL DEFAULT 0,
    mod_time    INTEGER NOT NULL DEFAULT 0,
    dev         INTEGER NOT NULL DEFAULT 0,
    ino         INTEGER NOT NULL DEFAULT 0,
    hash        TEXT,
    error       TEXT,
    recorded_at INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX file_records_attempt ON file_records(run_id, step_key, attempt, role, path);
CREATE INDEX file_records_path_key ON file_records(coalesce(path_key, path));

-- cache_entries: one row per (key, run_id, step_key, attempt), upserted. The unique index serves
-- the lookups by key; cache_entries_run the deletion with the run; cache_entries_created the
-- listing newest first.
CREATE TABLE cache_entries (
    key        TEXT NOT NULL,
    run_id     TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    step_key   TEXT NOT NULL,
    attempt    INTEGER NOT NULL,
    tool       TEXT NOT NULL DEFAULT '',
    step_id    TEXT NOT NULL DEFAULT '',
    workflow   TEXT NOT NULL DEFAULT '',
    parts      BLOB,
    output     BLOB,
    file_refs  BLOB,
    created_at INTEGER NOT NULL DEFAULT 0,
    expires_at INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX cache_entries_key ON cache_entries(key, run_id, step_key, attempt);
CREATE INDEX cache_entries_run ON cache_entries(run_id);
CREATE INDEX cache_entries_created ON cache_entries(created_at);

-- The environment of the process that ran an attempt (store.Attempt.Env, a JSON object); NULL
-- when none was reported.
ALTER TABLE step_attempts ADD COLUMN env TEXT;
