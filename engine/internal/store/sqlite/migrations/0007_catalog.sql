-- The workflow catalog (docs/reference/python/running.md, "The catalog"): every version of every registered
-- workflow, numbered per name in the order first registered; current marks the one runs by
-- name use (none after the workflow is unregistered; its versions stay for the runs that used
-- them). spec is the canonical JSON the engine rebuilds the workflow from when it opens.
CREATE TABLE workflow_versions (
    name          TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    spec_hash     TEXT    NOT NULL,
    spec          TEXT    NOT NULL,
    description   TEXT    NOT NULL DEFAULT '',
    registered_at INTEGER NOT NULL,
    current       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (name, version),
    UNIQUE (name, spec_hash)
) WITHOUT ROWID;
