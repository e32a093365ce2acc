-- dcc-flow PostgreSQL schema: queueing a call is idempotent, and a call in flight outlives the
-- engine that queued it (docs/operations/cluster.md, "The tool-call queue"). nonce is made by the engine
-- that queues the call: a try sent again after a lost connection (the first may have been
-- applied) finds the row of the first instead of adding a second call. The calls still queued
-- or claimed are found by run and step: an engine that resumes a run whose former orchestrator
-- died (or gave it up) waits for the call that orchestrator left in flight instead of making
-- the call again, and a run that ends cancels the calls it left. Both are added without a table
-- rewrite (a nullable column; partial indexes).
ALTER TABLE tool_calls ADD COLUMN nonce TEXT;
CREATE UNIQUE INDEX tool_calls_nonce ON tool_calls (nonce) WHERE nonce IS NOT NULL;
CREATE INDEX tool_calls_live ON tool_calls (run_id, step_key) WHERE status IN ('queued', 'claimed');
