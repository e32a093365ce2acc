-- dcc-flow schema, version 1. Times are Unix nanoseconds (UTC); 0 means "not set".
CREATE TABLE workflows (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL DEFAULT '',
    spec_json   BLOB NOT NULL,
    spec_hash   TEXT NOT NULL,
    inputs      BLOB,
    status      TEXT NOT NULL,
    error       BLOB,
    origin      TEXT NOT NULL DEFAULT 'local',
    env_allow   BLOB,
    trigger     BLOB,
    completed   INTEGER NOT NULL DEFAULT 0,
    total       INTEGER NOT NULL DEFAULT 0,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX workflows_status ON workflows(status);
CREATE INDEX workflows_name ON workflows(name);
CREATE INDEX workflows_created ON workflows(created_at DESC, id DESC);

CREATE TABLE workflow_steps (
    run_id        TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    key           TEXT NOT NULL,
    ord           INTEGER NOT NULL,
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
    PRIMARY KEY (run_id, key)
);
CREATE INDEX workflow_steps_order ON workflow_steps(run_id, ord);

CREATE TABLE workflow_events (
    seq      INTEGER PRIMARY KEY,
    run_id   TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    time     INTEGER NOT NULL,
    type     TEXT NOT NULL,
    step_key TEXT NOT NULL DEFAULT '',
    status   TEXT NOT NULL DEFAULT '',
    attempt  INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    total    INTEGER NOT NULL DEFAULT 0,
    detail   BLOB
);
CREATE INDEX workflow_events_run ON workflow_events(run_id, seq);

-- Workflow-scoped entries belong to their run (run_id set) and go with it; global entries have
-- run_id '' and live until their TTL or purge_expired.
CREATE TABLE workflow_idempotency (
    scope      TEXT NOT NULL,
    run_id     TEXT NOT NULL,
    key        TEXT NOT NULL,
    output     BLOB,
    file_refs  BLOB,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, run_id, key)
);
CREATE TRIGGER workflow_idempotency_cascade AFTER DELETE ON workflows BEGIN
    DELETE FROM workflow_idempotency WHERE scope = 'workflow' AND run_id = OLD.id;
END;

CREATE TABLE artefacts (
    sha256 TEXT PRIMARY KEY,
    size   INTEGER NOT NULL,
    data   BLOB NOT NULL
);

CREATE TABLE schedule_fires (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id  TEXT NOT NULL,
    kind         TEXT NOT NULL,
    reason       TEXT NOT NULL DEFAULT '',
    message      TEXT NOT NULL DEFAULT '',
    run_id       TEXT NOT NULL DEFAULT '',
    origin       TEXT NOT NULL DEFAULT '',
    scheduled_at INTEGER NOT NULL,
    fired_at     INTEGER NOT NULL,
    delivery_id  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX schedule_fires_schedule ON schedule_fires(schedule_id, id DESC);
CREATE INDEX schedule_fires_delivery ON schedule_fires(schedule_id, delivery_id);
