-- dcc-flow PostgreSQL schema: an engine that closes hands its runs to the others, and the
-- engine that continues a run takes over the call its former orchestrator left, even one that
-- ended after that orchestrator stopped (docs/operations/cluster.md, "Closing an engine" and "The
-- tool-call queue").
--
-- closing is set when an engine starts to close: the other engines no longer count it as one
-- that can take a run, so two engines closing at once do not hand their runs to each other.
-- Added without a table rewrite (a column with a constant default).
ALTER TABLE engines ADD COLUMN closing BOOLEAN NOT NULL DEFAULT false;

-- The newest call of a step instance, whatever its status (AdoptCall).
CREATE INDEX tool_calls_step ON tool_calls (run_id, step_key, id);
