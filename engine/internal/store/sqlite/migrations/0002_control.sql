-- Requests from processes that opened the database read-only (dcc-flow approve/cancel from
-- another terminal) to the process that owns it and runs the run. The owner polls the rows
-- with handled_at = 0, applies each, and writes the outcome back.
CREATE TABLE control_requests (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id      TEXT NOT NULL,
    action      TEXT NOT NULL,            -- 'approve' or 'cancel'
    step_key    TEXT NOT NULL DEFAULT '',
    approved    INTEGER NOT NULL DEFAULT 0,
    reason      TEXT NOT NULL DEFAULT '',
    by          TEXT NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    handled_at  INTEGER NOT NULL DEFAULT 0,
    error_code  TEXT NOT NULL DEFAULT '',
    error       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX control_requests_open ON control_requests(handled_at) WHERE handled_at = 0;
