-- The output lines a step's tool wrote (docs/guide/pools.md "Output"): a JSON array of
-- {"stream", "text", "attempt"} objects, newest last, capped (docs/reference/limits.md "Step output");
-- NULL when there are none (and for every row written before this migration). logs_dropped
-- counts the older lines the cap dropped.
ALTER TABLE workflow_steps ADD COLUMN logs TEXT;
ALTER TABLE workflow_steps ADD COLUMN logs_dropped INTEGER NOT NULL DEFAULT 0;
