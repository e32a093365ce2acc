-- Every attempt of a tool or tool_remote step (store.Attempt, docs/reference/cli/inspecting.md "show"): written in the
-- transaction of the step's own row, deleted with the run. Times are Unix nanoseconds; 0 means
-- "not set". Empty texts are NULL. At most the first 10 and the last 100 attempts of a step
-- instance are kept (store.MaxAttemptsFirst, store.MaxAttemptsLast).
CREATE TABLE step_attempts (
    run_id        TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    step_key      TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    tool          TEXT NOT NULL DEFAULT '',
    status        TEXT NOT NULL,
    started_at    INTEGER NOT NULL DEFAULT 0,
    finished_at   INTEGER NOT NULL DEFAULT 0,
    args          TEXT,
    worker        TEXT,
    host          TEXT,
    pid           INTEGER,
    error_kind    TEXT,
    error_message TEXT,
    error_trace   TEXT,
    exit          TEXT,
    PRIMARY KEY (run_id, step_key, attempt)
) WITHOUT ROWID;

-- The resume history of a run (store.AttemptLog.Resumes): its workflow_resumed events, found
-- without reading its other events.
CREATE INDEX workflow_events_resumed ON workflow_events(run_id, seq) WHERE type = 'workflow_resumed';
