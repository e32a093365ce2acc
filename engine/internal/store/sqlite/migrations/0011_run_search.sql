-- Run search (store.RunFilter's search fields, docs/reference/cli/inspecting.md "runs"): each filter is answered from
-- an index that holds only what it selects, so a search over 100,000 runs reads the matching
-- entries, not every run (docs/design/performance.md, "Search").
--
-- run_inputs: the top-level members of a run's inputs that a search by input value can match —
-- strings, integers (their decimal text) and booleans ('true', 'false'), key and value at most
-- 256 characters (store.MaxSearchText) — written by a trigger when the run is inserted (inputs
-- are never updated) and deleted with the run (ON DELETE CASCADE, through the primary key's
-- run_id prefix). A table rather than a JSON expression index: an expression index serves one
-- key named in advance, and input keys are each workflow's own. Nested values and reals are
-- not indexed (a real's text depends on who formats it).
CREATE TABLE run_inputs (
    run_id TEXT NOT NULL REFERENCES workflows(id) ON DELETE CASCADE,
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (run_id, key, value)
) WITHOUT ROWID;
CREATE INDEX run_inputs_value ON run_inputs(key, value);

CREATE TRIGGER workflows_run_inputs AFTER INSERT ON workflows
WHEN NEW.inputs IS NOT NULL AND json_valid(CAST(NEW.inputs AS TEXT)) AND json_type(CAST(NEW.inputs AS TEXT)) = 'object'
BEGIN
    INSERT OR IGNORE INTO run_inputs (run_id, key, value)
        SELECT NEW.id, j.key, CASE j.type WHEN 'text' THEN j.value WHEN 'integer' THEN CAST(j.value AS TEXT) ELSE j.type END
        FROM json_each(CAST(NEW.inputs AS TEXT)) j
        WHERE j.type IN ('text', 'integer', 'true', 'false') AND length(j.key) <= 256 AND length(j.value) <= 256;
END;

INSERT OR IGNORE INTO run_inputs (run_id, key, value)
    SELECT w.id, j.key, CASE j.type WHEN 'text' THEN j.value WHEN 'integer' THEN CAST(j.value AS TEXT) ELSE j.type END
    FROM workflows w, json_each(CAST(w.inputs AS TEXT)) j
    WHERE w.inputs IS NOT NULL AND json_valid(CAST(w.inputs AS TEXT)) AND json_type(CAST(w.inputs AS TEXT)) = 'object'
        AND j.type IN ('text', 'integer', 'true', 'false') AND length(j.key) <= 256 AND length(j.value) <= 256;

-- By tool, worker, error kind and error text: the attempts that called a tool; those run by a
-- pool worker or a queue engine (worker is NULL for a tool run in the engine's process); those
-- that failed, with their message, so a text search reads failed attempts only.
CREATE INDEX step_attempts_tool ON step_attempts(tool, run_id);
CREATE INDEX step_attempts_worker ON step_attempts(worker, run_id) WHERE worker IS NOT NULL;
CREATE INDEX step_attempts_error ON step_attempts(error_kind, run_id, error_message) WHERE error_kind IS NOT NULL;

-- By step status and a step's own error (a step that failed without an attempt: a skipped
-- step's reason, a sub-workflow's failure). Completed, the status of most step rows, is left
-- out of the status index: a search for it walks the newest runs instead (store.RunFilter).
CREATE INDEX workflow_steps_status ON workflow_steps(status, run_id) WHERE status <> 'completed';
CREATE INDEX workflow_steps_error ON workflow_steps(error_kind, run_id, error_message) WHERE error_message <> '';
