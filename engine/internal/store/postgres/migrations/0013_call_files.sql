-- dcc-flow PostgreSQL schema: the files a queued call read and wrote and the environment it ran
-- in cross the tool-call queue with its outcome (docs/operations/cluster.md, "The tool-call
-- queue"; docs/guide/assets.md), so that the orchestrating engine hashes and records them with
-- the attempt as for a call it ran itself. files is a JSON array of {"path", "role"} (the paths
-- as the engine that ran the call resolved them: absolute), '[]' for none; env a JSON object,
-- NULL for none. Written with the outcome, for a success and a failure alike. Added without a
-- table rewrite (a constant default; a nullable column).
ALTER TABLE tool_calls ADD COLUMN files TEXT NOT NULL DEFAULT '[]';
ALTER TABLE tool_calls ADD COLUMN env TEXT;
