-- The latest progress a step's tool reported (docs/reference/python/tool-calls.md "Progress and logs"): a JSON
-- object {"done", "total"?, "message"?, "attempt"}; NULL when the tool reported none (and for
-- every row written before this migration).
ALTER TABLE workflow_steps ADD COLUMN progress TEXT;
