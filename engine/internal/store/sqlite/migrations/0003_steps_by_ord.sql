-- Fewer b-trees written per step (each is a page, a WAL frame, per commit) and a smaller file:
-- a step row is stored under its ord (the rowid), so the separate (run_id, ord) index goes;
-- (run_id, key) stays unique. An event index on run_id alone is ordered by seq (the rowid)
-- within a run, as (run_id, seq) was, without storing seq twice.
CREATE TABLE workflow_steps_v3 (
    ord           INTEGER PRIMARY KEY,
    run_id        TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    step_id       TEXT NOT NULL,
    kind          TEXT NOT NULL,
    status        TEXT NOT NULL,
    attempt       INTEGER NOT NULL DEFAULT 0,
    output        BLOB,
    file_refs     BLOB,
    error_kind    TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    error_trace   TEXT NOT NULL DEFAULT '',
    cached        INTEGER NOT NULL DEFAULT 0,
    started_at    INTEGER NOT NULL DEFAULT 0,
    finished_at   INTEGER NOT NULL DEFAULT 0,
    updated_at    INTEGER NOT NULL DEFAULT 0,
    UNIQUE (run_id, key)
);
INSERT INTO workflow_steps_v3 (ord, run_id, key, step_id, kind, status, attempt, output, file_refs,
        error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at)
    SELECT ord, run_id, key, step_id, kind, status, attempt, output, file_refs,
        error_kind, error_message, error_trace, cached, started_at, finished_at, updated_at
    FROM workflow_steps ORDER BY ord;
DROP TABLE workflow_steps;
ALTER TABLE workflow_steps_v3 RENAME TO workflow_steps;

DROP INDEX workflow_events_run;
CREATE INDEX workflow_events_run ON workflow_events(run_id);
