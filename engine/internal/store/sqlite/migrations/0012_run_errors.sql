-- run_errors: a run's own error (store.RunError's kind and message), for the search by error kind
-- and error text (store.RunFilter) of runs whose error is the run's alone — cancelled before a
-- step ran, interrupted, a storage fault at the end — besides the errors of its attempts and
-- steps (migration 0011). Kept by triggers from workflows.error, written with the run; deleted
-- with the run (ON DELETE CASCADE).
CREATE TABLE run_errors (
    run_id  TEXT PRIMARY KEY REFERENCES workflows(id) ON DELETE CASCADE,
    kind    TEXT NOT NULL,
    message TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX run_errors_kind ON run_errors(kind, run_id, message);

CREATE TRIGGER workflows_run_errors_insert AFTER INSERT ON workflows
WHEN NEW.error IS NOT NULL AND json_valid(CAST(NEW.error AS TEXT))
BEGIN
    INSERT OR REPLACE INTO run_errors (run_id, kind, message) VALUES (NEW.id,
        coalesce(json_extract(CAST(NEW.error AS TEXT), '$.kind'), ''),
        coalesce(json_extract(CAST(NEW.error AS TEXT), '$.message'), ''));
END;

CREATE TRIGGER workflows_run_errors_update AFTER UPDATE OF error ON workflows
WHEN NEW.error IS NOT OLD.error
BEGIN
    DELETE FROM run_errors WHERE run_id = NEW.id;
    INSERT INTO run_errors (run_id, kind, message)
        SELECT NEW.id, coalesce(json_extract(CAST(NEW.error AS TEXT), '$.kind'), ''),
            coalesce(json_extract(CAST(NEW.error AS TEXT), '$.message'), '')
        WHERE NEW.error IS NOT NULL AND json_valid(CAST(NEW.error AS TEXT));
END;

INSERT OR REPLACE INTO run_errors (run_id, kind, message)
    SELECT id, coalesce(json_extract(CAST(error AS TEXT), '$.kind'), ''),
        coalesce(json_extract(CAST(error AS TEXT), '$.message'), '')
    FROM workflows WHERE error IS NOT NULL AND json_valid(CAST(error AS TEXT));
