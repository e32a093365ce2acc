-- Run search (store.RunFilter's search fields, docs/reference/cli/inspecting.md "runs"): each filter is answered from
-- an index that holds only what it selects, so a search over 100,000 runs reads the matching
-- entries, not every run (docs/design/performance.md, "Search"). The same tables and indexes as SQLite's
-- migration 0011.
--
-- run_inputs: the top-level members of a run's inputs that a search by input value can match —
-- strings, integers within 64 bits (their decimal text) and booleans ('true', 'false'), key and
-- value at most 256 characters (store.MaxSearchText) — written by a trigger when the run is
-- inserted (inputs are never updated) and deleted with the run (ON DELETE CASCADE, through the
-- primary key's run_id prefix). A table rather than a GIN index on inputs::jsonb: inputs are
-- stored as bytes (BYTEA), and one small b-tree serves SQLite and PostgreSQL alike.
CREATE TABLE run_inputs (
    run_id TEXT NOT NULL REFERENCES workflows (id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key, value)
);
CREATE INDEX run_inputs_value ON run_inputs (key, value, run_id);

-- run_inputs_of returns the searchable members of inputs (see above); none when inputs is not
-- a JSON object (or not JSON).
CREATE FUNCTION run_inputs_of(inputs BYTEA) RETURNS TABLE (key TEXT, value TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    j JSONB;
BEGIN
    IF inputs IS NULL THEN
        RETURN;
    END IF;
    BEGIN
        j := convert_from(inputs, 'UTF8')::jsonb;
    EXCEPTION WHEN others THEN
        RETURN;
    END;
    IF jsonb_typeof(j) <> 'object' THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT e.key, CASE jsonb_typeof(e.value) WHEN 'string' THEN e.value #>> '{}' ELSE e.value::text END
        FROM jsonb_each(j) e
        WHERE (jsonb_typeof(e.value) IN ('string', 'boolean')
            OR (jsonb_typeof(e.value) = 'number' AND e.value::text ~ '^-?[0-9]{1,19}$'
                AND e.value::text::numeric BETWEEN -9223372036854775808 AND 9223372036854775807))
            AND length(e.key) <= 256 AND length(CASE jsonb_typeof(e.value) WHEN 'string' THEN e.value #>> '{}' ELSE e.value::text END) <= 256;
END $$;

CREATE FUNCTION workflows_run_inputs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_inputs (run_id, key, value) SELECT NEW.id, i.key, i.value FROM run_inputs_of(NEW.inputs) i
        ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER workflows_run_inputs AFTER INSERT ON workflows
    FOR EACH ROW WHEN (NEW.inputs IS NOT NULL) EXECUTE FUNCTION workflows_run_inputs();

INSERT INTO run_inputs (run_id, key, value)
    SELECT w.id, i.key, i.value FROM workflows w, run_inputs_of(w.inputs) i WHERE w.inputs IS NOT NULL
    ON CONFLICT DO NOTHING;

-- By tool, worker, error kind and error text: the attempts that called a tool; those run by a
-- pool worker or a queue engine (worker is NULL for a tool run in the engine's process); those
-- that failed, with their message, so a text search reads failed attempts only.
CREATE INDEX step_attempts_tool ON step_attempts (tool, run_id);
CREATE INDEX step_attempts_worker ON step_attempts (worker text_pattern_ops, run_id) WHERE worker IS NOT NULL;
CREATE INDEX step_attempts_error ON step_attempts (error_kind, run_id, error_message) WHERE error_kind IS NOT NULL;

-- By step status and a step's own error (a step that failed without an attempt: a skipped
-- step's reason, a sub-workflow's failure). Completed, the status of most step rows, is left
-- out of the status index: a search for it walks the newest runs instead (store.RunFilter).
CREATE INDEX workflow_steps_status ON workflow_steps (status, run_id) WHERE status <> 'completed';
CREATE INDEX workflow_steps_error ON workflow_steps (error_kind, run_id, error_message) WHERE error_message <> '';
