-- Assets (store.Assets, docs/guide/assets.md): the files each attempt read and wrote, the content
-- cache of the steps with cache: on, and the environment an attempt ran in; the tables of
-- SQLite's migration 0013, with the same semantics. Written in the transaction of the attempts
-- (Batch.Files, Batch.CacheEntries); deleted with their run (ON DELETE CASCADE: Prune). Times are
-- Unix nanoseconds, 0 for none; empty texts are NULL.
--
-- file_records: one row per (run_id, step_key, attempt, role, path); writing the same one again
-- replaces its other columns and keeps its id (an identity: never used twice, so paging by id
-- never sees a row twice). dev and ino hold the bits of the uint64s. path_key is the path's key
-- for Under (store/pathkey), NULL when it is the path itself (a POSIX-form path); paths and
-- keys compare byte-wise (COLLATE "C"), as Under's ranges need: [dir+sep, dir+sep+1). The index
-- file_records_path_key, on (coalesce(path_key, path), id), serves both the lookups by exact
-- path (key = Key(p) AND path = p) and the Under ranges; the unique index the lookups by
-- attempt, by step and by run (the cascade of a run's deletion).
CREATE TABLE file_records (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      TEXT NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    step_key    TEXT NOT NULL,
    attempt     BIGINT NOT NULL,
    role        TEXT NOT NULL,
    path        TEXT COLLATE "C" NOT NULL,
    path_key    TEXT COLLATE "C",
    state       TEXT NOT NULL,
    size        BIGINT NOT NULL DEFAULT 0,
    mod_time    BIGINT NOT NULL DEFAULT 0,
    dev         BIGINT NOT NULL DEFAULT 0,
    ino         BIGINT NOT NULL DEFAULT 0,
    hash        TEXT,
    error       TEXT,
    recorded_at BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX file_records_attempt ON file_records (run_id, step_key, attempt, role, path);
CREATE INDEX file_records_path_key ON file_records ((coalesce(path_key, path)), id);

-- cache_entries: one row per (key, run_id, step_key, attempt), upserted. The unique index serves
-- the lookups by key; cache_entries_run the deletion with the run; cache_entries_created the
-- listing newest first. Texts compare byte-wise, for the order of entries created at once.
CREATE TABLE cache_entries (
    key        TEXT COLLATE "C" NOT NULL,
    run_id     TEXT NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    step_key   TEXT COLLATE "C" NOT NULL,
    attempt    BIGINT NOT NULL,
    tool       TEXT NOT NULL DEFAULT '',
    step_id    TEXT NOT NULL DEFAULT '',
    workflow   TEXT NOT NULL DEFAULT '',
    parts      BYTEA,
    output     BYTEA,
    file_refs  BYTEA,
    created_at BIGINT NOT NULL DEFAULT 0,
    expires_at BIGINT NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX cache_entries_key ON cache_entries (key, run_id, step_key, attempt);
CREATE INDEX cache_entries_run ON cache_entries (run_id);
CREATE INDEX cache_entries_created ON cache_entries (created_at);

-- The environment of the process that ran an attempt (store.Attempt.Env, a JSON object); NULL
-- when none was reported.
ALTER TABLE step_attempts ADD COLUMN env TEXT;
