-- run_errors: a run's own error (store.RunError's kind and message), for the search by error kind
-- and error text (store.RunFilter) of runs whose error is the run's alone — cancelled before a
-- step ran, interrupted, a storage fault at the end — besides the errors of its attempts and
-- steps (migration 0010). Kept by triggers from workflows.error, written with the run; deleted
-- with the run (ON DELETE CASCADE). The same table as SQLite's migration 0012.
CREATE TABLE run_errors (
    run_id  TEXT PRIMARY KEY REFERENCES workflows (id) ON DELETE CASCADE,
    kind    TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX run_errors_kind ON run_errors (kind, run_id, message);

-- run_error_of returns the kind and message of a stored error (BYTEA JSON); none when it is
-- NULL or not a JSON object.
CREATE FUNCTION run_error_of(err BYTEA) RETURNS TABLE (kind TEXT, message TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    j JSONB;
BEGIN
    IF err IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        j := convert_from(err, 'UTF8')::jsonb;
    EXCEPTION WHEN others THEN
        RETURN;
    END;
    IF jsonb_typeof(j) <> 'object' THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT coalesce(j ->> 'kind', ''), coalesce(j ->> 'message', '');
END $$;

CREATE FUNCTION workflows_run_errors() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM run_errors WHERE run_id = NEW.id;
    INSERT INTO run_errors (run_id, kind, message) SELECT NEW.id, e.kind, e.message FROM run_error_of(NEW.error) e;
    RETURN NULL;
END $$;

CREATE TRIGGER workflows_run_errors_insert AFTER INSERT ON workflows
    FOR EACH ROW WHEN (NEW.error IS NOT NULL) EXECUTE FUNCTION workflows_run_errors();
CREATE TRIGGER workflows_run_errors_update AFTER UPDATE OF error ON workflows
    FOR EACH ROW WHEN (NEW.error IS DISTINCT FROM OLD.error) EXECUTE FUNCTION workflows_run_errors();

INSERT INTO run_errors (run_id, kind, message)
    SELECT w.id, e.kind, e.message FROM workflows w, run_error_of(w.error) e WHERE w.error IS NOT NULL;
